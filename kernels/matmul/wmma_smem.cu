// fp16/bf16 matmul C = A B, block-tiled WMMA with a cp.async multi-stage pipeline.
//
// A is M x K, B is K x N, C is M x N, all row-major and contiguous, 16-bit
// (fp16 or bf16); products accumulate in fp32 and C is rounded to 16 bits.
//
// One block of WARPS_M x WARPS_N warps owns a BM x BN tile of C; warp (wm, wn)
// owns the WM x WN sub-tile (WM = BM / WARPS_M, WN = BN / WARPS_N) at
// (wm·WM, wn·WN), a grid of FM x FN 16x16 fp32 accumulator fragments (the
// default 128x128 tile and 4 warps: 2 x 2 warps of 64x64, 4 x 4 fragments).
// K is walked BK at a time. The BM x BK tile of A and the BK x BN tile of B live
// in shared memory in STAGES buffers; each buffer is filled with 16-byte
// cp.async copies issued STAGES - 1 tiles ahead, so while tile t is multiplied
// the copies of tiles t+1 .. t+STAGES-1 are in flight:
//
//   prologue: issue tiles 0 .. STAGES-2, one commit group each
//   for t:    wait until tile t's group is done (wait_group STAGES-2); __syncthreads
//             (tile t is visible to all, and every warp is done with tile t-1);
//             issue tile t+STAGES-1 into tile t-1's buffer; commit;
//             for each k16 step: load FM A and FN B fragments from shared memory
//             (ldmatrix underneath; see kbench_wmma::load_shared for bf16, PTX_LOADS) and do
//             FM x FN mma_sync
//
// Shared rows are padded by 8 elements (16 bytes): a row of A is BK + 8
// elements, of B BN + 8, so the 8 rows an ldmatrix reads (and the 16-byte
// cp.async stores of a warp) fall in 8 different 16-byte bank groups.
//
// Edges. Copies of 16-byte chunks past M, N or K use cp.async's src-size 0,
// which writes zeros (the source address is then clamped to the matrix start),
// so the tiles are zero-padded and the products are exact. A chunk is wholly
// inside or outside the matrix only when K % 8 == 0 (A) and N % 8 == 0 (B), and
// cp.async needs 16-byte aligned sources; when the host cannot promise that it
// launches ASYNC = false, which copies element by element with plain loads and
// bounds checks into the same buffers (slow, but right for any M, N, K: odd K
// or N such as 1000 x 777 x 333). The epilogue goes through shared memory, one
// 16x16 fragment at a time per warp: stored as fp32, rounded to 16 bits by each
// lane (8 elements of one row), and written with bounds checks (one 16-byte
// store when the 8 elements are inside C and ASYNC holds).
//
// Registers. A 64x64 warp tile keeps 128 fp32 accumulators a thread. Each k16 step loads the warp's
// FM fragments of A, then B's fragments one column at a time, each used by FM mma_sync before the
// next is loaded, and a thread's cp.async copies are one pointer and one offset per matrix
// (AsyncCopies): with MIN_BLOCKS = 3 (__launch_bounds__) ptxas fits the 4-warp block in 168 registers,
// three blocks an SM (32-deep k-tiles without PREFETCH spill 40-48 bytes, the second set of fragments
// much more); MIN_BLOCKS = 1 leaves it two blocks and no spills.
//
// Blocks are numbered along N within groups of GROUP_M block rows (as Triton's
// matmul tutorial does), so blocks that run together share A and B tiles in L2.
//
// Shared memory is dynamic: STAGES·(BM·(BK+8) + BK·(BN+8))·2 bytes, at least
// WARPS·1 KiB for the epilogue (the host computes the same number).

#include "kbench_ptx.cuh"
#include "kbench_wmma.cuh"

