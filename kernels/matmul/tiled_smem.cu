// fp32 matmul C = A B, the classic shared-memory tiled kernel.
//
// A is M x K, B is K x N, C is M x N, all row-major and contiguous, fp32.
// One thread block of TILE x TILE threads owns one TILE x TILE tile of C; each
// thread computes one element. K is walked TILE columns at a time: the block
// copies a TILE x TILE tile of A and one of B into shared memory (one element
// per thread, zero where the tile overhangs M, N or K), synchronises, and every
// thread accumulates TILE products from shared memory with fp32 FMA.
//
// Every global load and store is bounds-checked, so any M, N, K >= 1 works: the
// zeros loaded past K add nothing, and rows/columns past M/N are never stored.
//
// No headers: NVRTC (cupy.RawModule) and nvcc compile it alike.

template <int TILE>
__global__ void __launch_bounds__(TILE * TILE)
matmul_tiled_smem(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                  int M, int N, int K) {
    __shared__ float As[TILE][TILE];  // As[r][k] = A[row0 + r][k0 + k]
    __shared__ float Bs[TILE][TILE];  // Bs[k][c] = B[k0 + k][col0 + c]

    const int tx = threadIdx.x;  // column within the tile
    const int ty = threadIdx.y;  // row within the tile
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;

    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // Consecutive tx read consecutive addresses of one row: coalesced.
        As[ty][tx] = (row < M && k0 + tx < K) ? A[static_cast<long long>(row) * K + (k0 + tx)] : 0.f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[static_cast<long long>(k0 + ty) * N + col] : 0.f;
        __syncthreads();
        // As[ty][k]: one address per row of threads (broadcast); Bs[k][tx]: consecutive banks.
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();  // every thread is done with the tiles before they are overwritten
    }
    if (row < M && col < N) C[static_cast<long long>(row) * N + col] = acc;
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
template __global__ void matmul_tiled_smem<16>(const float*, const float*, float*, int, int, int);
template __global__ void matmul_tiled_smem<32>(const float*, const float*, float*, int, int, int);
#endif
