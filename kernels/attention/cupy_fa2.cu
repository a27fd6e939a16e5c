// FlashAttention-2 forward, by hand: mma.sync tensor-core PTX, ldmatrix, cp.async.
//
// One thread block owns BLOCK_M query rows of one (batch, head); its WARPS warps
// split those rows (split-Q: ROWS = BLOCK_M / WARPS rows each, no inter-warp
// reduction) and share the K/V tiles, which stream through shared memory in
// BLOCK_N-row tiles with cp.async, double-buffered: tile j+1 loads while tile j
// computes. Per tile and warp:
//   S = Q Kᵀ            mma.m16n8k16, A = Q from smem (ldmatrix), B = K rows (ldmatrix)
//   online softmax      row max / sum over the 4 lanes of a quad (__shfl_xor_sync),
//                       exp2 with scale·log2(e) folded in, O rescaled when a row's maximum
//                       moves (MARGIN: only past a margin of 2^8), no division yet
//   O += P V            A = P straight from the S accumulators (the m16n8 C layout is
//                       the m16k16 A layout), B = V rows through ldmatrix.trans
// and O / l once at the end (deferred normalisation), optionally the log-sum-exp.
//
// Shared memory rows are D halves (128 or 256 bytes); by default 16-byte chunk c
// of row r is stored at chunk c ^ (r % 8) (XOR swizzle), so the 8 row addresses of
// every ldmatrix 8x8 matrix, and the cp.async stores of a warp, hit 8 different
// bank groups (see Tile below for the padded and plain layouts it is measured against).
//
// No CUDA headers, so NVRTC (cupy.RawModule) and nvcc compile it alike: elements
// are raw 16-bit patterns, converted with cvt.rn.{f16,bf16}x2.f32. The PTX
// wrappers (pack2, ldmatrix, cp.async, mma.sync, exp2) are shared with the other kernels.

#include "kbench_ptx.cuh"

using namespace kbench_ptx;

// MARGIN kernels: how far (log2 units) a K/V tile's largest score may pass a row's running maximum
// before the maximum moves and O is rescaled (P stays below 2^8).
constexpr float RESCALE_LOG2 = 8.f;

// Shared-memory layouts of a tile whose rows are D 16-bit elements:
//   SWIZZLE  chunk c of row r at chunk c ^ (r % 8): no bank conflicts, no padding
//   PAD      rows padded by 16 bytes: no bank conflicts, 16 bytes a row more
//   PLAIN    rows back to back: the 8 rows of an ldmatrix 8x8 share banks (8-way conflicts)
// (the layout is a parameter so that what swizzling buys can be measured).
enum Layout { SWIZZLE = 0, PAD = 1, PLAIN = 2 };

// The order in which blocks take query tiles (the host's ORDERS; see fa2_forward). Under a causal
// mask the last query tile of a head visits every K/V tile and the first only one, so which run
// first decides how ragged the end of the launch is.
enum Order { ORDER_ROWS = 0, ORDER_REVERSE = 1, ORDER_HEAVIEST = 2 };

template <int D, int LAYOUT>
struct Tile {
    static constexpr int ROW_BYTES = D * 2 + (LAYOUT == PAD ? 16 : 0);
    // Byte offset of (row, 16-byte chunk).
    static __device__ __forceinline__ unsigned offset(int row, int chunk) {
        const int c = (LAYOUT == SWIZZLE) ? (chunk ^ (row & 7)) : chunk;
        return static_cast<unsigned>(row * ROW_BYTES + (c << 4));
    }
};