namespace kbench_wmma_smem {

using namespace kbench_ptx;

// Copy the ROWS x COLS tile at (row0, col0) of a row-major rows x cols matrix into shared memory
// (row pitch LD), element by element, with zeros where the tile overhangs the matrix.
template <int ROWS, int COLS, int LD, int THREADS>
__device__ __forceinline__ void load_tile(unsigned short* dst, const unsigned short* src, int rows, int cols,
                                          int row0, int col0, int tid) {
    static_assert((ROWS * COLS) % THREADS == 0, "the block copies whole tiles");
#pragma unroll 4
    for (int i = 0; i < ROWS * COLS / THREADS; ++i) {
        const int idx = tid + i * THREADS;
        const int r = idx / COLS;
        const int c = idx % COLS;
        const int gr = row0 + r;
        const int gc = col0 + c;
        dst[r * LD + c] = (gr < rows && gc < cols) ? src[static_cast<long long>(gr) * cols + gc]
                                                   : static_cast<unsigned short>(0);
    }
}

// Copy the BM x BK tile of A at (m0, k0) and the BK x BN tile of B at (k0, n0) into one
// pipeline stage, element by element, with zeros where they overhang M, N or K (the path for
// shapes the 16-byte cp.async copies of AsyncCopies cannot take).
template <int BM, int BN, int BK, int THREADS>
__device__ __forceinline__ void load_stage(unsigned short* sa, unsigned short* sb, const unsigned short* A,
                                           const unsigned short* B, int M, int N, int K, int m0, int n0, int k0,
                                           int tid) {
    load_tile<BM, BK, BK + 8, THREADS>(sa, A, M, K, m0, k0, tid);
    load_tile<BK, BN, BN + 8, THREADS>(sb, B, K, N, k0, n0, tid);
}

// The 16-byte cp.async copies of one thread, worked out once. Chunk i of the A tile is row
// tid / A_CHUNKS + i·A_ROW_STEP, column (tid % A_CHUNKS)·8, and of the B tile row tid / B_CHUNKS +
// i·B_ROW_STEP, column (tid % B_CHUNKS)·8: a thread's copies of one tile are a fixed stride apart, so
// it keeps one source pointer and one shared offset per matrix (and which of its rows of A are inside
// M) and each k-tile only adds k0. Few registers: the accumulators need most of them.
template <int BM, int BN, int BK, int THREADS>
struct AsyncCopies {
    static constexpr int LDA = BK + 8, LDB = BN + 8;
    static constexpr int A_CHUNKS = BK / 8, B_CHUNKS = BN / 8;  // 16-byte chunks in a tile row
    static_assert(THREADS % A_CHUNKS == 0 && THREADS % B_CHUNKS == 0, "a thread copies one column of chunks");
    static constexpr int A_ROW_STEP = THREADS / A_CHUNKS, B_ROW_STEP = THREADS / B_CHUNKS;
    static_assert(BM % A_ROW_STEP == 0 && BK % B_ROW_STEP == 0, "the block copies whole tiles");
    static constexpr int A_COPIES = BM / A_ROW_STEP, B_COPIES = BK / B_ROW_STEP;

    const unsigned short* a_src;  // chunk 0 of A at k0 = 0 (read only where its row is inside M)
    const unsigned short* b_src;  // chunk 0 of B at k0 = 0 (read only where its column is inside N)
    unsigned a_dst, b_dst;        // byte offsets of chunk 0 within a stage
    int a_k, b_k;                 // the chunks' column of A (row of B) within the tile
    unsigned a_row_inside = 0;    // bit i: copy i's row of A is inside M
    bool b_col_inside;            // this thread's column of B is inside N

    __device__ __forceinline__ AsyncCopies(const unsigned short* A, const unsigned short* B, int M, int N, int K,
                                           int m0, int n0, int tid) {
        const int ar = tid / A_CHUNKS, ac = (tid % A_CHUNKS) * 8;
        a_dst = (ar * LDA + ac) * 2;
        a_k = ac;
#pragma unroll
        for (int i = 0; i < A_COPIES; ++i) a_row_inside |= unsigned(m0 + ar + i * A_ROW_STEP < M) << i;
        a_src = A + static_cast<long long>(m0 + ar) * K + ac;
        const int br = tid / B_CHUNKS, bc = (tid % B_CHUNKS) * 8;
        b_dst = (br * LDB + bc) * 2;
        b_k = br;
        b_col_inside = n0 + bc < N;
        b_src = B + static_cast<long long>(br) * N + n0 + bc;
    }

