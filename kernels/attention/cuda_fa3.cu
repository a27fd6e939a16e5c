// FlashAttention forward for Hopper (sm_90a), in the manner of FlashAttention-3: TMA loads into
// swizzled shared memory, wgmma.mma_async, a producer warpgroup and two (or three) consumer warpgroups
// handing K/V tiles through mbarriers, registers moved between them with setmaxnreg, the consumers taking
// turns at the tensor cores (ping-pong) and, inside each, the next Q Kᵀ issued before the current
// softmax (intra-warpgroup overlap).
//
// Q, K, V and O are contiguous B x H x N x D tensors of 16-bit elements (fp16 or bf16); D is 64 or
// 128. A unit of work is BM = 64 x CONS query rows of one (batch, head) (see "Work units" below), CONS
// the consumer warpgroups (2; or 3, FlashAttention-3's 192-row tiles for D = 64); consumer warpgroup g
// owns rows g*64 .. g*64+63 of it. K/V tiles of BN keys (64, 128, 176 or 192) stream through STAGES
// buffers.
//
// Tensor maps (3-D, encoded on the host: dims {D, N, B*H}): boxes of {64, rows, 1}, 64 elements =
// 128 bytes a row, the width of the 128-byte swizzle; a D = 128 tile is two boxes (d 0..63, 64..127),
// one after the other. The third dimension keeps a box that overhangs a head's last row from reading
// the next head: TMA fills rows past N with zeros (and the softmax masks keys past N).
//
// Shared memory (the base rounded up to 1024 bytes, the swizzle atom), every box 1024-byte aligned:
//   Q:           D/64 boxes of BM rows x 128 bytes
//   K[STAGES]:   D/64 boxes of BN rows x 128 bytes each
//   V[STAGES]:   the same
//   mbarriers:   q_full, q_empty, k_full[STAGES], v_full[STAGES], k_empty[STAGES], v_empty[STAGES]
//   unit slot:   the unit the consumers work on next (one int)
// Byte offset of element (row r, column c) inside a tile, before the swizzle: (c / 64) * rows * 128 +
// r * 128 + (c % 64) * 2. The 128-byte swizzle (TMA's and wgmma's alike) XORs address bits [4, 7)
// with bits [7, 10) inside each 1024-byte atom of 8 rows.
//
// The two products of a consumer warpgroup, per K/V tile:
//   S = Q Kᵀ: wgmma m64n<BN>k16, D/16 of them. A = the warpgroup's 64 rows of Q (K-major: d is
//     contiguous), descriptor start Q + (kk / 4) * BM * 128 + g * 64 * 128 + (kk % 4) * 32 for the
//     k16 step kk, SBO = 1024 (next 8 rows). B = K (K-major too: imm-trans-b = 0), start
//     K + (kk / 4) * BN * 128 + (kk % 4) * 32, SBO = 1024.
//   O += P V: wgmma m64n<D>k16, BN/16 of them, A = P from registers (S's accumulators rounded to 16
//     bits: the accumulator layout is the register-A layout, see WgmmaRS in kbench_sm90.cuh), B = V
//     (MN-major: d contiguous, imm-trans-b = 1), start V + kk * 16 * 128 (16 keys further),
//     SBO = 1024 (next 8 keys), LBO = BN * 128 (the next 64 columns of d: the next box).
//   Each descriptor is its buffer's, made once (Smem), plus the start's offset (descriptor_plus: one
//   32-bit add), so a wgmma costs an add or two in uniform registers rather than a descriptor rebuilt.
// The accumulator layout (PTX ISA, wgmma D fragments): thread t of a warpgroup (warp w = t / 32,
// lane l = t % 32) holds, for j = 0 .. N/8 - 1,
//   d[4j + 0, 1] = row 16w + l/4,     columns 8j + 2(l%4) + {0, 1}
//   d[4j + 2, 3] = row 16w + l/4 + 8, the same columns
// so each thread keeps two rows of S, P and O (lo and hi), each row spread over the 4 lanes of a quad.
//
// Softmax: online, in fp32, base 2 (scores scaled by d^-1/2 * log2 e, one ex2.approx each), with
// the row sums left per thread until the end and the division by them deferred to the epilogue.
// RESCALE > 0 (FlashAttention-4's conditional rescaling): a row's running maximum moves only when a
// tile's maximum passes it by more than RESCALE (log2 units), so P stays below 2^RESCALE (256 for 8,
// well inside fp16's and bf16's range) and, after a unit's first tiles, most tiles move no row's
// maximum: a warp rescales O only when one of its rows moved. O / l is the same: the maximum cancels.
//
// Schedule of a consumer warpgroup over the T tiles of a unit (OVERLAP):
//   S_0 = Q K_0ᵀ; wait; softmax(S_0) -> P
//   for j = 1 .. T-1:  issue S_j = Q K_jᵀ; issue O += P V_{j-1}; wait for S_j (release K_j);
//                      softmax(S_j) -> P' while the tensor cores still run P V_{j-1};
//                      wait for O (release V_{j-1}); O *= the rescale of S_j; P = P'
//   O += P V_{T-1}
// That is the order of the source. In the SASS (nvcc and NVRTC for sm_90a) ptxas issues the wait for
// O before most of the softmax, every exponent after it: the softmax then runs under the other
// consumer's products, not its own. Held below the whole softmax (the wait predicated on its row sums)
// the kernel ran 4-12 % slower on an H100 (results/experiments/h100-attention-fa3-wait-below-softmax.jsonl:
// `cuda-fa3` there held the wait, `cuda-fa3-prev` is this kernel), so ptxas's placement stays.
// Without OVERLAP each tile is S, wait, softmax, O += P V, wait. With PINGPONG the consumer
// warpgroups take turns issuing their products, in a ring (named barriers 1 .. CONS), so that one's
// softmax runs while another's wgmma occupy the tensor cores.
//
// Causal (query i sees keys j <= i): a block visits only the tiles up to its last row's diagonal;
// tiles that cross a row's diagonal (and the tail tile past N) are masked element by element.
//
// Work units: a unit is one Q tile of one (batch, head). Not causal, a head's Q tiles are neighbours
// (the blocks that run together read the same K and V, from L2). Causal, the longest units come first
// (the last Q tiles of the heads of a section, then the Q tiles before them, ...), in sections of
// heads whose K and V fit in L2 together. Block b starts with unit b. A grid of one block a unit ends
// there; on a persistent grid (one block per SM) the producer then takes the block's next unit:
// b + gridDim.x (static), or the next one nobody has taken, from a counter in global memory (dynamic:
// a block whose units were short takes more, and the units in flight stay neighbours). It hands each
// unit to the consumers in a shared-memory slot written before its arrival on q_full (a unit past the
// last ends the block), and loads the unit's Q (once both consumers have finished the last unit's
// Q Kᵀ: barrier q_empty) and its first K/V tiles while the consumers finish the last unit's P V and
// store its O: no block start, Q load or first-tile wait lies between one unit and the next. The K/V
// ring and the ping-pong turns run on across units. The counter {next, blocks done} starts at zero,
// and the last block to finish sets it back to zero for the next launch.