// Issue cp.async for a ROWS x D tile starting at global row `row0`; rows >= n are zero-filled.
// Each thread keeps one 16-byte column (chunk) and walks rows ROW_STEP apart; when
// ROW_STEP is a multiple of 8 its swizzled column never changes, so the addresses
// cost two registers instead of one pair per row (which spilled at 255 registers).
template <int ROWS, int D, int THREADS, int LAYOUT>
__device__ __forceinline__ void load_tile(unsigned dst, const unsigned short* src, long long row_stride,
                                          int row0, int n, int tid) {
    constexpr int CHUNKS = D / 8;
    static_assert(THREADS % CHUNKS == 0, "a block must cover whole rows");
    constexpr int ROW_STEP = THREADS / CHUNKS;
    const int chunk = tid % CHUNKS;
    const int first = tid / CHUNKS;
    const unsigned short* col = src + chunk * 8;
    const unsigned column = Tile<D, LAYOUT>::offset(first, chunk) - first * Tile<D, LAYOUT>::ROW_BYTES;
#pragma unroll
    for (int k = 0; k < (ROWS + ROW_STEP - 1) / ROW_STEP; ++k) {
        const int row = first + k * ROW_STEP;
        if (ROWS % ROW_STEP != 0 && row >= ROWS) break;
        const bool valid = row0 + row < n;
        const unsigned to = (ROW_STEP % 8 == 0) ? dst + row * Tile<D, LAYOUT>::ROW_BYTES + column
                                                : dst + Tile<D, LAYOUT>::offset(row, chunk);
        cp_async_16(to, col + (valid ? (row0 + row) * row_stride : 0), valid ? 16 : 0);
    }
}

// load_tile with fewer instructions a copy (the loop's K/V tiles, STEPPED kernels): the thread's first
// row's address is one 64-bit product, each further row ROW_STEP rows on is one 64-bit add, and the
// rows are checked against n only when the tile reaches past n (a test once a tile, the same for the
// whole block); load_tile spends about 14 instructions a copy on its product, check and select.
template <int ROWS, int D, int THREADS, int LAYOUT>
__device__ __forceinline__ void load_tile_stepped(unsigned dst, const unsigned short* src, long long row_stride,
                                                  int row0, int n, int tid) {
    constexpr int CHUNKS = D / 8;
    constexpr int ROW_STEP = THREADS / CHUNKS;
    static_assert(THREADS % CHUNKS == 0 && ROWS % ROW_STEP == 0 && ROW_STEP % 8 == 0,
                  "whole rows, every thread the same number of them, one swizzled column a thread");
    if (row0 + ROWS > n) {
        load_tile<ROWS, D, THREADS, LAYOUT>(dst, src, row_stride, row0, n, tid);
        return;
    }
    const int chunk = tid % CHUNKS;
    const int first = tid / CHUNKS;
    const unsigned to = dst + Tile<D, LAYOUT>::offset(first, chunk);
    const unsigned short* from = src + chunk * 8 + (row0 + first) * row_stride;
    const long long step = ROW_STEP * row_stride;
#pragma unroll
    for (int k = 0; k < ROWS / ROW_STEP; ++k, from += step)
        cp_async_16(to + k * ROW_STEP * Tile<D, LAYOUT>::ROW_BYTES, from, 16);
}

template <int D, int BLOCK_M, int BLOCK_N, int WARPS, bool BF16, bool CAUSAL, int LAYOUT, bool MARGIN,
          bool STEPPED, int ORDER>
