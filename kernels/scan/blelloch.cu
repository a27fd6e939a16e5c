// Prefix sum (inclusive or exclusive) in one pass: each block scans a tile with the second
// seed text's work-efficient Blelloch scan, and the blocks are joined by decoupled look-back
// (Merrill and Garland, "Single-pass Parallel Prefix Scan with Decoupled Look-back", 2016).
//
// Tile: THREADS threads x ITEMS consecutive elements each. Per block:
//   1. take the next tile number from a global counter (tiles start in order, so every
//      tile a block waits on below is already running or done: no deadlock);
//   2. each thread loads its ITEMS elements (16-byte loads where aligned) and scans them
//      serially in registers; its total goes to shared memory;
//   3. Blelloch exclusive scan of the THREADS totals in shared memory: up-sweep (reduce)
//      then down-sweep, indices padded by one slot every 32 (i + i / 32) so the strided
//      accesses of both sweeps fall in distinct banks; the levels with a warp or fewer
//      threads adding run in warp 0 alone, between __syncwarp()s, not block barriers;
//   4. warp 0 publishes the tile's total (flag AGGREGATE), then looks back over the
//      preceding tiles 32 at a time, one lane each, adding aggregates until it meets a
//      tile whose inclusive prefix is known (flag PREFIX), and publishes its own prefix;
//   5. each thread writes tile prefix + its exclusive total + its local scan.
// A status word (flag) is written after its value with a __threadfence() between, and
// read before its value with a __threadfence() between; aggregates and prefixes live in
// separate arrays so a value read under one flag is never the other kind.
//
// STAGED (a full tile, aligned): step 2 loads the tile with coalesced 16-byte loads (a warp reads
// 512 contiguous bytes an instruction) into shared memory, and each thread then reads its ITEMS
// consecutive elements from there; step 5 goes back the same way. Shared rows of 32 elements are
// padded by 16 bytes, so the 8 lanes of a 16-byte shared access (64 bytes apart) hit 8 different
// groups of 4 banks. Unstaged, each thread loads its 64 bytes itself: a warp's load instruction
// touches 32 sectors 64 bytes apart, each half used, the other half on its next instruction.
//
// status[0] is the tile counter, status[1 + t] tile t's flag; the host zeroes them
// before every launch (one memset).