#include "kbench_ptx.cuh"
#include "kbench_sm90.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "cuda_fa3.cu uses wgmma and setmaxnreg: compile it for sm_90a (-arch=sm_90a)"
#endif

namespace kbench_fa3 {

using namespace kbench_sm90;

constexpr int BOX_COLS = 64;        // 64 16-bit elements = one 128-byte swizzled row
constexpr int ROW_BYTES = 128;
constexpr int SWIZZLE_ATOM = 1024;  // 8 rows of 128 bytes
constexpr int TURN_BARRIER = 1;     // named barriers 1 .. CONS: consumer warpgroup g's turn at the tensor cores

// A block's team: CONS consumer warpgroups of 64 query rows each (2, or 3 for FlashAttention-3's d = 64
// tiles of 192 rows) and the producer warpgroup, their registers moved by setmaxnreg within the 65,536
// of an SM's register file: 128 x 24 + 2 x 128 x 240, or 128 x 32 + 3 x 128 x 160.
template <int CONS>
struct Team {
    static_assert(CONS == 2 || CONS == 3, "two or three consumer warpgroups");
    static constexpr int BM = 64 * CONS;  // query rows of a unit
    static constexpr int THREADS = (CONS + 1) * 128;
    static constexpr int PRODUCER_REGISTERS = CONS == 2 ? 24 : 32;
    static constexpr int CONSUMER_REGISTERS = CONS == 2 ? 240 : 160;
    static_assert(128 * PRODUCER_REGISTERS + CONS * 128 * CONSUMER_REGISTERS <= 65536, "the register file");
};

using kbench_ptx::fast_exp2;
using kbench_ptx::neg_inf;

template <int D, int BN, int STAGES, int CONS>
struct Layout {
    static constexpr int Q_BYTES = Team<CONS>::BM * D * 2;
    static constexpr int KV_BYTES = BN * D * 2;  // one K (or V) tile
    static constexpr int Q_BOX = Team<CONS>::BM * ROW_BYTES;  // bytes from one 64-column box of a tile to the next
    static constexpr int KV_BOX = BN * ROW_BYTES;
    static_assert(D % BOX_COLS == 0, "D is a whole number of 64-column boxes");
    static_assert(KV_BOX % SWIZZLE_ATOM == 0, "BN is a multiple of 8: every box stays 1024-byte aligned");
};

// Shared-space byte addresses of the buffers and barriers (the host adds 1024 bytes of slack).
template <int D, int BN, int STAGES, int CONS>
struct Smem {
    using L = Layout<D, BN, STAGES, CONS>;
    unsigned q, k, v, q_full, q_empty, k_full, v_full, k_empty, v_empty, unit_slot;
    // The wgmma descriptors of Q's, the first K stage's and the first V stage's first bytes (K-major Q
    // and K; V, N-major, with its 64-column boxes KV_BOX bytes apart), which the products move on from
    // by descriptor_plus.
    unsigned long long q_desc, k_desc, v_desc;
    __device__ __forceinline__ explicit Smem(const unsigned char* smem) {
        q = (kbench_ptx::smem_addr(smem) + SWIZZLE_ATOM - 1) & ~unsigned(SWIZZLE_ATOM - 1);
        k = q + L::Q_BYTES;
        v = k + STAGES * L::KV_BYTES;
        q_full = v + STAGES * L::KV_BYTES;
        q_empty = q_full + 8;
        k_full = q_empty + 8;
        v_full = k_full + 8 * STAGES;
        k_empty = v_full + 8 * STAGES;
        v_empty = k_empty + 8 * STAGES;
        unit_slot = v_empty + 8 * STAGES;
        q_desc = kbench_sm90::matrix_descriptor(q, 16, SWIZZLE_ATOM);
        k_desc = kbench_sm90::matrix_descriptor(k, 16, SWIZZLE_ATOM);
        v_desc = kbench_sm90::matrix_descriptor(v, L::KV_BOX, SWIZZLE_ATOM);
    }
};

// Which K/V tiles a block of query tile `q_tile` visits: 0 .. tiles - 1 (causal: up to the diagonal of
// the block's last row).
template <int BN, bool CAUSAL, int BM>
__device__ __forceinline__ int kv_tiles(int q_tile, int n) {
    const int all = (n + BN - 1) / BN;
    if (!CAUSAL) return all;
    const int last_row = min((q_tile + 1) * BM, n) - 1;
    return min(all, last_row / BN + 1);
}

// A unit of work: one Q tile of one (batch, head).
struct Unit {
    int q_tile, bh;
};

// Unit number w (see the header comment). Not causal: a head's Q tiles side by side. Causal: heads in
// sections of `section` (as many as keep their K and V within L2), each section's units longest
// first: its heads' last Q tiles, then the ones before them, and so on.
template <bool CAUSAL>
__device__ __forceinline__ Unit unit_at(int w, int q_tiles, int heads, int section) {
    if (!CAUSAL) return {w % q_tiles, w / q_tiles};
    const int per_section = section * q_tiles, first_head = w / per_section * section;
    const int in_section = w % per_section, heads_here = min(section, heads - first_head);
    return {q_tiles - 1 - in_section / heads_here, first_head + in_section % heads_here};
}

// The unit slot: written by the producer before its arrival on q_full (an mbarrier arrival releases
// the thread's earlier shared-memory writes), read by the consumers after their wait on it (which
// acquires them). A unit past the last tells them the block is done.
__device__ __forceinline__ void put_unit(unsigned slot, int w) {
    asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(slot), "r"(w) : "memory");
}