__global__ void __launch_bounds__(WARPS * 32)
fa2_forward(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
            const unsigned short* __restrict__ V, unsigned short* __restrict__ O, float* __restrict__ LSE,
            int heads, int n,
            long long q_sb, long long q_sh, long long q_sn,
            long long k_sb, long long k_sh, long long k_sn,
            long long v_sb, long long v_sh, long long v_sn,
            long long o_sb, long long o_sh, long long o_sn,
            float scale_log2) {
    constexpr int THREADS = WARPS * 32;
    constexpr int ROWS = BLOCK_M / WARPS;  // query rows per warp
    constexpr int MT = ROWS / 16;          // m16 tiles per warp
    constexpr int NT = BLOCK_N / 8;        // n8 tiles of S
    constexpr int DT = D / 8;              // n8 tiles of O
    constexpr int KD = D / 16;             // k16 steps of Q Kᵀ
    constexpr int KN = BLOCK_N / 16;       // k16 steps of P V
    static_assert(ROWS % 16 == 0, "each warp needs a multiple of 16 query rows");
    static_assert(BLOCK_N % 16 == 0 && D % 16 == 0, "tiles are multiples of 16");

    using T = Tile<D, LAYOUT>;
    extern __shared__ __align__(128) unsigned short smem[];
    const unsigned sQ = smem_addr(smem);
    const unsigned sK = sQ + BLOCK_M * T::ROW_BYTES;  // two K buffers, then two V buffers
    constexpr unsigned KV_BYTES = BLOCK_N * T::ROW_BYTES;
    const unsigned sV = sK + 2 * KV_BYTES;

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    // Which (query tile, batch x head) this block is. ORDER_ROWS: the grid is (query tiles, B x H),
    // each head's query tiles in order. ORDER_REVERSE: the same grid, each head's last (under a
    // causal mask, heaviest) query tile first. ORDER_HEAVIEST: the grid is (B x H, query tiles), every
    // head's heaviest tile before any head's next, so the lightest tiles fill the end of the launch.
    // (unsigned, as blockIdx is: an unsigned division by heads takes fewer instructions than a signed one)
    const unsigned bh = ORDER == ORDER_HEAVIEST ? blockIdx.x : blockIdx.y;
    const unsigned q_tile = ORDER == ORDER_HEAVIEST ? gridDim.y - 1 - blockIdx.y
                     : ORDER == ORDER_REVERSE  ? gridDim.x - 1 - blockIdx.x
                                               : blockIdx.x;
    const int b = bh / heads;
    const int h = bh % heads;
    const int m0 = q_tile * BLOCK_M;
    const int warp_row0 = m0 + warp * ROWS;
    const unsigned short* q = Q + b * q_sb + h * q_sh;
    const unsigned short* k = K + b * k_sb + h * k_sh;
    const unsigned short* v = V + b * v_sb + h * v_sh;

    int n_tiles = (n + BLOCK_N - 1) / BLOCK_N;
    if (CAUSAL) {  // tiles wholly right of the diagonal are never loaded
        const int last = min(m0 + BLOCK_M, n) - 1;
        n_tiles = min(n_tiles, last / BLOCK_N + 1);
    }

    load_tile<BLOCK_M, D, THREADS, LAYOUT>(sQ, q, q_sn, m0, n, tid);
    load_tile<BLOCK_N, D, THREADS, LAYOUT>(sK, k, k_sn, 0, n, tid);
    load_tile<BLOCK_N, D, THREADS, LAYOUT>(sV, v, v_sn, 0, n, tid);
    cp_async_commit();

    float o[MT][DT][4];
    float row_max[MT][2];
    float row_sum[MT][2];  // this thread's partial sums; the quad adds them at the end
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
        }
        row_max[mt][0] = row_max[mt][1] = neg_inf();
        row_sum[mt][0] = row_sum[mt][1] = 0.f;
    }

    for (int j = 0; j < n_tiles; ++j) {
        const unsigned kbuf = sK + (j & 1) * KV_BYTES;
        const unsigned vbuf = sV + (j & 1) * KV_BYTES;
        cp_async_wait<0>();
        __syncthreads();  // tile j is in; every warp is done with tile j-1's buffers
        if (j + 1 < n_tiles) {
            const unsigned next = ((j + 1) & 1) * KV_BYTES;
            if constexpr (STEPPED) {
                load_tile_stepped<BLOCK_N, D, THREADS, LAYOUT>(sK + next, k, k_sn, (j + 1) * BLOCK_N, n, tid);
                load_tile_stepped<BLOCK_N, D, THREADS, LAYOUT>(sV + next, v, v_sn, (j + 1) * BLOCK_N, n, tid);
            } else {
                load_tile<BLOCK_N, D, THREADS, LAYOUT>(sK + next, k, k_sn, (j + 1) * BLOCK_N, n, tid);
                load_tile<BLOCK_N, D, THREADS, LAYOUT>(sV + next, v, v_sn, (j + 1) * BLOCK_N, n, tid);
            }
        }
        cp_async_commit();

        const int key0 = j * BLOCK_N;
        if (CAUSAL && key0 > warp_row0 + ROWS - 1) continue;  // this warp's rows see none of it

        // ---- S = Q Kᵀ -------------------------------------------------------
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
        for (int kd = 0; kd < KD; ++kd) {
            unsigned a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int row = warp * ROWS + mt * 16 + (lane % 16);
                ldmatrix_x4(a[mt], sQ + T::offset(row, kd * 2 + lane / 16));
            }
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {  // two n8 tiles per ldmatrix.x4
                unsigned bk[4];
                const int row = np * 16 + (lane % 8) + (lane / 16) * 8;
                ldmatrix_x4(bk, kbuf + T::offset(row, kd * 2 + (lane / 8) % 2));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816<BF16>(s[mt][2 * np], a[mt], bk[0], bk[1]);
                    mma_16816<BF16>(s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
                }
            }
        }

        // ---- masks: keys past N, and keys after the query when causal -------
        const bool tail = key0 + BLOCK_N > n;
        const bool diagonal = CAUSAL && key0 + BLOCK_N - 1 > warp_row0;
        if (tail || diagonal) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = key0 + nt * 8 + 2 * (lane % 4) + (e & 1);
                        const int row = warp_row0 + mt * 16 + lane / 4 + (e / 2) * 8;
                        if (col >= n || (CAUSAL && col > row)) s[mt][nt][e] = neg_inf();
                    }
        }

        // ---- online softmax (rows lane/4 and lane/4 + 8 of each m16 tile) ----
        // P is packed to 16-bit pairs as soon as it is computed: the packed pairs
        // are exactly the A fragments of P V, and the fp32 S registers die here.
        unsigned p[MT][NT][2];
        if constexpr (!MARGIN) {  // FlashAttention-2's way: the maximum moves at every new maximum
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float mx = row_max_of<NT>(s[mt], r, row_max[mt][r]);
                    // A row with no visible key yet keeps max -inf: subtract 0 instead of -inf.
                    const float shift = (mx == neg_inf()) ? 0.f : mx * scale_log2;
                    const float alpha = fast_exp2(row_max[mt][r] * scale_log2 - shift);
                    const float sum = exp2_row<NT, BF16>(s[mt], r, scale_log2, shift, p[mt]);
                    row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
                    row_max[mt][r] = mx;
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt) {
                        o[mt][dt][2 * r] *= alpha;
                        o[mt][dt][2 * r + 1] *= alpha;
                    }
                }
            }
        } else {
            // MARGIN: a row's running maximum moves only when the tile's maximum passes it by more than
            // RESCALE_LOG2 (log2 units), so P stays below 2^RESCALE_LOG2 (256, well inside fp16's and
            // bf16's range, as FlashAttention-4's conditional rescaling) and most tiles move no row's
            // maximum; O is rescaled only when some row of the warp moved (alpha is exactly 1 for the
            // others). O / l at the end is the same: the maximum subtracted cancels.
            float alpha[MT][2];
            bool moved = false;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float mx = row_max_of<NT>(s[mt], r, neg_inf());
                    const float old_max = row_max[mt][r];
                    const bool move = mx * scale_log2 > old_max * scale_log2 + RESCALE_LOG2;  // never from -inf to -inf
                    const float new_max = move ? mx : old_max;
                    // A row with no visible key yet keeps max -inf: subtract 0 instead of -inf.
                    const float shift = (new_max == neg_inf()) ? 0.f : new_max * scale_log2;
                    alpha[mt][r] = move ? fast_exp2(old_max * scale_log2 - shift) : 1.f;
                    moved |= move;
                    const float sum = exp2_row<NT, BF16>(s[mt], r, scale_log2, shift, p[mt]);
                    row_sum[mt][r] = row_sum[mt][r] * alpha[mt][r] + sum;
                    row_max[mt][r] = new_max;
                }
            }
            if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) o[mt][dt][e] *= alpha[mt][e / 2];
            }
        }

        // ---- O += P V -------------------------------------------------------
