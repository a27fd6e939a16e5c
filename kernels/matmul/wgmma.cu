// fp16/bf16 matmul C = A B for Hopper (sm_90a): TMA tile loads, wgmma.mma_async, mbarrier pipeline.
//
// A is M x K, B is K x N, C is M x N, all row-major and contiguous, 16-bit (fp16 or bf16); products
// accumulate in fp32 and C is rounded to 16 bits. A block owns a BM x BN tile of C and walks K in
// steps of BK = 64 (one 128-byte row of 16-bit elements: the width of the 128-byte swizzle).
//
// Shared memory, per pipeline stage (the base rounded up to 1024 bytes, the swizzle atom):
//   A tile: BM rows (m) of 64 k, 128 bytes a row, one TMA box {64, BM} of the map over A (dims
//           {K, M}): K-major for wgmma. Byte offset of (m, k) before swizzling: m * 128 + k * 2.
//   B tile: BN / 64 blocks, each 64 rows (k) of 64 n, one TMA box {64, 64} of the map over B (dims
//           {N, K}), block j at j * 8192 bytes: MN-major for wgmma (imm-trans-b = 1). Byte offset of
//           (k, n) before swizzling: (n / 64) * 8192 + k * 128 + (n % 64) * 2.
// The 128-byte swizzle (TMA's CU_TENSOR_MAP_SWIZZLE_128B and wgmma's swizzle mode 1 alike): within
// each 1024-byte atom of 8 rows of 128 bytes, the 16-byte chunk c of row r is stored at chunk c ^ r,
// i.e. address bits [4, 7) are XORed with bits [7, 10). Every tile starts 1024-byte aligned, so the
// pattern is the same for the copy engine and the tensor cores (descriptor base offset 0).
//
// wgmma descriptors (kbench_sm90.cuh, matrix_descriptor), per k16 step kk = 0 .. 3 of a stage:
//   A of consumer warpgroup g (rows g * 64 .. g * 64 + 63): start = A tile + g * 8192 + kk * 32,
//     SBO = 1024 (next 8 rows), LBO unused (16). The 32-byte step moves along K inside the swizzled
//     128-byte rows; the hardware applies the XOR to the address it computes.
//   B: start = B tile + kk * 2048 (16 k rows further), SBO = 1024 (next 8 k rows),
//     LBO = 8192 (next 64 columns of n: the next TMA box).
//
// wgmma m64nNk16 with fp32 accumulators leaves D (64 x N) in registers d[N / 2] of the warpgroup's
// 128 threads: thread t, warp w = t / 32 in the warpgroup, lane l = t % 32, holds for j = 0 .. N/8-1
//   d[4j + 0] = D(16w + l/4,     8j + 2(l%4))     d[4j + 1] = D(16w + l/4,     8j + 2(l%4) + 1)
//   d[4j + 2] = D(16w + l/4 + 8, 8j + 2(l%4))     d[4j + 3] = D(16w + l/4 + 8, 8j + 2(l%4) + 1)
// (PTX ISA, "Register Fragments" of wgmma's D matrix). The epilogue stores each pair as one 32-bit
// word of two 16-bit values, masked at the edges of C.
//
// Edges: the TMA unit fills zeros for box elements outside the tensor (rows past M, columns past N,
// k past K), so partial tiles multiply exactly; only the stores of C are masked. The host refuses
// what TMA cannot describe: K or N not a multiple of 8 (a row stride that is not a multiple of 16
// bytes) and A or B not 16-byte aligned.
//
// The kernels share the loads, the descriptors, the wgmma and the register-store epilogue:
//
// matmul_wgmma_ws (warp-specialized, persistent): 1 + BM/64 warpgroups. Warpgroup 0 is the producer:
// it gives registers back (setmaxnreg.dec to 40) and one thread issues the TMA loads of every k-step
// of every tile of this block into a ring of STAGES buffers: it waits for the buffer's `empty`
// barrier, announces the bytes on its `full` barrier (arrive.expect_tx) and issues the copies, which
// complete that barrier. Warpgroups 1 .. BM/64 are consumers (setmaxnreg.inc to 232): consumer g
// computes rows g*64 .. g*64+63 of the tile with BK/16 wgmma m64nBNk16 per stage, keeps one stage's
// group in flight (wgmma.wait_group 1) and then releases the previous stage (one arrive per warp on
// its `empty` barrier: BM/64 * 4 arrivals complete a phase). The grid is one block per SM (at most one
// per tile); block b takes tiles b, b + grid, ... in grouped order, and the ring's stage and phase
// run on across tiles, so the producer loads the next tile while the consumers store this one.
//
// matmul_wgmma_ws_cluster2: the same in thread-block clusters of two along M (wgmma_ws_body's
// comment): the pair's B tiles are read from L2 once, by TMA multicast, and a stage is refilled once
// both blocks' consumers have released it.
//
// matmul_wgmma_ws_store, matmul_wgmma_ws_cluster2_store: the two above with the TMA-store epilogue:
// each consumer warpgroup stages its slice of a finished tile in shared memory (stage_tile) and one of
// its threads writes it by TMA through a third map, while the warpgroup goes on to its next tile.
//
// matmul_wgmma_plain (the simpler variant: no warp specialization, no setmaxnreg, one tile per block):
// BM/64 warpgroups, all consumers; thread 0 also issues the TMA loads, STAGES k-steps ahead. After
// a stage's wgmma group has completed (wait_group 0) the block synchronises and thread 0 refills that
// stage with the k-step STAGES further on.
//
// Tile order: tiles are numbered along M within groups of group_m tile rows (as Triton's matmul
// tutorial orders its programs), so tiles that run at the same time share A and B tiles in L2.