__device__ __forceinline__ int get_unit(unsigned slot) {
    int w;
    asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(w) : "r"(slot) : "memory");
    return w;
}

// The producer's next unit after unit w: the next nobody has taken, from the counter (dynamic), else
// the grid-th after w.
__device__ __forceinline__ int next_unit(int w, int* scheduler) {
    return scheduler ? atomicAdd(scheduler, 1) + static_cast<int>(gridDim.x) : w + static_cast<int>(gridDim.x);
}

// A dynamic schedule's end: the last block to finish sets the counter back to zero for the next launch
// (the fences order every block's last take before its count, and the count before the reset).
__device__ __forceinline__ void finish_schedule(int* scheduler) {
    if (!scheduler) return;
    __threadfence();
    if (atomicAdd(scheduler + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        __threadfence();
        atomicExch(scheduler, 0);
        atomicExch(scheduler + 1, 0);
    }
}

// A ring position: the stage and the parity of its barriers' current phase.
struct Ring {
    int stage = 0;
    unsigned phase = 0;
    template <int STAGES>
    __device__ __forceinline__ void advance() {
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
};

// The producer: one thread takes the block's units one after another (see the header comment) and
// loads, for each, Q (once the consumers have released the last unit's) and every K and V tile.
template <int D, int BN, int STAGES, bool CAUSAL, int CONS>
__device__ __forceinline__ void produce(const Smem<D, BN, STAGES, CONS>& sm, const TensorMap* map_q, const TensorMap* map_k,
                                        const TensorMap* map_v, int n, int q_tiles, int heads, int section,
                                        int* scheduler) {
    using L = Layout<D, BN, STAGES, CONS>;
    constexpr int BM = Team<CONS>::BM;
    tensormap_prefetch(map_q);
    tensormap_prefetch(map_k);
    tensormap_prefetch(map_v);
    const int units = q_tiles * heads;
    Ring ring;
    unsigned q_phase = 0;
    for (int w = blockIdx.x; w < units; w = next_unit(w, scheduler), q_phase ^= 1) {
        // The next unit is taken once this one's loads are all issued, a tile or two before the consumers
        // need it: late enough that a block that finishes early takes more.
        const Unit u = unit_at<CAUSAL>(w, q_tiles, heads, section);
        mbarrier_wait(sm.q_empty, q_phase ^ 1);  // the first unit's passes at once
        put_unit(sm.unit_slot, w);
        mbarrier_arrive_expect_tx(sm.q_full, L::Q_BYTES);
#pragma unroll
        for (int b = 0; b < D / BOX_COLS; ++b)
            tma_load_3d(sm.q + b * L::Q_BOX, map_q, sm.q_full, b * BOX_COLS, u.q_tile * BM, u.bh);
        const int tiles = kv_tiles<BN, CAUSAL, BM>(u.q_tile, n);
        for (int j = 0; j < tiles; ++j) {
            const unsigned k_dst = sm.k + ring.stage * L::KV_BYTES, v_dst = sm.v + ring.stage * L::KV_BYTES;
            mbarrier_wait(sm.k_empty + 8 * ring.stage, ring.phase ^ 1);  // the first lap passes at once
            mbarrier_arrive_expect_tx(sm.k_full + 8 * ring.stage, L::KV_BYTES);
#pragma unroll
            for (int b = 0; b < D / BOX_COLS; ++b)
                tma_load_3d(k_dst + b * L::KV_BOX, map_k, sm.k_full + 8 * ring.stage, b * BOX_COLS, j * BN, u.bh);
            mbarrier_wait(sm.v_empty + 8 * ring.stage, ring.phase ^ 1);
            mbarrier_arrive_expect_tx(sm.v_full + 8 * ring.stage, L::KV_BYTES);
#pragma unroll
            for (int b = 0; b < D / BOX_COLS; ++b)
                tma_load_3d(v_dst + b * L::KV_BOX, map_v, sm.v_full + 8 * ring.stage, b * BOX_COLS, j * BN, u.bh);
            ring.advance<STAGES>();
        }
    }
    mbarrier_wait(sm.q_empty, q_phase ^ 1);  // the consumers have read the last unit's slot
    put_unit(sm.unit_slot, units);           // past the last: done
    mbarrier_arrive(sm.q_full);
    finish_schedule(scheduler);
}

// A consumer warpgroup's running softmax state for its two rows per thread (lo = 0, hi = 1).
struct RowState {
    float max[2] = {neg_inf(), neg_inf()};  // in raw score units
    float sum[2] = {0.f, 0.f};              // this thread's share of the row sum (the quad adds at the end)
};

// softmax(S) of one tile, in place: masks (when `mask`), updates the row maxima and sums, leaves the
// unnormalised probabilities in `s` and the factor by which O, accumulated under the old maxima, must
// be scaled in `rescale`. The first tile of every row has a visible key
// (key 0), so after it the maxima are finite and no exponent sees inf - inf.
// A thread's BN / 4 scores of a row are reduced (max, then sum) in CHAINS independent chains, combined
// at the end: with one, each reduction is BN / 4 dependent instructions, each waiting out the last's
// latency; with four, a quarter as deep (the maximum is exact in any order; the sum is rounded in
// another order, within fp32's rounding).
template <int BN, bool CAUSAL, int CHAINS, int RESCALE>
__device__ __forceinline__ void softmax_tile(float (&s)[BN / 2], RowState& st, float (&rescale)[2], bool mask,
                                             int key0, int row_lo, int n, float scale_log2, int lane) {
    if (mask) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) {
            const int key = key0 + 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
            const int row = row_lo + 8 * ((i >> 1) & 1);
            if (key >= n || (CAUSAL && key > row)) s[i] = neg_inf();
        }
    }
    static_assert(CHAINS == 1 || CHAINS == 2 || CHAINS == 4, "1, 2 or 4 chains a row");
    static_assert((BN / 4) % CHAINS == 0, "a row's scores split evenly over the chains");
    // Score i belongs to row (i >> 1) & 1 and, of its row's scores, is number 2 * (i >> 2) + (i & 1).
    auto chain = [](int i) { return (2 * (i >> 2) + (i & 1)) % CHAINS; };
    float part[2][CHAINS];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        part[r][0] = st.max[r];
#pragma unroll
        for (int c = 1; c < CHAINS; ++c) part[r][c] = neg_inf();
    }
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) part[(i >> 1) & 1][chain(i)] = fmaxf(part[(i >> 1) & 1][chain(i)], s[i]);
    float mx[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mx[r] = part[r][0];
#pragma unroll
        for (int c = 1; c < CHAINS; ++c) mx[r] = fmaxf(mx[r], part[r][c]);
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 2));
        // mx >= st.max (the chains start from it). Old max -inf: the row moves, and its rescale is 0.
        const bool move = RESCALE == 0 || mx[r] * scale_log2 > st.max[r] * scale_log2 + RESCALE;
        rescale[r] = move ? fast_exp2((st.max[r] - mx[r]) * scale_log2) : 1.f;
        if (move) st.max[r] = mx[r];
        mx[r] = st.max[r];  // the maximum the tile's exponents are taken against
    }
    const float shift[2] = {mx[0] * scale_log2, mx[1] * scale_log2};
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) part[r][c] = 0.f;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
        const int r = (i >> 1) & 1;
        s[i] = fast_exp2(fmaf(s[i], scale_log2, -shift[r]));
        part[r][chain(i)] += s[i];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float sum = part[r][0];