    // Issue the copies of the tiles at k0 into the stage at shared addresses sa, sb.
    // A chunk is wholly inside or outside K (K % 8 == 0); outside, src-size 0 writes zeros
    // and the source is the matrix's first element.
    __device__ __forceinline__ void issue(unsigned sa, unsigned sb, const unsigned short* A,
                                          const unsigned short* B, int N, int K, int k0) const {
        const bool a_k_inside = k0 + a_k < K;
        const unsigned short* a = a_src + k0;
#pragma unroll
        for (int i = 0; i < A_COPIES; ++i) {
            const bool valid = ((a_row_inside >> i) & 1) && a_k_inside;
            cp_async_16(sa + a_dst + i * A_ROW_STEP * LDA * 2, valid ? a + static_cast<long long>(i) * A_ROW_STEP * K : A,
                        valid ? 16 : 0);
        }
        const unsigned short* b = b_src + static_cast<long long>(k0) * N;
#pragma unroll
        for (int i = 0; i < B_COPIES; ++i) {
            const bool valid = b_col_inside && k0 + b_k + i * B_ROW_STEP < K;
            cp_async_16(sb + b_dst + i * B_ROW_STEP * LDB * 2, valid ? b + static_cast<long long>(i) * B_ROW_STEP * N : B,
                        valid ? 16 : 0);
        }
    }
};

}  // namespace kbench_wmma_smem

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool BF16, bool ASYNC, bool PTX_LOADS,
          int MIN_BLOCKS, bool PREFETCH>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32, MIN_BLOCKS)
