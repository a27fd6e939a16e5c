// The transpose lesson (the classic matTransposeNoBankConflict), three kernels side by side.
//
// out = in^T for an n x n fp32 matrix, row-major and contiguous. Every kernel has the same geometry:
// a block of TILE x ROWS = 32 x 8 threads moves one 32 x 32 tile, each thread four rows of it, so the
// only difference between them is the lesson's:
//
//   transpose_naive     reads a row of `in` (a warp: 128 consecutive bytes, coalesced) and writes it
//                       down a column of `out` (a warp: 32 addresses n * 4 bytes apart, 32 sectors).
//   transpose_tiled<0>  stages the tile in shared memory so both global accesses are along rows; but
//                       reading the tile down a column, tile[threadIdx.x][c], puts all 32 lanes of a
//                       warp in bank c % 32: a 32-way bank conflict, 32 shared-memory wavefronts a read.
//   transpose_tiled<1>  pads each tile row to 33 floats: lane x reads word 33 x + c, bank (x + c) % 32,
//                       32 different banks, one wavefront.
//
// Every global access is bounds-checked, so any n >= 1 works (tiles overhanging the matrix move only
// what is inside it). No headers: NVRTC (cupy.RawModule) and nvcc compile it alike.

constexpr int TILE = 32;
constexpr int ROWS = 8;

__global__ void __launch_bounds__(TILE * ROWS)
transpose_naive(const float* __restrict__ in, float* __restrict__ out, int n) {
    const int x = blockIdx.x * TILE + threadIdx.x;  // column of `in`, row of `out`
    const int y = blockIdx.y * TILE + threadIdx.y;
    if (x >= n) return;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        if (y + j < n) out[static_cast<long long>(x) * n + (y + j)] = in[static_cast<long long>(y + j) * n + x];
    }
}

template <int PAD>
__global__ void __launch_bounds__(TILE * ROWS)
transpose_tiled(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float tile[TILE][TILE + PAD];

    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {  // rows of `in`: coalesced; tile rows: consecutive banks
        if (x < n && y + j < n) tile[threadIdx.y + j][threadIdx.x] = in[static_cast<long long>(y + j) * n + x];
    }
    __syncthreads();

    x = blockIdx.y * TILE + threadIdx.x;  // the transposed tile: rows of `out`, coalesced again
    y = blockIdx.x * TILE + threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {  // a column of the tile: PAD = 0 is a 32-way conflict
        if (x < n && y + j < n) out[static_cast<long long>(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
template __global__ void transpose_tiled<0>(const float*, float*, int);
template __global__ void transpose_tiled<1>(const float*, float*, int);
#endif