#pragma unroll
        for (int c = 1; c < CHAINS; ++c) sum += part[r][c];
        st.sum[r] = st.sum[r] * rescale[r] + sum;
    }
}

// P, the softmax's fp32 values rounded to 16 bits, in register-A layout: one [4] per 16 keys.
template <int BN, bool BF16>
__device__ __forceinline__ void to_p(const float (&s)[BN / 2], unsigned (&p)[BN / 16][4]) {
#pragma unroll
    for (int j = 0; j < BN / 16; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) p[j][k] = kbench_ptx::pack2<BF16>(s[8 * j + 2 * k], s[8 * j + 2 * k + 1]);
}

// O, accumulated under the old row maxima, scaled to the new ones; with RESCALE > 0 skipped by a warp
// none of whose rows moved its maximum (every factor exactly 1).
template <int RESCALE, int N>
__device__ __forceinline__ void rescale_o(float (&o)[N], const float (&rescale)[2]) {
    if (RESCALE > 0 && !__any_sync(0xffffffffu, rescale[0] != 1.f || rescale[1] != 1.f)) return;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] *= rescale[(i >> 1) & 1];
}

// A narrow tile: the last tile of a row of tiles holds at most NARROW keys before N (with BN > NARROW),
// so its S is computed by m64n<NARROW> wgmma into the first NARROW / 2 registers of s (the softmax
// masks the rest, keys past N) and its P V takes only the first NARROW / 16 k-steps: the keys past N,
// whose P is 0, are not multiplied at all.
constexpr int NARROW = 64;