matmul_wmma_smem(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
                 unsigned short* __restrict__ C, int M, int N, int K, int group_m) {
    using namespace nvcuda;
    using namespace kbench_wmma_smem;
    using namespace kbench_ptx;
    using kbench_wmma::Element;
    using T = typename Element<BF16>::T;
    constexpr int THREADS = WARPS_M * WARPS_N * 32;
    constexpr int WM = BM / WARPS_M;  // warp tile
    constexpr int WN = BN / WARPS_N;
    constexpr int FM = WM / 16;  // fragments per warp
    constexpr int FN = WN / 16;
    constexpr int LDA = BK + 8;  // padded shared rows (elements)
    constexpr int LDB = BN + 8;
    constexpr int A_STAGE = BM * LDA;  // elements per stage
    constexpr int B_STAGE = BK * LDB;
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "warp tiles and BK are multiples of 16");
    static_assert(STAGES >= 2, "a pipeline has at least two stages");

    extern __shared__ __align__(128) unsigned short smem[];
    unsigned short* sA = smem;                     // STAGES x [BM][LDA]
    unsigned short* sB = smem + STAGES * A_STAGE;  // STAGES x [BK][LDB]

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wm = warp / WARPS_N;
    const int wn = warp % WARPS_N;

    // Block -> (block row, block column), column-fastest within groups of group_m block rows.
    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int per_group = group_m * tiles_n;
    const int group = blockIdx.x / per_group;
    const int first_m = group * group_m;
    const int rows_here = min(tiles_m - first_m, group_m);
    const int in_group = blockIdx.x % per_group;
    const int m0 = (first_m + in_group % rows_here) * BM;
    const int n0 = (in_group / rows_here) * BN;

    const int k_tiles = (K + BK - 1) / BK;

    const AsyncCopies<BM, BN, BK, THREADS> copies(A, B, M, N, K, m0, n0, tid);  // used when ASYNC
    const unsigned sA_addr = smem_addr(sA), sB_addr = smem_addr(sB);
    auto load_tile = [&](int stage, int k0) {
        if (ASYNC)
            copies.issue(sA_addr + stage * A_STAGE * 2, sB_addr + stage * B_STAGE * 2, A, B, N, K, k0);
        else
            load_stage<BM, BN, BK, THREADS>(sA + stage * A_STAGE, sB + stage * B_STAGE, A, B, M, N, K, m0, n0, k0,
                                            tid);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_tile(s, s * BK);
        cp_async_commit();  // one group per tile, empty or not, so the counting below holds
    }

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
    using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
    auto a_tile = [&](int t) { return sA + (t % STAGES) * A_STAGE + (wm * WM) * LDA; };
    auto b_tile = [&](int t) { return sB + (t % STAGES) * B_STAGE + wn * WN; };

    if constexpr (!PREFETCH) {
        for (int t = 0; t < k_tiles; ++t) {
            // Groups committed so far: STAGES - 1 + t. Leaving STAGES - 2 pending means groups
            // 0 .. t, hence tile t, are complete (for this thread's copies; the barrier for all).
            cp_async_wait<STAGES - 2>();
            __syncthreads();

            const int next = t + STAGES - 1;  // goes into tile t-1's buffer, which every warp is done with
            if (next < k_tiles) load_tile(next % STAGES, next * BK);
            cp_async_commit();

#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                // All of A's fragments, then B's one column at a time: FM + 1 fragments live besides the
                // accumulators rather than FM + FN, which is what lets MIN_BLOCKS = 3 fit (see the header).
                FragA a[FM];
#pragma unroll
                for (int i = 0; i < FM; ++i)
                    kbench_wmma::load_shared<PTX_LOADS, BF16>(a[i], a_tile(t) + (i * 16) * LDA + kk, LDA);
#pragma unroll
                for (int j = 0; j < FN; ++j) {
                    FragB b;
                    kbench_wmma::load_shared<PTX_LOADS, BF16>(b, b_tile(t) + kk * LDB + j * 16, LDB);
#pragma unroll
                    for (int i = 0; i < FM; ++i) wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
                }
            }
        }
    } else {
        // PREFETCH: the fragments of the next k16 step are loaded while this step's mma_sync run, into
        // a second set of registers, across tiles too: the barrier that makes tile t+1 visible comes
        // before tile t's last step (as CUTLASS's multistage loop does), so no step starts on an empty
        // set of fragments.
        FragA a[2][FM];
        FragB b[2][FN];
        auto load_fragments = [&](int t, int kk, FragA(&fa)[FM], FragB(&fb)[FN]) {
#pragma unroll
            for (int i = 0; i < FM; ++i)
                kbench_wmma::load_shared<PTX_LOADS, BF16>(fa[i], a_tile(t) + (i * 16) * LDA + kk, LDA);
#pragma unroll
            for (int j = 0; j < FN; ++j)
                kbench_wmma::load_shared<PTX_LOADS, BF16>(fb[j], b_tile(t) + kk * LDB + j * 16, LDB);
        };
        constexpr int STEPS = BK / 16;
        cp_async_wait<STAGES - 2>();  // tile 0
        __syncthreads();
        load_fragments(0, 0, a[0], b[0]);
        for (int t = 0; t < k_tiles; ++t) {
            // Tile t is visible and its first step's fragments are in a[0], b[0]. Every warp is done
            // reading tile t-1 (its last reads came before the barrier in that tile's last step).
            const int next = t + STAGES - 1;
            if (next < k_tiles) load_tile(next % STAGES, next * BK);
            cp_async_commit();
#pragma unroll
            for (int step = 0; step < STEPS; ++step) {
                const int cur = step % 2;
                if (step == STEPS - 1) {
                    // Groups committed: STAGES + t; STAGES - 2 pending leaves tiles 0 .. t+1 complete.
                    cp_async_wait<STAGES - 2>();
                    __syncthreads();
                    if (t + 1 < k_tiles) load_fragments(t + 1, 0, a[(step + 1) % 2], b[(step + 1) % 2]);
                } else {
                    load_fragments(t, (step + 1) * 16, a[(step + 1) % 2], b[(step + 1) % 2]);
                }
#pragma unroll
                for (int i = 0; i < FM; ++i)
#pragma unroll
                    for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[cur][i], b[cur][j], acc[i][j]);
            }
            if constexpr (STEPS % 2 == 1) {  // the next tile's first fragments landed in set 1: move them
#pragma unroll
                for (int i = 0; i < FM; ++i) a[0][i] = a[1][i];
#pragma unroll
                for (int j = 0; j < FN; ++j) b[0][j] = b[1][j];
            }
        }
    }

    // Epilogue: the pipeline buffers become one 16x16 fp32 scratch tile per warp.
    cp_async_wait<0>();
    __syncthreads();
    float* scratch = reinterpret_cast<float*>(smem) + warp * 16 * 16;
    const int r = lane / 2;         // each lane: row r of the fragment,
    const int c8 = (lane % 2) * 8;  // columns c8 .. c8 + 7