#include "kbench_ptx.cuh"
#include "kbench_sm90.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma.cu uses wgmma and setmaxnreg: compile it for sm_90a (-arch=sm_90a)"
#endif

namespace kbench_wgmma {

using namespace kbench_sm90;

constexpr int BK = 64;                  // k per stage: 64 16-bit elements = one 128-byte swizzled row
constexpr int SWIZZLE_ATOM = 1024;      // bytes: 8 rows of 128
constexpr int B_BOX_BYTES = BK * 128;   // one 64 (k) x 64 (n) box of B

// The (tile row, tile column) of tile number `tile`: column-major within groups of group_m tile rows.
struct TileCoords {
    int m, n;
};

__host__ __device__ inline TileCoords tile_coords(int tile, int tiles_m, int tiles_n, int group_m) {
    const int per_group = group_m * tiles_n;
    const int group = tile / per_group;
    const int first_m = group * group_m;
    const int rows_here = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
    const int in_group = tile % per_group;
    return {first_m + in_group % rows_here, in_group / rows_here};
}

template <int BM, int BN>
struct Layout {
    static constexpr int A_BYTES = BM * BK * 2;  // one stage's A tile
    static constexpr int B_BYTES = BK * BN * 2;  // one stage's B tile
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static_assert(A_BYTES % SWIZZLE_ATOM == 0 && B_BYTES % SWIZZLE_ATOM == 0, "tiles keep 1024-byte alignment");
};

// Issue the TMA loads of k-step `kt` of the tile at (m0, n0) into one stage, completing `bar`. In a
// cluster of CLUSTER CTAs along M, CTA `rank` loads its own A box and B boxes rank, rank + CLUSTER, ...,
// each multicast to every CTA of the cluster: `bar` still expects the whole stage, the other B boxes
// coming from the peers.
template <int BM, int BN, int CLUSTER = 1>
__device__ __forceinline__ void load_stage(const TensorMap* map_a, const TensorMap* map_b, unsigned sa, unsigned sb,
                                           unsigned bar, int m0, int n0, int kt, unsigned rank = 0) {
    mbarrier_arrive_expect_tx(bar, Layout<BM, BN>::STAGE_BYTES);
    tma_load_2d(sa, map_a, bar, kt * BK, m0);
    if constexpr (CLUSTER == 1) {
#pragma unroll
        for (int j = 0; j < BN / 64; ++j) tma_load_2d(sb + j * B_BOX_BYTES, map_b, bar, n0 + j * 64, kt * BK);
    } else {
#pragma unroll
        for (int j = rank; j < BN / 64; j += CLUSTER)
            tma_load_2d_multicast(sb + j * B_BOX_BYTES, map_b, bar, n0 + j * 64, kt * BK, (1u << CLUSTER) - 1);
    }
}

// The descriptors of the k16 step kk (0 .. BK/16 - 1) of one stage, for a warpgroup whose 64 rows of A
// start at shared address sa, and the stage's B tile at sb (see the header comment).
struct StageDescriptors {
    unsigned long long a, b;
};

__host__ __device__ constexpr StageDescriptors stage_descriptors(unsigned sa, unsigned sb, int kk) {
    return {matrix_descriptor(sa + kk * 32, 16, SWIZZLE_ATOM),
            matrix_descriptor(sb + kk * 16 * 128, B_BOX_BYTES, SWIZZLE_ATOM)};
}

// The BK / 16 wgmma of one stage for one warpgroup; first_scale 0 starts the accumulators afresh
// (the tile's first k-step).
template <int BN, bool BF16>
__device__ __forceinline__ void mma_stage(float (&d)[BN / 2], unsigned sa, unsigned sb, int first_scale) {
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
        const StageDescriptors desc = stage_descriptors(sa, sb, kk);
        Wgmma<BN, BF16>::mma(d, desc.a, desc.b, kk == 0 ? first_scale : 1);
    }
}