template <int BN>
__device__ __forceinline__ bool narrow_tile(int trim, int j, int n) {
    return BN > NARROW && trim && n - j * BN <= NARROW;
}

// A compile-time flag passed to a generic lambda. Whether a tile is narrow is known only at run time,
// but every product of a narrow tile sits in its own copy of the step that issues and waits for it:
// a run-time branch between wgmma groups still in flight makes ptxas serialise every wgmma of the
// kernel (its warning C7520).
template <bool B>
struct Flag {
    static constexpr bool value = B;
};

template <typename Step>
__device__ __forceinline__ void narrow_or_not(bool narrow, Step&& step) {
    if (narrow)
        step(Flag<true>());
    else
        step(Flag<false>());
}

template <int D, int BN, int STAGES, int CONS, bool BF16, bool NARROW_TILE>
__device__ __forceinline__ void issue_qk(float (&s)[BN / 2], const Smem<D, BN, STAGES, CONS>& sm, int stage,
                                         int group) {
    using L = Layout<D, BN, STAGES, CONS>;
    float(&s_narrow)[NARROW / 2] = *reinterpret_cast<float(*)[NARROW / 2]>(&s[0]);
    if (BN > NARROW && NARROW_TILE) {
        // The keys past the narrow product are past N: -inf now, so that the last tile's values in
        // these registers are dead here rather than live until the softmax masks them.
#pragma unroll
        for (int i = NARROW / 2; i < BN / 2; ++i) s[i] = neg_inf();
    }
    const unsigned long long q_desc = descriptor_plus(sm.q_desc, group * 64 * ROW_BYTES);
    const unsigned long long k_desc = descriptor_plus(sm.k_desc, stage * L::KV_BYTES);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const unsigned long long da = descriptor_plus(q_desc, (kk / 4) * L::Q_BOX + (kk % 4) * 32);
        const unsigned long long db = descriptor_plus(k_desc, (kk / 4) * L::KV_BOX + (kk % 4) * 32);
        // The first k-step does not read s: the last tile's values are dead.
        if (BN > NARROW && NARROW_TILE) {
            if (kk == 0)
                Wgmma<NARROW, BF16, false>::mma_fresh(s_narrow, da, db);
            else
                Wgmma<NARROW, BF16, false>::mma(s_narrow, da, db, 1);
        } else if (kk == 0) {
            Wgmma<BN, BF16, false>::mma_fresh(s, da, db);
        } else {
            Wgmma<BN, BF16, false>::mma(s, da, db, 1);
        }
    }
}

