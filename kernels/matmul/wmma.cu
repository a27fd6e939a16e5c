// fp16/bf16 matmul C = A B with the WMMA API, one warp per 16x16 tile of C.
//
// A is M x K, B is K x N, C is M x N, all row-major and contiguous, 16-bit
// (fp16 or bf16); products accumulate in fp32 and C is rounded to 16 bits.
//
// The floor of tensor-core matmuls: a block of WARPS_M x WARPS_N warps covers a
// (16·WARPS_M) x (16·WARPS_N) tile of C, and each warp owns one 16x16 tile of
// it on its own (no shared tiles, no block barrier). For every k16 step the warp
// loads a 16x16 fragment of A and one of B and does one mma_sync into its fp32
// accumulator fragment. Nothing is reused across warps: every fragment is read
// straight from global memory (and L1/L2), which is what the blocked kernel
// (wmma_smem.cu) improves on.
//
// Edges. wmma::load_matrix_sync reads a whole 16x16 tile and needs a 32-byte
// aligned pointer and a leading dimension that is a multiple of 8 elements, so
// the direct load is used only when the host says it may (`direct`: K % 8 == 0,
// N % 8 == 0, A and B 32-byte aligned, C 16-byte aligned) and the 16x16 tiles
// of A and B lie wholly inside the matrices. Otherwise (tiles overhanging M, N
// or K, or any K or N not a multiple of 8) the warp stages the tiles through its
// own shared memory: each lane copies 8 elements of each with bounds checks,
// zeros elsewhere, and the fragments are loaded from there (ldm 16). The
// accumulator always goes out through shared memory: stored as fp32, rounded to
// 16 bits by each lane, and written with bounds checks (16-byte stores when the
// row segment is inside C and `direct` holds).

#include "kbench_ptx.cuh"
#include "kbench_wmma.cuh"

template <int WARPS_M, int WARPS_N, bool BF16>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32)
matmul_wmma(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
            unsigned short* __restrict__ C, int M, int N, int K, int direct) {
    using namespace nvcuda;
    using T = typename kbench_wmma::Element<BF16>::T;
    constexpr int WARPS = WARPS_M * WARPS_N;

    // Per warp: a 16x16 A and B tile for the staged loads, a 16x16 fp32 tile for the output.
    __shared__ __align__(128) unsigned short stage_a[WARPS][16 * 16];
    __shared__ __align__(128) unsigned short stage_b[WARPS][16 * 16];
    __shared__ __align__(128) float stage_c[WARPS][16 * 16];

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int row0 = (blockIdx.y * WARPS_M + warp / WARPS_N) * 16;
    const int col0 = (blockIdx.x * WARPS_N + warp % WARPS_N) * 16;
    if (row0 >= M || col0 >= N) return;  // the whole warp: this kernel has no block barrier

    unsigned short* sa = stage_a[warp];
    unsigned short* sb = stage_b[warp];
    float* sc = stage_c[warp];
    // Each lane copies / writes 8 consecutive elements: row lane / 2, columns c8 .. c8 + 7.
    const int r = lane / 2;
    const int c8 = (lane % 2) * 8;

    const bool inside = direct && row0 + 16 <= M && col0 + 16 <= N;
    const unsigned short* a_rows = A + static_cast<long long>(row0) * K;  // A[row0][0]

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.f);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;

    for (int k0 = 0; k0 < K; k0 += 16) {
        if (inside && k0 + 16 <= K) {
            // Fast path: fragments straight from global memory (row0, col0, k0 multiples of 16).
            wmma::load_matrix_sync(a, reinterpret_cast<const T*>(a_rows + k0), K);
            wmma::load_matrix_sync(b, reinterpret_cast<const T*>(B + static_cast<long long>(k0) * N + col0), N);
        } else {
            // Slow path: zero-padded copies of the overhanging tiles in shared memory.
            const bool a_row = row0 + r < M;
            const bool b_row = k0 + r < K;
            const unsigned short* a_src = a_rows + static_cast<long long>(r) * K + k0 + c8;
            const unsigned short* b_src = B + static_cast<long long>(k0 + r) * N + col0 + c8;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                sa[r * 16 + c8 + e] = (a_row && k0 + c8 + e < K) ? a_src[e] : static_cast<unsigned short>(0);
                sb[r * 16 + c8 + e] = (b_row && col0 + c8 + e < N) ? b_src[e] : static_cast<unsigned short>(0);
            }
            __syncwarp();
            wmma::load_matrix_sync(a, reinterpret_cast<const T*>(sa), 16);
            wmma::load_matrix_sync(b, reinterpret_cast<const T*>(sb), 16);
            __syncwarp();  // every lane has its fragments before any lane refills the tiles
        }
        wmma::mma_sync(acc, a, b, acc);
    }

    // Out through shared memory: fp32 tile, rounded to 16 bits per lane, bounds-checked stores.
    wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
    __syncwarp();
    const int row = row0 + r;
    if (row < M) {
        const float4 lo = *reinterpret_cast<const float4*>(sc + r * 16 + c8);
        const float4 hi = *reinterpret_cast<const float4*>(sc + r * 16 + c8 + 4);
        const unsigned p[4] = {kbench_ptx::pack2<BF16>(lo.x, lo.y), kbench_ptx::pack2<BF16>(lo.z, lo.w),
                               kbench_ptx::pack2<BF16>(hi.x, hi.y), kbench_ptx::pack2<BF16>(hi.z, hi.w)};
        const int col = col0 + c8;
        unsigned short* dst = C + static_cast<long long>(row) * N + col;
        if (direct && col + 8 <= N) {
            // N % 8 == 0 and C 16-byte aligned: the 8 elements are one aligned 16-byte store.
            *reinterpret_cast<uint4*>(dst) = make_uint4(p[0], p[1], p[2], p[3]);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (col + e < N) dst[e] = static_cast<unsigned short>(p[e / 2] >> (16 * (e % 2)));
        }
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
#define KBENCH_WMMA(WM, WN)                                                                                \
    template __global__ void matmul_wmma<WM, WN, false>(const unsigned short*, const unsigned short*,      \
                                                        unsigned short*, int, int, int, int);              \
    template __global__ void matmul_wmma<WM, WN, true>(const unsigned short*, const unsigned short*,       \
                                                       unsigned short*, int, int, int, int);
KBENCH_WMMA(2, 2)
KBENCH_WMMA(4, 2)
KBENCH_WMMA(1, 1)
#endif