#pragma unroll
    for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int row = m0 + wm * WM + i * 16 + r;
            const int col = n0 + wn * WN + j * 16 + c8;
            if (row < M) {
                const float4 lo = *reinterpret_cast<const float4*>(scratch + r * 16 + c8);
                const float4 hi = *reinterpret_cast<const float4*>(scratch + r * 16 + c8 + 4);
                const unsigned p[4] = {pack2<BF16>(lo.x, lo.y), pack2<BF16>(lo.z, lo.w), pack2<BF16>(hi.x, hi.y),
                                       pack2<BF16>(hi.z, hi.w)};
                unsigned short* dst = C + static_cast<long long>(row) * N + col;
                if (ASYNC && col + 8 <= N) {
                    // N % 8 == 0 and C 16-byte aligned: one aligned 16-byte store.
                    *reinterpret_cast<uint4*>(dst) = make_uint4(p[0], p[1], p[2], p[3]);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        if (col + e < N) dst[e] = static_cast<unsigned short>(p[e / 2] >> (16 * (e % 2)));
                }
            }
            __syncwarp();  // every lane has read the scratch tile before the next fragment overwrites it
        }
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
#define KBENCH_WMMA_SMEM_ONE(BM, BN, BK, WM, WN, S, BF16, ASYNC, PTX, MINB, PF)                            \
    template __global__ void matmul_wmma_smem<BM, BN, BK, WM, WN, S, BF16, ASYNC, PTX, MINB, PF>(           \
        const unsigned short*, const unsigned short*, unsigned short*, int, int, int, int);
#define KBENCH_WMMA_SMEM(BM, BN, BK, WM, WN, S, MINB, PF)                          \
    KBENCH_WMMA_SMEM_ONE(BM, BN, BK, WM, WN, S, false, true, false, MINB, PF)      \
    KBENCH_WMMA_SMEM_ONE(BM, BN, BK, WM, WN, S, true, true, false, MINB, PF)       \
    KBENCH_WMMA_SMEM_ONE(BM, BN, BK, WM, WN, S, false, false, false, MINB, PF)     \
    KBENCH_WMMA_SMEM_ONE(BM, BN, BK, WM, WN, S, true, false, false, MINB, PF)      \
    KBENCH_WMMA_SMEM_ONE(BM, BN, BK, WM, WN, S, false, true, true, MINB, PF)       \
    KBENCH_WMMA_SMEM_ONE(BM, BN, BK, WM, WN, S, true, true, true, MINB, PF)
KBENCH_WMMA_SMEM(128, 128, 32, 2, 4, 3, 1, false)
KBENCH_WMMA_SMEM(128, 128, 32, 2, 2, 3, 1, false)
KBENCH_WMMA_SMEM(128, 256, 32, 2, 4, 3, 1, false)
KBENCH_WMMA_SMEM(128, 128, 64, 2, 4, 3, 1, false)
KBENCH_WMMA_SMEM(128, 128, 64, 2, 2, 3, 1, false)
KBENCH_WMMA_SMEM(128, 128, 32, 2, 4, 4, 1, false)
KBENCH_WMMA_SMEM(128, 128, 32, 2, 2, 4, 1, false)
KBENCH_WMMA_SMEM(128, 128, 32, 2, 2, 4, 3, false)
KBENCH_WMMA_SMEM(128, 128, 32, 2, 2, 3, 3, false)
KBENCH_WMMA_SMEM(128, 128, 32, 2, 2, 4, 1, true)
KBENCH_WMMA_SMEM(128, 128, 32, 2, 2, 3, 1, true)
KBENCH_WMMA_SMEM(128, 128, 64, 2, 2, 3, 1, true)
KBENCH_WMMA_SMEM(128, 128, 16, 2, 2, 4, 1, true)
#endif