template <int D, int BN, int STAGES, int CONS, bool BF16, bool NARROW_TILE>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const unsigned (&p)[BN / 16][4],
                                         const Smem<D, BN, STAGES, CONS>& sm, int stage) {
    using L = Layout<D, BN, STAGES, CONS>;
    const unsigned long long v_desc = descriptor_plus(sm.v_desc, stage * L::KV_BYTES);
#pragma unroll
    for (int kk = 0; kk < (NARROW_TILE && BN > NARROW ? NARROW : BN) / 16; ++kk)
        WgmmaRS<D, BF16>::mma(o, p[kk], descriptor_plus(v_desc, kk * 16 * ROW_BYTES), 1);
}

template <int N>
__device__ __forceinline__ void fence_all(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) fence_operand(r[i]);
}

template <int J>
__device__ __forceinline__ void fence_all(unsigned (&r)[J][4]) {
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) asm volatile("" : "+r"(r[j][k])::"memory");
}

// One warp's arrival on a stage's `empty` barrier (CONS * 4 arrivals complete its phase).
__device__ __forceinline__ void release(unsigned bar, bool warp_leader) {
    __syncwarp();
    if (warp_leader) mbarrier_arrive(bar);
}

// Ping-pong: wait for this warpgroup's turn at the tensor cores, and hand the turn to the next one
// (consumer warpgroups 0, 1, ..., CONS - 1 in a ring). A turn's barrier counts the warpgroup that waits
// and the one that hands over: 2 x 128 threads.
template <bool PINGPONG>
__device__ __forceinline__ void take_turn(int group) {
    if (PINGPONG) named_barrier_sync(TURN_BARRIER + group, 2 * 128);
}

template <bool PINGPONG, int CONS>
__device__ __forceinline__ void pass_turn(int group) {
    if (PINGPONG) named_barrier_arrive(TURN_BARRIER + (CONS == 2 ? group ^ 1 : (group + 1) % CONS), 2 * 128);
}

}  // namespace kbench_fa3

template <int D, int BN, int STAGES, bool BF16, bool CAUSAL, bool OVERLAP, bool PINGPONG, int CHAINS, int CONS,
          int RESCALE>