// Where accumulator d[i] of thread t (0 .. 127) of a warpgroup sits in its 64 x N block of D (the
// layout in the header comment): row 16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2),
// column 8 (i / 4) + 2 (t % 4) + i % 2.
struct Position {
    int row, col;
};

__host__ __device__ constexpr Position accumulator_position(int t, int i) {
    return {16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (t % 4) + i % 2};
}

// Store a consumer warpgroup's 64 x BN accumulators (rows row0.., columns n0..) into C, rounded to
// 16 bits, masked at M and N. Each pair d[2p], d[2p + 1] is two neighbouring columns of one row, at an
// even column; N is even (the host requires N % 8 == 0), so a pair that starts inside N is wholly
// inside and one aligned 32-bit store.
template <int BN, bool BF16>
__device__ __forceinline__ void store_tile(const float (&d)[BN / 2], unsigned short* C, int M, int N, int row0,
                                           int n0, int thread_in_group) {
#pragma unroll
    for (int p = 0; p < BN / 4; ++p) {
        const Position at = accumulator_position(thread_in_group, 2 * p);
        const int row = row0 + at.row, col = n0 + at.col;
        if (row < M && col < N)
            *reinterpret_cast<unsigned*>(C + static_cast<long long>(row) * N + col) =
                kbench_ptx::pack2<BF16>(d[2 * p], d[2 * p + 1]);
    }
}

// The TMA-store epilogue's staging of a consumer warpgroup's 64 x BN slice: BN / 64 boxes of 64 rows
// x 64 columns (C_BOX_BYTES each), a row 128 bytes whose 16-byte chunks are swizzled as TMA's 128-byte
// mode expects: chunk c of row r at (c ^ r % 8). A warp's store of one accumulator pair then covers 8 rows
// x 4 words in 32 different banks.
constexpr int C_BOX_BYTES = 64 * 128;

template <int BN, bool BF16>
__device__ __forceinline__ void stage_tile(const float (&d)[BN / 2], unsigned buffer, int thread_in_group) {
#pragma unroll
    for (int p = 0; p < BN / 4; ++p) {
        const Position at = accumulator_position(thread_in_group, 2 * p);
        const int box = at.col / 64, col = at.col % 64;
        const unsigned address =
            buffer + box * C_BOX_BYTES + at.row * 128 + (((col / 8) ^ (at.row % 8)) * 16) + (col % 8) * 2;
        const unsigned pair = kbench_ptx::pack2<BF16>(d[2 * p], d[2 * p + 1]);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(pair) : "memory");
    }
}

