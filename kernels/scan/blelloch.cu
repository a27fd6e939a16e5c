// Prefix sum (inclusive or exclusive) in one pass: each block scans a tile with the
// classic work-efficient Blelloch scan, and the blocks are joined by decoupled look-back
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
//   4. warp 0 publishes the tile's total (status AGGREGATE), then looks back over the
//      preceding tiles 32 at a time, one lane each, adding aggregates until it meets a
//      tile whose inclusive prefix is known (status PREFIX), and publishes its own prefix;
//   5. each thread writes tile prefix + its exclusive total + its local scan.
//
// Tile state (step 4), two layouts:
//   PACKED: one word a tile holding {status, value} (8 bytes for 4-byte types, 16 for 8-byte
//     ones), written and read in one access, so a reader never sees a status without its value
//     and no fence is needed. 16-byte vector accesses are not promised indivisible by the PTX
//     memory model; CUB's ScanTileState relies on them in the same way (longlong2 words).
//   split: a status array and separate aggregate and prefix arrays; each value is written before
//     its status with a __threadfence() between, and read after it with a __threadfence() between
//     (a membar.gl each, which under a full memory system costs a round trip of its own).
//
// STAGED (a full tile, aligned): step 2 loads each warp's part of the tile (32 x ITEMS
// consecutive elements) with coalesced 16-byte loads (512 contiguous bytes an instruction) into
// that warp's part of shared memory; after a __syncwarp() each thread reads its ITEMS consecutive
// elements from there; step 5 goes back the same way. A warp touches only its own part, so the
// staging costs no block barrier. Shared rows of 32 elements are padded by 16 bytes. The coalesced
// side (8 lanes of a 16-byte access in one 128-byte row) is free of bank conflicts. On the per-thread
// side the 8 lanes of an access are 64 (int32, 16 items) or 144 bytes (int32/fp32, 32 items) apart
// and hit 8 different groups of 4 banks; for int64 (16 items, 128 bytes apart) two lanes share a
// group, a 2-way conflict. Unstaged, each thread loads its 64 bytes itself: a warp's load instruction
// touches 32 sectors 64 bytes apart, each half used, the other half on its next instruction.
//
// The host zeroes the tile counter and the tile state before every launch (one memset).

namespace kbench_scan {

constexpr int STATUS_NONE = 0, STATUS_AGGREGATE = 1, STATUS_PREFIX = 2;

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

// The look-back state at `base`, laid out for `tiles` tiles (blelloch.py's state_bytes sizes it).
template <typename T, bool PACKED>
struct TileState;

template <typename T>
struct TileState<T, false> {  // split: statuses, aggregates, prefixes; fences order value and status
    int* status;
    T* aggregates;
    T* prefixes;
    __device__ TileState(void* base, long long tiles)
        : status(static_cast<int*>(base)),
          aggregates(reinterpret_cast<T*>(static_cast<char*>(base) + (tiles * 4 + 15) / 16 * 16)),
          prefixes(aggregates + tiles) {}
    __device__ void publish(int tile, T value, int kind) {
        store_volatile((kind == STATUS_PREFIX ? prefixes : aggregates) + tile, value);
        __threadfence();  // the value before its status
        store_volatile(status + tile, kind);
    }
    __device__ void wait(int tile, int& kind, T& value) const {  // until the tile has published something
        do {
            kind = load_volatile(status + tile);
        } while (kind == STATUS_NONE);
        __threadfence();  // the status before its value
        value = load_volatile((kind == STATUS_PREFIX ? prefixes : aggregates) + tile);
    }
};

template <typename T>
struct TileState<T, true> {  // packed: {status, value} in one word, one access each way
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4- or 8-byte values");
    char* words;
    __device__ TileState(void* base, long long) : words(static_cast<char*>(base)) {}
    __device__ void publish(int tile, T value, int kind) {
        if constexpr (sizeof(T) == 4) {
            unsigned bits;
            memcpy(&bits, &value, 4);
            store_volatile(reinterpret_cast<unsigned long long*>(words) + tile,
                           static_cast<unsigned long long>(kind) << 32 | bits);
        } else {
            unsigned long long bits;
            memcpy(&bits, &value, 8);
            asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(words + 16LL * tile), "l"(bits),
                         "l"(static_cast<unsigned long long>(kind)) : "memory");
        }
    }
    __device__ void wait(int tile, int& kind, T& value) const {
        if constexpr (sizeof(T) == 4) {
            unsigned long long word;
            do {
                word = load_volatile(reinterpret_cast<const unsigned long long*>(words) + tile);
            } while ((word >> 32) == STATUS_NONE);
            kind = static_cast<int>(word >> 32);
            const unsigned bits = static_cast<unsigned>(word);
            memcpy(&value, &bits, 4);
        } else {
            unsigned long long bits, status;
            do {
                asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(bits), "=l"(status)
                             : "l"(words + 16LL * tile) : "memory");
            } while (status == STATUS_NONE);
            kind = static_cast<int>(status);
            memcpy(&value, &bits, 8);
        }
    }
};