namespace kbench_scan {

constexpr int THREADS = 256;
constexpr int FLAG_NONE = 0, FLAG_AGGREGATE = 1, FLAG_PREFIX = 2;

__device__ __forceinline__ int padded(int i) { return i + (i >> 5); }  // one slot of padding every 32

// Index of element e of a staged tile: 16 bytes of padding after every 32 elements.
template <typename T>
__device__ __forceinline__ int staged_index(int e) { return e + (e >> 5) * static_cast<int>(16 / sizeof(T)); }

template <typename T>
__device__ __forceinline__ T warp_sum_all(T v) {  // the sum of the warp's values, in every lane
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <typename T>
__device__ __forceinline__ T load_volatile(const T* p) { return *const_cast<const volatile T*>(p); }
template <typename T>
__device__ __forceinline__ void store_volatile(T* p, T v) { *const_cast<volatile T*>(p) = v; }

// Publish a value, then its flag (readers see the flag only after the value).
template <typename T>
__device__ __forceinline__ void publish(T* values, int* flags, int tile, T value, int flag) {
    store_volatile(values + tile, value);
    __threadfence();
    store_volatile(flags + tile, flag);
}

// Warp 0 of tile `tile` (all 32 lanes): publish the tile's total as its aggregate, walk back over the
// predecessors 32 at a time, one lane each, adding aggregates until a tile with a known inclusive prefix,
// then publish this tile's inclusive prefix; lane 0 stores the exclusive prefix in *tile_prefix.
template <typename T>
__device__ __forceinline__ void look_back(int tile, int lane, T total, int* flags, T* aggregates, T* prefixes,
                                          T* tile_prefix) {
    if (tile == 0) {
        if (lane == 0) {
            publish(prefixes, flags, 0, total, FLAG_PREFIX);
            *tile_prefix = T(0);
        }
        return;
    }
    if (lane == 0) publish(aggregates, flags, tile, total, FLAG_AGGREGATE);
    T exclusive = T(0);
    for (int pred = tile - 1 - lane;; pred -= 32) {
        int flag = FLAG_PREFIX;  // before tile 0: an empty prefix
        T value = T(0);
        if (pred >= 0) {
            do {
                flag = load_volatile(flags + pred);
            } while (flag == FLAG_NONE);
            __threadfence();
            value = load_volatile((flag == FLAG_PREFIX ? prefixes : aggregates) + pred);
        }
        const unsigned with_prefix = __ballot_sync(0xffffffffu, flag == FLAG_PREFIX);
        const int nearest = with_prefix ? __ffs(with_prefix) - 1 : 31;  // lane 0 is the nearest tile
        exclusive += warp_sum_all(lane <= nearest ? value : T(0));
        if (with_prefix) break;
    }
    if (lane == 0) {
        publish(prefixes, flags, tile, exclusive + total, FLAG_PREFIX);
        *tile_prefix = exclusive;
    }
}

}  // namespace kbench_scan

template <typename T, int ITEMS, bool EXCLUSIVE, bool VECTOR, bool STAGED = false, bool EARLY = false>
__global__ void __launch_bounds__(kbench_scan::THREADS)
scan_blelloch(const T* __restrict__ x, T* __restrict__ y, long long n, int* __restrict__ status,
              T* __restrict__ aggregates, T* __restrict__ prefixes) {
    using namespace kbench_scan;
    constexpr int TILE = THREADS * ITEMS;
    constexpr int VECTORS = ITEMS * sizeof(T) / 16;  // 16-byte loads per thread
    static_assert(ITEMS * sizeof(T) % 16 == 0, "a thread's items are whole 16-byte vectors");

    __shared__ T sums[THREADS + THREADS / 32];
    __shared__ int tile_number;
    __shared__ T tile_total, tile_prefix;
    const int tid = threadIdx.x;
    const int lane = tid % 32;
    if (tid == 0) tile_number = atomicAdd(status, 1);
    __syncthreads();
    const int tile = tile_number;
    int* flags = status + 1;

    // 2. This thread's ITEMS consecutive elements, scanned serially.
    const long long first = static_cast<long long>(tile) * TILE + static_cast<long long>(tid) * ITEMS;
    T v[ITEMS];
    constexpr int PER_VECTOR = 16 / sizeof(T);
    constexpr int STAGE_ELEMENTS = STAGED ? TILE + TILE / 32 * PER_VECTOR : 1;
    __shared__ __align__(16) T stage[STAGE_ELEMENTS];
    const long long tile_first = static_cast<long long>(tile) * TILE;
    const bool staged = STAGED && VECTOR && tile_first + TILE <= n;  // block-uniform
    if (staged) {
        const uint4* src = reinterpret_cast<const uint4*>(x + tile_first);
#pragma unroll
        for (int i = 0; i < VECTORS; ++i) {
            const int vec = tid + i * THREADS;  // coalesced: consecutive lanes, consecutive 16 bytes
            *reinterpret_cast<uint4*>(stage + staged_index<T>(vec * PER_VECTOR)) = __ldg(src + vec);
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < VECTORS; ++i)
            reinterpret_cast<uint4*>(v)[i] =
                *reinterpret_cast<const uint4*>(stage + staged_index<T>(tid * ITEMS + i * PER_VECTOR));
    } else if (VECTOR && first + ITEMS <= n) {
        const uint4* src = reinterpret_cast<const uint4*>(x + first);
#pragma unroll
        for (int i = 0; i < VECTORS; ++i) reinterpret_cast<uint4*>(v)[i] = __ldg(src + i);
    } else {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) v[i] = first + i < n ? x[first + i] : T(0);
    }
#pragma unroll
    for (int i = 1; i < ITEMS; ++i) v[i] += v[i - 1];