#pragma unroll
        for (int kn = 0; kn < KN; ++kn) {
#pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {  // two n8 tiles of O per ldmatrix.x4.trans
                unsigned bv[4];
                const int row = kn * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
                ldmatrix_x4_trans(bv, vbuf + T::offset(row, dp * 2 + lane / 16));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    // The m16n8 C layout of S tiles 2kn and 2kn+1 is the m16k16 A layout.
                    const unsigned a[4] = {p[mt][2 * kn][0], p[mt][2 * kn][1], p[mt][2 * kn + 1][0],
                                           p[mt][2 * kn + 1][1]};
                    mma_16816<BF16>(o[mt][2 * dp], a, bv[0], bv[1]);
                    mma_16816<BF16>(o[mt][2 * dp + 1], a, bv[2], bv[3]);
                }
            }
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // ---- O / l, once -----------------------------------------------------------
    unsigned short* out = O + b * o_sb + h * o_sh;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = row_sum[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = 1.f / l;
            const int row = warp_row0 + mt * 16 + lane / 4 + r * 8;
            if (row < n) {
                unsigned* dst = reinterpret_cast<unsigned*>(out + row * o_sn + 2 * (lane % 4));
#pragma unroll
                for (int dt = 0; dt < DT; ++dt)
                    dst[dt * 4] = pack2<BF16>(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
                if (LSE != nullptr && lane % 4 == 0)  // natural-log log-sum-exp of the scaled scores
                    LSE[static_cast<long long>(bh) * n + row] =
                        (row_max[mt][r] * scale_log2 + log2f(l)) * 0.6931471805599453f;
            }
        }
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): instantiate the configurations kbench launches.
#define KBENCH_FA2_ONE(D, BM, BN, W, BF16, CAUSAL, LAYOUT, MARGIN, STEPPED, ORDER)                          \
    template __global__ void fa2_forward<D, BM, BN, W, BF16, CAUSAL, LAYOUT, MARGIN, STEPPED, ORDER>(       \
        const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, float*, int, \
        int, long long, long long, long long, long long, long long, long long, long long, long long,     \
        long long, long long, long long, long long, float);