__global__ void __launch_bounds__(kbench_fa3::Team<CONS>::THREADS, 1)
fa3_forward(const __grid_constant__ kbench_sm90::TensorMap map_q, const __grid_constant__ kbench_sm90::TensorMap map_k,
            const __grid_constant__ kbench_sm90::TensorMap map_v, unsigned short* __restrict__ out, int n, int heads,
            float scale_log2, int trim, int section, int* __restrict__ scheduler) {
    using namespace kbench_fa3;
    using namespace kbench_sm90;
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    static_assert(BN == 64 || BN == 128 || BN == 176 || BN == 192, "BN is the n of a wgmma: 64, 128, 176 or 192");
    static_assert(STAGES >= 1, "at least one stage");

    using T = Team<CONS>;
    constexpr int BM = T::BM;
    extern __shared__ unsigned char smem[];
    const Smem<D, BN, STAGES, CONS> sm(smem);
    if (threadIdx.x == 0) {
        mbarrier_init(sm.q_full, 1);
        mbarrier_init(sm.q_empty, CONS * 4);  // one arrive per consumer warp
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(sm.k_full + 8 * s, 1);  // the producer's arrive.expect_tx
            mbarrier_init(sm.v_full + 8 * s, 1);
            mbarrier_init(sm.k_empty + 8 * s, CONS * 4);  // one arrive per consumer warp
            mbarrier_init(sm.v_empty + 8 * s, CONS * 4);
        }
        mbarrier_init_fence();
    }
    __syncthreads();

    const int q_tiles = (n + BM - 1) / BM;
    const int units = q_tiles * heads;  // the host keeps this and units + gridDim.x within an int
    // Read through a shuffle from lane 0 so that the compiler knows it is the same across the warp: what
    // derives from it (the wgmma descriptors of this warpgroup's Q rows) then stays in uniform registers.
    const int warpgroup = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);

    if (warpgroup == 0) {
        setmaxnreg_dec<T::PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) produce<D, BN, STAGES, CAUSAL, CONS>(sm, &map_q, &map_k, &map_v, n, q_tiles, heads,
                                                                    section, scheduler);
        return;
    }

    setmaxnreg_inc<T::CONSUMER_REGISTERS>();
    const int group = warpgroup - 1;
    const int t = threadIdx.x % 128, lane = t % 32;
    const bool warp_leader = lane == 0;
    Ring k_ring, v_ring;
    unsigned q_phase = 0;
    if (PINGPONG && group == CONS - 1) pass_turn<PINGPONG, CONS>(group);  // warpgroup 0 goes first

    for (;; q_phase ^= 1) {
        mbarrier_wait(sm.q_full, q_phase);  // Q is in, and the slot names its unit
        const int w = get_unit(sm.unit_slot);
        if (w >= units) break;
        const Unit u = unit_at<CAUSAL>(w, q_tiles, heads, section);
        const int row_lo = u.q_tile * BM + group * 64 + 16 * (t / 32) + lane / 4;  // this thread's rows: row_lo, +8
        const int first_row = u.q_tile * BM + group * 64;                         // the warpgroup's first row
        const int tiles = kv_tiles<BN, CAUSAL, BM>(u.q_tile, n);
        // A tile needs the element mask when it reaches past N, or (causal) past the warpgroup's first row.
        auto needs_mask = [&](int j) { return (j + 1) * BN > n || (CAUSAL && (j + 1) * BN - 1 > first_row); };

        float o[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
        RowState st;
        float s[BN / 2];
        unsigned p[BN / 16][4];
        float rescale[2];

        // Only the unit's last tile can be narrow (see NARROW); each step below takes that as a Flag.
        const bool narrow_last = narrow_tile<BN>(trim, tiles - 1, n);

        // K_j's stage back to the producer, and after the unit's last Q Kᵀ the Q buffer too; V's stage.
        auto release_k = [&](int j) {
            release(sm.k_empty + 8 * k_ring.stage, warp_leader);
            if (j == tiles - 1) release(sm.q_empty, warp_leader);
            k_ring.advance<STAGES>();
        };
        auto release_v = [&]() {
            release(sm.v_empty + 8 * v_ring.stage, warp_leader);
            v_ring.advance<STAGES>();
        };
        // Once K_j is in and it is this warpgroup's turn: S_j = Q K_jᵀ issued and committed, not waited for.
        auto issue_score = [&](auto narrow) {
            mbarrier_wait(sm.k_full + 8 * k_ring.stage, k_ring.phase);
            take_turn<PINGPONG>(group);
            wgmma_fence();
            issue_qk<D, BN, STAGES, CONS, BF16, decltype(narrow)::value>(s, sm, k_ring.stage, group);
            wgmma_commit();
        };
        // S_j = Q K_jᵀ on its own, then its softmax (tile 0 of the overlapped schedule, every tile of the
        // plain one).
        auto score = [&](int j, auto narrow) {
            issue_score(narrow);
            pass_turn<PINGPONG, CONS>(group);
            wgmma_wait<0>();
            fence_all(s);
            release_k(j);
            softmax_tile<BN, CAUSAL, CHAINS, RESCALE>(s, st, rescale, needs_mask(j), j * BN, row_lo, n, scale_log2, lane);
        };
        // O += P V_j on its own (the last tile of the overlapped schedule, every tile of the plain one).
        auto accumulate = [&](auto narrow) {
            mbarrier_wait(sm.v_full + 8 * v_ring.stage, v_ring.phase);
            take_turn<PINGPONG>(group);
            if (OVERLAP) {  // o's rescale and p come before the fence, not sunk below it
                fence_all(o);
                fence_all(p);
            }
            wgmma_fence();
            issue_pv<D, BN, STAGES, CONS, BF16, decltype(narrow)::value>(o, p, sm, v_ring.stage);
            wgmma_commit();
            pass_turn<PINGPONG, CONS>(group);
            wgmma_wait<0>();
            fence_all(o);
            fence_all(p);
            release_v();
        };
        // Tile j >= 1 of the overlapped schedule: S_j = Q K_jᵀ and O += P_{j-1} V_{j-1} in flight together
        // (O first rescaled to tile j-1's maxima), softmax(S_j) in S's registers (in the source under the
        // second; ptxas issues that product's wait before the exponents, see the header), and S_j turned
        // into P only once that product is done with P's registers. Tile j-1 is never narrow.
        auto overlapped = [&](int j, auto narrow) {
            issue_score(narrow);
            rescale_o<RESCALE>(o, rescale);  // to tile j-1's maxima, before its P V is added
            mbarrier_wait(sm.v_full + 8 * v_ring.stage, v_ring.phase);
            fence_all(o);
            fence_all(p);
            wgmma_fence();
            issue_pv<D, BN, STAGES, CONS, BF16, false>(o, p, sm, v_ring.stage);
            wgmma_commit();
            pass_turn<PINGPONG, CONS>(group);
            wgmma_wait<1>();  // S_j is done (groups complete in order); P V_{j-1} may still run
            fence_all(s);
            release_k(j);
            softmax_tile<BN, CAUSAL, CHAINS, RESCALE>(s, st, rescale, needs_mask(j), j * BN, row_lo, n, scale_log2, lane);
            wgmma_wait<0>();
            fence_all(o);
            fence_all(p);  // the tensor cores read p until here
            release_v();
            to_p<BN, BF16>(s, p);
        };

        if (OVERLAP) {
            narrow_or_not(narrow_last && tiles == 1, [&](auto narrow) { score(0, narrow); });
            to_p<BN, BF16>(s, p);
            for (int j = 1; j < tiles - 1; ++j) overlapped(j, Flag<false>());
            if (tiles > 1) narrow_or_not(narrow_last, [&](auto narrow) { overlapped(tiles - 1, narrow); });
            rescale_o<RESCALE>(o, rescale);
            narrow_or_not(narrow_last, [&](auto narrow) { accumulate(narrow); });
        } else {
            for (int j = 0; j < tiles; ++j) {
                const bool last = j == tiles - 1;
                narrow_or_not(last && narrow_last, [&](auto narrow) { score(j, narrow); });
                to_p<BN, BF16>(s, p);
                rescale_o<RESCALE>(o, rescale);
                narrow_or_not(last && narrow_last, [&](auto narrow) { accumulate(narrow); });
            }
        }

        // Epilogue: the quad's row sums, O / l, rounded to 16 bits, two neighbouring columns a 32-bit store.
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = st.sum[r];
            l += __shfl_xor_sync(0xffffffff, l, 1);
            l += __shfl_xor_sync(0xffffffff, l, 2);
            inv[r] = 1.f / l;
        }
        unsigned short* base = out + static_cast<long long>(u.bh) * n * D;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row_lo + 8 * r;
            if (row >= n) continue;
            unsigned short* dst = base + static_cast<long long>(row) * D + 2 * (lane % 4);
#pragma unroll
            for (int j = 0; j < D / 8; ++j)
                *reinterpret_cast<unsigned*>(dst + 8 * j) =
                    kbench_ptx::pack2<BF16>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
        }
    }
    // The last warpgroup passed the first turn and passes its every turn, so one arrival waits on
    // warpgroup 0's barrier: taken here, the barrier ends as it began.
    if (PINGPONG && group == 0) take_turn<PINGPONG>(group);
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches by default, and each parameter's
// other values once.
#define KBENCH_FA3_ONE(D, BN, S, BF16, CAUSAL, OVERLAP, PINGPONG, CHAINS, CONS, RESCALE)                        \
    template __global__ void fa3_forward<D, BN, S, BF16, CAUSAL, OVERLAP, PINGPONG, CHAINS, CONS, RESCALE>(      \
        const __grid_constant__ kbench_sm90::TensorMap, const __grid_constant__ kbench_sm90::TensorMap,          \
        const __grid_constant__ kbench_sm90::TensorMap, unsigned short*, int, int, float, int, int, int*);