    // 3. Blelloch exclusive scan of the THREADS thread totals. Level d of a sweep has THREADS / (2d)
    //    threads adding; once that is a warp or fewer, warp 0 does the level alone with __syncwarp
    //    (12 of the 16 levels at 256 threads), so only the wide levels cost a block barrier.
    constexpr int WIDE = THREADS / 64;  // levels d < WIDE have more than 32 threads adding
    sums[padded(tid)] = v[ITEMS - 1];
#pragma unroll
    for (int d = 1; d < WIDE; d <<= 1) {  // up-sweep, wide levels
        __syncthreads();
        const int i = (tid + 1) * 2 * d - 1;
        if (i < THREADS) sums[padded(i)] += sums[padded(i - d)];
    }
    __syncthreads();
    if (tid < 32) {
#pragma unroll
        for (int d = WIDE; d < THREADS; d <<= 1) {  // up-sweep, one warp: partial sums in place
            const int i = (tid + 1) * 2 * d - 1;
            if (i < THREADS) sums[padded(i)] += sums[padded(i - d)];
            __syncwarp();
        }
        if (tid == 0) {
            tile_total = sums[padded(THREADS - 1)];
            sums[padded(THREADS - 1)] = T(0);
        }
        if (EARLY) {  // publish and look back now: successors see this tile's aggregate and prefix sooner
            __syncwarp();
            look_back(tile, lane, tile_total, flags, aggregates, prefixes, &tile_prefix);
        }
#pragma unroll
        for (int d = THREADS / 2; d >= WIDE; d >>= 1) {  // down-sweep, one warp: exclusive prefixes
            __syncwarp();
            const int i = (tid + 1) * 2 * d - 1;
            if (i < THREADS) {
                const T left = sums[padded(i - d)];
                sums[padded(i - d)] = sums[padded(i)];
                sums[padded(i)] += left;
            }
        }
    }
#pragma unroll
    for (int d = WIDE / 2; d >= 1; d >>= 1) {  // down-sweep, wide levels
        __syncthreads();
        const int i = (tid + 1) * 2 * d - 1;
        if (i < THREADS) {
            const T left = sums[padded(i - d)];
            sums[padded(i - d)] = sums[padded(i)];
            sums[padded(i)] += left;
        }
    }
    __syncthreads();
    const T thread_prefix = sums[padded(tid)];

    // 4. Decoupled look-back by warp 0 (EARLY: already done above, before the narrow down-sweep).
    if (!EARLY && tid < 32) look_back(tile, lane, tile_total, flags, aggregates, prefixes, &tile_prefix);
    __syncthreads();

    // 5. Write: the tile's prefix + this thread's exclusive total + its local scan.
    const T offset = tile_prefix + thread_prefix;
    T w[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) w[i] = offset + (EXCLUSIVE ? (i ? v[i - 1] : T(0)) : v[i]);
    if (staged) {  // the sweeps' barriers ordered every read of the stage (step 2) before these writes
#pragma unroll
        for (int i = 0; i < VECTORS; ++i)
            *reinterpret_cast<uint4*>(stage + staged_index<T>(tid * ITEMS + i * PER_VECTOR)) =
                reinterpret_cast<const uint4*>(w)[i];
        __syncthreads();
        uint4* dst = reinterpret_cast<uint4*>(y + tile_first);
#pragma unroll
        for (int i = 0; i < VECTORS; ++i) {
            const int vec = tid + i * THREADS;
            dst[vec] = *reinterpret_cast<const uint4*>(stage + staged_index<T>(vec * PER_VECTOR));
        }
    } else if (VECTOR && first + ITEMS <= n) {
        uint4* dst = reinterpret_cast<uint4*>(y + first);
#pragma unroll
        for (int i = 0; i < VECTORS; ++i) dst[i] = reinterpret_cast<const uint4*>(w)[i];
    } else {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (first + i < n) y[first + i] = w[i];
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the instances kbench launches.
#define KBENCH_SCAN_ONE(T, ITEMS, EXCLUSIVE, VECTOR, STAGED) \
    template __global__ void scan_blelloch<T, ITEMS, EXCLUSIVE, VECTOR, STAGED, false>(const T*, T*, long long, int*, T*, T*); \
    template __global__ void scan_blelloch<T, ITEMS, EXCLUSIVE, VECTOR, STAGED, true>(const T*, T*, long long, int*, T*, T*);
#define KBENCH_SCAN(T, ITEMS)                        \
    KBENCH_SCAN_ONE(T, ITEMS, false, true, false)    \
    KBENCH_SCAN_ONE(T, ITEMS, true, true, false)     \
    KBENCH_SCAN_ONE(T, ITEMS, false, false, false)   \
    KBENCH_SCAN_ONE(T, ITEMS, true, false, false)    \
    KBENCH_SCAN_ONE(T, ITEMS, false, true, true)     \
    KBENCH_SCAN_ONE(T, ITEMS, true, true, true)
KBENCH_SCAN(int, 16)
KBENCH_SCAN(int, 32)
KBENCH_SCAN(float, 32)
KBENCH_SCAN(long long, 8)
KBENCH_SCAN(long long, 16)
#endif