// The stage buffers and barriers in dynamic shared memory (the host adds 1024 bytes of slack for
// the alignment): STAGES A tiles, STAGES B tiles, C_BYTES of staging for the TMA-store epilogue (0
// without it), STAGES `full` and STAGES `empty` mbarriers.
template <int BM, int BN, int STAGES, int C_BYTES = 0>
struct Stages {
    unsigned a, b, c, full, empty;  // shared-space byte addresses
    __device__ __forceinline__ explicit Stages(const unsigned char* smem) {
        const unsigned base = (kbench_ptx::smem_addr(smem) + SWIZZLE_ATOM - 1) & ~unsigned(SWIZZLE_ATOM - 1);
        a = base;
        b = a + STAGES * Layout<BM, BN>::A_BYTES;
        c = b + STAGES * Layout<BM, BN>::B_BYTES;  // 1024-byte aligned, as the tiles keep it
        full = c + C_BYTES;
        empty = full + STAGES * 8;
    }
};

}  // namespace kbench_wgmma

namespace kbench_wgmma {

// The warp-specialized persistent kernel's body, for clusters of CLUSTER CTAs along M (1: no cluster).
// With CLUSTER = 2 the two CTAs of a cluster compute tiles (2 p, n) and (2 p + 1, n) of the same tile
// column at the same time, so they need the same B tiles: each producer loads its own A box and every
// other B box (CTA r boxes r, r + 2, ...), multicast to both CTAs (tma_load_2d_multicast), and each `full` barrier still
// expects a whole stage. A stage may be refilled only when the consumers of both CTAs are done with
// it: every consumer warp arrives on the `empty` barrier of each CTA of the cluster, and a producer
// waits on its own, which counts them all.
//
// With TMA_STORE each consumer warpgroup writes its slice of a finished tile into its own staging
// buffer in shared memory (stage_tile) and one of its threads hands the buffer to the copy engine
// (tma_store_2d through map_c), so the warpgroup goes on to its next tile's products while the tile is
// written; before it stages the next tile, that thread waits until the copy engine has read the buffer.
// Without it (map_c unused) the warpgroup stores C from its registers (store_tile).
template <int BM, int BN, int STAGES, bool BF16, int CLUSTER, bool TMA_STORE = false>
__device__ __forceinline__ void wgmma_ws_body(const TensorMap& map_a, const TensorMap& map_b, const TensorMap* map_c,
                                              unsigned short* __restrict__ C, int M, int N, int K, int group_m) {
    constexpr int CONSUMERS = BM / 64;
    constexpr int C_SLICE_BYTES = BN / 64 * C_BOX_BYTES;  // one consumer's staging buffer
    constexpr int PRODUCER_REGISTERS = 40;   // setmaxnreg of the producer warpgroup, and of the consumers:
    constexpr int CONSUMER_REGISTERS = 232;  // 128 * 40 + 2 * 128 * 232 <= 65536, the register file
    constexpr int B_BOXES = BN / 64;  // 64-column boxes of a B tile, shared out among a cluster (load_stage)
    static_assert(BM % 64 == 0 && CONSUMERS >= 1 && CONSUMERS <= 2, "one or two consumer warpgroups of 64 rows");
    static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "wgmma n of 64, 128, 192 or 256");
    static_assert(STAGES >= 2, "a ring of at least two stages");
    static_assert(CLUSTER == 1 || (CLUSTER == 2 && B_BOXES >= 2), "clusters of 2 share B tiles of at least 2 boxes");