#define KBENCH_FA3(D, BN, S, OVERLAP, PINGPONG, CHAINS, CONS, RESCALE)                 \
    KBENCH_FA3_ONE(D, BN, S, false, false, OVERLAP, PINGPONG, CHAINS, CONS, RESCALE)   \
    KBENCH_FA3_ONE(D, BN, S, true, false, OVERLAP, PINGPONG, CHAINS, CONS, RESCALE)    \
    KBENCH_FA3_ONE(D, BN, S, false, true, OVERLAP, PINGPONG, CHAINS, CONS, RESCALE)    \
    KBENCH_FA3_ONE(D, BN, S, true, true, OVERLAP, PINGPONG, CHAINS, CONS, RESCALE)
KBENCH_FA3(128, 128, 2, true, true, 1, 2, 0)
KBENCH_FA3(64, 128, 2, true, true, 1, 2, 0)
KBENCH_FA3(128, 64, 2, true, true, 1, 2, 0)
KBENCH_FA3(128, 176, 2, true, true, 1, 2, 0)
KBENCH_FA3(128, 192, 2, true, true, 1, 2, 0)
KBENCH_FA3(64, 192, 2, true, true, 1, 2, 0)
KBENCH_FA3(128, 128, 1, true, true, 1, 2, 0)
KBENCH_FA3(128, 128, 2, false, true, 1, 2, 0)
KBENCH_FA3(128, 128, 2, true, false, 1, 2, 0)
KBENCH_FA3(128, 128, 2, false, false, 1, 2, 0)
KBENCH_FA3(128, 176, 2, true, true, 4, 2, 0)
KBENCH_FA3(64, 176, 2, true, true, 4, 2, 0)
KBENCH_FA3(128, 128, 2, true, true, 2, 2, 0)
KBENCH_FA3(64, 128, 2, true, true, 1, 3, 0)
KBENCH_FA3(64, 64, 2, true, true, 1, 3, 0)
KBENCH_FA3(64, 128, 2, true, true, 4, 3, 0)
KBENCH_FA3(128, 176, 2, true, true, 1, 2, 8)
KBENCH_FA3(64, 128, 2, true, true, 1, 3, 8)
KBENCH_FA3(128, 128, 2, false, true, 1, 2, 8)
#endif