// One level of the Blelloch sweeps over the THREADS thread totals (padded indices): at distance d,
// the thread whose right element i = (tid + 1) * 2d - 1 exists adds (up) or swaps and adds (down).
template <typename T, int THREADS>
__device__ __forceinline__ void up_level(T* sums, int tid, int d) {
    const int i = (tid + 1) * 2 * d - 1;
    if (i < THREADS) sums[padded(i)] += sums[padded(i - d)];
}
template <typename T, int THREADS>
__device__ __forceinline__ void down_level(T* sums, int tid, int d) {
    const int i = (tid + 1) * 2 * d - 1;
    if (i < THREADS) {
        const T left = sums[padded(i - d)];
        sums[padded(i - d)] = sums[padded(i)];
        sums[padded(i)] += left;
    }
}

// Warp 0 of tile `tile` (all 32 lanes): publish the tile's total as its aggregate, walk back over the
// predecessors 32 at a time, one lane each, adding aggregates until a tile with a known inclusive prefix,
// then publish this tile's inclusive prefix; lane 0 stores the exclusive prefix in *tile_prefix.
template <typename T, typename State>
__device__ __forceinline__ void look_back(int tile, int lane, T total, State& state, T* tile_prefix) {
    if (tile == 0) {
        if (lane == 0) {
            state.publish(0, total, STATUS_PREFIX);
            *tile_prefix = T(0);
        }
        return;
    }
    if (lane == 0) state.publish(tile, total, STATUS_AGGREGATE);
    T exclusive = T(0);
    for (int pred = tile - 1 - lane;; pred -= 32) {
        int kind = STATUS_PREFIX;  // before tile 0: an empty prefix
        T value = T(0);
        if (pred >= 0) state.wait(pred, kind, value);
        const unsigned with_prefix = __ballot_sync(0xffffffffu, kind == STATUS_PREFIX);
        const int nearest = with_prefix ? __ffs(with_prefix) - 1 : 31;  // lane 0 is the nearest tile
        exclusive += warp_sum_all(lane <= nearest ? value : T(0));
        if (with_prefix) break;
    }
    if (lane == 0) {
        state.publish(tile, exclusive + total, STATUS_PREFIX);
        *tile_prefix = exclusive;
    }
}

}  // namespace kbench_scan