    extern __shared__ unsigned char smem[];
    const Stages<BM, BN, STAGES, TMA_STORE ? CONSUMERS * C_SLICE_BYTES : 0> st(smem);
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(st.full + 8 * s, 1);                           // the producer's arrive.expect_tx
            mbarrier_init(st.empty + 8 * s, CONSUMERS * 4 * CLUSTER);    // one arrive per consumer warp
        }
        mbarrier_init_fence();
    }
    if (CLUSTER > 1) {
        __syncwarp();    // warp 0 whole again (barrier.cluster is .aligned: a warp's threads together)
        cluster_sync();  // no CTA signals a peer's barriers before the peer has initialised them
    } else {
        __syncthreads();
    }

    const unsigned rank = CLUSTER > 1 ? cluster_rank() : 0;
    const int clusters = gridDim.x / CLUSTER, cluster = blockIdx.x / CLUSTER;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    // Work in units of CLUSTER tiles down a tile column; a unit past M computes zeros and stores nothing.
    const int units_m = (tiles_m + CLUSTER - 1) / CLUSTER;
    const int units = units_m * tiles_n;
    const int unit_group = group_m / CLUSTER > 0 ? group_m / CLUSTER : 1;
    const int k_steps = (K + BK - 1) / BK;
    const int group = threadIdx.x / 128;

    if (group == 0) {
        // Producer warpgroup: one thread issues every load; the rest of the warpgroup only gives
        // its registers back (setmaxnreg is warpgroup-wide) and leaves.
        setmaxnreg_dec<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) {
            tensormap_prefetch(&map_a);
            tensormap_prefetch(&map_b);
            int stage = 0;
            unsigned phase = 0;
            for (int unit = cluster; unit < units; unit += clusters) {
                const TileCoords u = tile_coords(unit, units_m, tiles_n, unit_group);
                const int m0 = (u.m * CLUSTER + rank) * BM, n0 = u.n * BN;
                for (int kt = 0; kt < k_steps; ++kt) {
                    mbarrier_wait(st.empty + 8 * stage, phase ^ 1);  // the first lap passes at once
                    const unsigned sa = st.a + stage * Layout<BM, BN>::A_BYTES;
                    const unsigned sb = st.b + stage * Layout<BM, BN>::B_BYTES, bar = st.full + 8 * stage;
                    load_stage<BM, BN, CLUSTER>(&map_a, &map_b, sa, sb, bar, m0, n0, kt, rank);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
        if (CLUSTER > 1) __syncwarp();  // warp 0 whole again for the cluster barrier below
    } else {
        setmaxnreg_inc<CONSUMER_REGISTERS>();
        const int consumer = group - 1;
        const int thread_in_group = threadIdx.x % 128;
        const bool warp_leader = threadIdx.x % 32 == 0;
        auto release = [&](int stage) {  // this warp is done with `stage`: tell every producer that loads it
            __syncwarp();
            if (warp_leader) {
                if (CLUSTER == 1) {
                    mbarrier_arrive(st.empty + 8 * stage);
                } else {
#pragma unroll
                    for (int r = 0; r < CLUSTER; ++r) mbarrier_arrive_cluster(st.empty + 8 * stage, r);
                }
            }
        };
        float d[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
        int stage = 0;
        unsigned phase = 0;
        for (int unit = cluster; unit < units; unit += clusters) {
            const TileCoords u = tile_coords(unit, units_m, tiles_n, unit_group);
            const int m0 = (u.m * CLUSTER + rank) * BM, n0 = u.n * BN;
            int previous = -1;  // the stage whose wgmma group may still be in flight
            for (int kt = 0; kt < k_steps; ++kt) {
                mbarrier_wait(st.full + 8 * stage, phase);
                wgmma_fence();
                mma_stage<BN, BF16>(d, st.a + stage * Layout<BM, BN>::A_BYTES + consumer * 64 * 128,
                                    st.b + stage * Layout<BM, BN>::B_BYTES, kt == 0 ? 0 : 1);
                wgmma_commit();
                wgmma_wait<1>();  // the previous stage's group is done: its buffers can be refilled
                if (previous >= 0) release(previous);
                previous = stage;
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            wgmma_wait<0>();
            release(previous);
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) fence_operand(d[i]);
            if constexpr (TMA_STORE) {
                const unsigned buffer = st.c + consumer * C_SLICE_BYTES;
                const int barrier = 1 + consumer;  // named barrier of this warpgroup's 128 threads
                if (thread_in_group == 0) bulk_wait_read<0>();  // the last tile's stores have read the buffer
                named_barrier_sync(barrier, 128);
                stage_tile<BN, BF16>(d, buffer, thread_in_group);
                fence_proxy_async_shared();  // this thread's writes, visible to the copy engine
                named_barrier_sync(barrier, 128);
                if (thread_in_group == 0) {
#pragma unroll
                    for (int box = 0; box < BN / 64; ++box)
                        tma_store_2d(map_c, buffer + box * C_BOX_BYTES, n0 + box * 64, m0 + consumer * 64);
                    bulk_commit();
                }
            } else {
                store_tile<BN, BF16>(d, C, M, N, m0 + consumer * 64, n0, thread_in_group);
            }
        }
        if constexpr (TMA_STORE) {
            if (thread_in_group == 0) bulk_wait<0>();  // the last tile written before the block ends
        }
    }
    // A CTA leaves only when its peers are done: until then their consumers arrive on its barriers and
    // their producers' copies land in its shared memory. Every thread of the block gets here (the
    // producer warpgroup's idle threads too), as the .aligned cluster barrier needs.
    if (CLUSTER > 1) cluster_sync();
}

}  // namespace kbench_wgmma

template <int BM, int BN, int STAGES, bool BF16>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
matmul_wgmma_ws(const __grid_constant__ kbench_sm90::TensorMap map_a,
                const __grid_constant__ kbench_sm90::TensorMap map_b, unsigned short* __restrict__ C, int M, int N,
                int K, int group_m) {
    kbench_wgmma::wgmma_ws_body<BM, BN, STAGES, BF16, 1>(map_a, map_b, nullptr, C, M, N, K, group_m);
}

// The same in clusters of two CTAs along M sharing their B tiles by TMA multicast (the grid a multiple
// of 2; blocks 2c and 2c + 1 form cluster c).
template <int BM, int BN, int STAGES, bool BF16>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__((BM / 64 + 1) * 128, 1)
matmul_wgmma_ws_cluster2(const __grid_constant__ kbench_sm90::TensorMap map_a,
                         const __grid_constant__ kbench_sm90::TensorMap map_b, unsigned short* __restrict__ C, int M,
                         int N, int K, int group_m) {
    kbench_wgmma::wgmma_ws_body<BM, BN, STAGES, BF16, 2>(map_a, map_b, nullptr, C, M, N, K, group_m);
}

// The two kernels above with the TMA-store epilogue: C written through a third map, map_c, in boxes of
// 64 x 64 with the 128-byte swizzle (C 16-byte aligned, N a multiple of 8).
template <int BM, int BN, int STAGES, bool BF16>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
matmul_wgmma_ws_store(const __grid_constant__ kbench_sm90::TensorMap map_a,
                      const __grid_constant__ kbench_sm90::TensorMap map_b,
                      const __grid_constant__ kbench_sm90::TensorMap map_c, unsigned short* __restrict__ C, int M,
                      int N, int K, int group_m) {
    kbench_wgmma::wgmma_ws_body<BM, BN, STAGES, BF16, 1, true>(map_a, map_b, &map_c, C, M, N, K, group_m);
}

template <int BM, int BN, int STAGES, bool BF16>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__((BM / 64 + 1) * 128, 1)
matmul_wgmma_ws_cluster2_store(const __grid_constant__ kbench_sm90::TensorMap map_a,
                               const __grid_constant__ kbench_sm90::TensorMap map_b,
                               const __grid_constant__ kbench_sm90::TensorMap map_c, unsigned short* __restrict__ C,
                               int M, int N, int K, int group_m) {
    kbench_wgmma::wgmma_ws_body<BM, BN, STAGES, BF16, 2, true>(map_a, map_b, &map_c, C, M, N, K, group_m);
}

template <int BM, int BN, int STAGES, bool BF16>
__global__ void __launch_bounds__(BM / 64 * 128, 1)
matmul_wgmma_plain(const __grid_constant__ kbench_sm90::TensorMap map_a,
                   const __grid_constant__ kbench_sm90::TensorMap map_b, unsigned short* __restrict__ C, int M,
                   int N, int K, int group_m) {
    using namespace kbench_wgmma;
    using namespace kbench_sm90;
    static_assert(BM % 64 == 0 && BM / 64 >= 1 && BM / 64 <= 2, "one or two warpgroups of 64 rows");
    static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "wgmma n of 64, 128, 192 or 256");
    static_assert(STAGES >= 1, "at least one stage");

    extern __shared__ unsigned char smem[];
    const Stages<BM, BN, STAGES> st(smem);
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) mbarrier_init(st.full + 8 * s, 1);
        mbarrier_init_fence();
    }
    __syncthreads();

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const TileCoords t = tile_coords(blockIdx.x, tiles_m, tiles_n, group_m);
    const int m0 = t.m * BM, n0 = t.n * BN;
    const int k_steps = (K + BK - 1) / BK;
    const int group = threadIdx.x / 128;

    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES && s < k_steps; ++s)
            load_stage<BM, BN>(&map_a, &map_b, st.a + s * Layout<BM, BN>::A_BYTES, st.b + s * Layout<BM, BN>::B_BYTES,
                               st.full + 8 * s, m0, n0, s);

    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
    for (int kt = 0; kt < k_steps; ++kt) {
        const int stage = kt % STAGES;
        mbarrier_wait(st.full + 8 * stage, (kt / STAGES) & 1);
        wgmma_fence();
        mma_stage<BN, BF16>(d, st.a + stage * Layout<BM, BN>::A_BYTES + group * 64 * 128,
                            st.b + stage * Layout<BM, BN>::B_BYTES, kt == 0 ? 0 : 1);
        wgmma_commit();
        wgmma_wait<0>();
        __syncthreads();  // every warpgroup is done reading this stage
        if (threadIdx.x == 0 && kt + STAGES < k_steps)
            load_stage<BM, BN>(&map_a, &map_b, st.a + stage * Layout<BM, BN>::A_BYTES,
                               st.b + stage * Layout<BM, BN>::B_BYTES, st.full + 8 * stage, m0, n0, kt + STAGES);
    }
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) fence_operand(d[i]);
    store_tile<BN, BF16>(d, C, M, N, m0 + group * 64, n0, threadIdx.x % 128);
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
#define KBENCH_WGMMA_ONE(KERNEL, BM, BN, S, BF16)                                                         \
    template __global__ void KERNEL<BM, BN, S, BF16>(const __grid_constant__ kbench_sm90::TensorMap,             \
                                                     const __grid_constant__ kbench_sm90::TensorMap,             \
                                                     unsigned short*, int, int, int, int);