#define KBENCH_FA2(D, BM, BN, W)                    \
    KBENCH_FA2_ONE(D, BM, BN, W, false, false, SWIZZLE, false, false, ORDER_ROWS) \
    KBENCH_FA2_ONE(D, BM, BN, W, true, true, SWIZZLE, false, false, ORDER_ROWS)
KBENCH_FA2(64, 128, 64, 4)
KBENCH_FA2(128, 128, 64, 4)
KBENCH_FA2(128, 128, 128, 4)
KBENCH_FA2(128, 64, 64, 4)
KBENCH_FA2_ONE(128, 128, 64, 4, false, false, PAD, false, false, ORDER_ROWS)
KBENCH_FA2_ONE(128, 128, 64, 4, false, false, PLAIN, false, false, ORDER_ROWS)
KBENCH_FA2_ONE(128, 128, 64, 4, false, false, SWIZZLE, true, true, ORDER_ROWS)
KBENCH_FA2_ONE(128, 128, 64, 4, true, true, SWIZZLE, true, true, ORDER_ROWS)
KBENCH_FA2_ONE(128, 128, 64, 4, false, true, SWIZZLE, true, true, ORDER_REVERSE)
KBENCH_FA2_ONE(128, 128, 64, 4, false, true, SWIZZLE, true, true, ORDER_HEAVIEST)
KBENCH_FA2_ONE(64, 128, 64, 4, false, false, SWIZZLE, false, true, ORDER_ROWS)
#endif