template <typename T, int THREADS, int ITEMS, bool EXCLUSIVE, bool VECTOR, bool STAGED, bool EARLY, bool PACKED>
__global__ void __launch_bounds__(THREADS)
scan_blelloch(const T* __restrict__ x, T* __restrict__ y, long long n, int* __restrict__ counter,
              void* __restrict__ tile_state) {
    using namespace kbench_scan;
    constexpr int TILE = THREADS * ITEMS;
    constexpr int VECTORS = ITEMS * sizeof(T) / 16;  // 16-byte loads per thread
    constexpr int PER_VECTOR = 16 / sizeof(T);
    static_assert(ITEMS * sizeof(T) % 16 == 0, "a thread's items are whole 16-byte vectors");
    static_assert(THREADS % 64 == 0 && (THREADS & (THREADS - 1)) == 0, "a power of two, 64 threads or more");

    __shared__ T sums[THREADS + THREADS / 32];
    __shared__ int tile_number;
    __shared__ T tile_total, tile_prefix;
    const int tid = threadIdx.x;
    const int lane = tid % 32;
    if (tid == 0) tile_number = atomicAdd(counter, 1);
    __syncthreads();
    const int tile = tile_number;
    TileState<T, PACKED> state(tile_state, gridDim.x);

    // 2. This thread's ITEMS consecutive elements, scanned serially.
    const long long tile_first = static_cast<long long>(tile) * TILE;
    const long long first = tile_first + static_cast<long long>(tid) * ITEMS;
    T v[ITEMS];
    constexpr int STAGE_ELEMENTS = STAGED ? TILE + TILE / 32 * PER_VECTOR : 1;
    __shared__ __align__(16) T stage[STAGE_ELEMENTS];
    const bool staged = STAGED && VECTOR && tile_first + TILE <= n;  // block-uniform
    const int warp_first = tid / 32 * 32 * ITEMS;  // this warp's part of the tile, in elements
    if (staged) {
        const uint4* src = reinterpret_cast<const uint4*>(x + tile_first + warp_first);
#pragma unroll
        for (int i = 0; i < VECTORS; ++i) {
            const int vec = lane + i * 32;  // coalesced: consecutive lanes, consecutive 16 bytes
            *reinterpret_cast<uint4*>(stage + staged_index<T>(warp_first + vec * PER_VECTOR)) = __ldg(src + vec);
        }
        __syncwarp();
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
        up_level<T, THREADS>(sums, tid, d);
    }
    __syncthreads();
    if (tid < 32) {
#pragma unroll
        for (int d = WIDE; d < THREADS; d <<= 1) {  // up-sweep, one warp: partial sums in place
            up_level<T, THREADS>(sums, tid, d);
            __syncwarp();
        }
        if (tid == 0) {
            tile_total = sums[padded(THREADS - 1)];
            sums[padded(THREADS - 1)] = T(0);
        }
        if (EARLY) {  // publish and look back now: successors see this tile's aggregate and prefix sooner
            __syncwarp();
            look_back(tile, lane, tile_total, state, &tile_prefix);
        }
#pragma unroll
        for (int d = THREADS / 2; d >= WIDE; d >>= 1) {  // down-sweep, one warp: exclusive prefixes
            __syncwarp();
            down_level<T, THREADS>(sums, tid, d);
        }
    }
#pragma unroll
    for (int d = WIDE / 2; d >= 1; d >>= 1) {  // down-sweep, wide levels
        __syncthreads();
        down_level<T, THREADS>(sums, tid, d);
    }
    __syncthreads();
    const T thread_prefix = sums[padded(tid)];

    // 4. Decoupled look-back by warp 0 (EARLY: already done above, before the narrow down-sweep).
    if (!EARLY && tid < 32) look_back(tile, lane, tile_total, state, &tile_prefix);
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
        __syncwarp();
        uint4* dst = reinterpret_cast<uint4*>(y + tile_first + warp_first);
#pragma unroll
        for (int i = 0; i < VECTORS; ++i) {
            const int vec = lane + i * 32;
            dst[vec] = *reinterpret_cast<const uint4*>(stage + staged_index<T>(warp_first + vec * PER_VECTOR));
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
// nvcc build check (tests/): the instances kbench launches (every flag combination at the default
// THREADS, and the other tile shapes and state layouts the H200 sweep measures).
#define KBENCH_SCAN_ONE(T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED, EARLY, PACKED) \
    template __global__ void scan_blelloch<T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED, EARLY, PACKED>( \
        const T*, T*, long long, int*, void*);
#define KBENCH_SCAN_STATES(T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED)          \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED, false, false)  \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED, true, false)   \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED, false, true)   \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED, true, true)
#define KBENCH_SCAN(T, THREADS, ITEMS)                          \
    KBENCH_SCAN_STATES(T, THREADS, ITEMS, false, true, false)   \
    KBENCH_SCAN_STATES(T, THREADS, ITEMS, true, true, false)    \
    KBENCH_SCAN_STATES(T, THREADS, ITEMS, false, false, false)  \
    KBENCH_SCAN_STATES(T, THREADS, ITEMS, true, false, false)   \
    KBENCH_SCAN_STATES(T, THREADS, ITEMS, false, true, true)    \
    KBENCH_SCAN_STATES(T, THREADS, ITEMS, true, true, true)
KBENCH_SCAN(int, 256, 16)
KBENCH_SCAN(int, 256, 32)
KBENCH_SCAN(int, 128, 32)
KBENCH_SCAN(float, 256, 32)
KBENCH_SCAN(long long, 256, 8)
KBENCH_SCAN(long long, 256, 16)
KBENCH_SCAN(long long, 128, 16)
#endif