#define KBENCH_WGMMA(BM, BN, S)                              \
    KBENCH_WGMMA_ONE(matmul_wgmma_ws, BM, BN, S, false)      \
    KBENCH_WGMMA_ONE(matmul_wgmma_ws, BM, BN, S, true)       \
    KBENCH_WGMMA_ONE(matmul_wgmma_plain, BM, BN, S, false)   \
    KBENCH_WGMMA_ONE(matmul_wgmma_plain, BM, BN, S, true)
KBENCH_WGMMA_ONE(matmul_wgmma_ws_cluster2, 128, 256, 4, false)
KBENCH_WGMMA_ONE(matmul_wgmma_ws_cluster2, 128, 256, 4, true)
KBENCH_WGMMA_ONE(matmul_wgmma_ws_cluster2, 128, 128, 4, false)
KBENCH_WGMMA(128, 256, 4)
KBENCH_WGMMA(128, 192, 4)
KBENCH_WGMMA_ONE(matmul_wgmma_ws_cluster2, 128, 192, 4, false)
KBENCH_WGMMA(128, 128, 4)
KBENCH_WGMMA(128, 128, 6)
KBENCH_WGMMA(64, 256, 4)
KBENCH_WGMMA(128, 64, 4)
KBENCH_WGMMA(64, 128, 4)
#define KBENCH_WGMMA_STORE(KERNEL, BM, BN, S, BF16)                                                       \
    template __global__ void KERNEL<BM, BN, S, BF16>(                                                         \
        const __grid_constant__ kbench_sm90::TensorMap, const __grid_constant__ kbench_sm90::TensorMap,       \
        const __grid_constant__ kbench_sm90::TensorMap, unsigned short*, int, int, int, int);
KBENCH_WGMMA_STORE(matmul_wgmma_ws_store, 128, 256, 3, false)
KBENCH_WGMMA_STORE(matmul_wgmma_ws_store, 128, 256, 3, true)
KBENCH_WGMMA_STORE(matmul_wgmma_ws_cluster2_store, 128, 256, 3, false)
KBENCH_WGMMA_STORE(matmul_wgmma_ws_cluster2_store, 128, 256, 3, true)
KBENCH_WGMMA_STORE(matmul_wgmma_ws_cluster2_store, 128, 128, 4, false)
#endif
