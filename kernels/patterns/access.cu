// The access lesson (the classic rowAccess / columnAccess): the same copy, out = in, of an
// n x n fp32 matrix with the warp laid along a row or down a column.
//
// Coalescing is about the lanes of one warp at one instruction: with the lanes on consecutive
// columns a warp reads 128 consecutive bytes (4 sectors of 32 bytes); with the lanes on consecutive
// rows its 32 addresses lie n * 4 bytes apart and touch 32 sectors, each for 4 useful bytes.
// (The classic listing has the labels the other way round: its "row access" kernel, one thread per
// row walking the columns, is the strided one, since neighbouring threads are a row apart.)
//
// Both kernels have the same geometry, a block of 32 x 8 threads copying one 32 x 32 tile, each
// thread four elements; only the lane-to-element mapping differs. Bounds-checked for any n >= 1.

constexpr int TILE = 32;
constexpr int ROWS = 8;

template <bool STRIDED>
__global__ void __launch_bounds__(TILE * ROWS)
copy_access(const float* __restrict__ in, float* __restrict__ out, int n) {
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        const int lane_offset = threadIdx.x;  // 0..31: the lanes of a warp
        const int other = threadIdx.y + j;
        const int row = blockIdx.y * TILE + (STRIDED ? lane_offset : other);
        const int col = blockIdx.x * TILE + (STRIDED ? other : lane_offset);
        if (row < n && col < n) {
            const long long k = static_cast<long long>(row) * n + col;
            out[k] = in[k];
        }
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
template __global__ void copy_access<false>(const float*, float*, int);
template __global__ void copy_access<true>(const float*, float*, int);
#endif
