// Prefix sum (inclusive or exclusive): each block scans a tile with the classic work-efficient
// Blelloch scan, and the tiles are joined either in one pass by decoupled look-back (Merrill and
// Garland, "Single-pass Parallel Prefix Scan with Decoupled Look-back", 2016) or in the textbook's
// three passes (scan the tiles, scan the tile totals, add each tile's prefix).
//
// Tile: THREADS threads x ITEMS consecutive elements each. The tile scan (every kernel below):
//   1. each thread loads its ITEMS elements (16-byte loads where aligned, scalar loads for a tail)
//      and scans them serially in registers; its total goes to shared memory;
//   2. Blelloch exclusive scan of the THREADS totals in shared memory: up-sweep (reduce) then
//      down-sweep, indices padded by one slot every 32 (i + i / 32) so the strided accesses of both
//      sweeps fall in distinct banks; the levels with a warp or fewer threads adding run in warp 0
//      alone, between __syncwarp()s, not block barriers;
//   3. each thread writes tile prefix + its exclusive total + its local scan.
//
// Joining the tiles:
//   scan_blelloch (one pass, one tile a block): the block takes the next tile number from a global
//     counter, so tiles start in order and every tile a block waits on is already running or done
//     (no deadlock whatever the residency). Warp 0 publishes the tile's total (status AGGREGATE),
//     looks back over the preceding tiles 32 at a time, one lane each, adding aggregates until it
//     meets a tile whose inclusive prefix is known (status PREFIX), and publishes its own prefix.
//     While warp 0 waits, the block's other warps wait at a barrier and the block moves no data.
//   scan_blelloch_pipelined (one pass, a grid of resident blocks): each block loops over tiles taken
//     from the same counter, and keeps the loads of its next AHEAD tiles in flight (cp.async into a
//     ring of shared-memory stages) while it scans, looks back and stores the current one, so the
//     look-back's L2 round trips overlap the next tiles' HBM reads. A block takes its tiles in
//     increasing order and finishes them in that order, so the lowest unfinished tile always belongs
//     to a block that is working on it, with every tile before it published: no deadlock either.
//   scan_blelloch_tiles + add_tile_prefix (three passes): pass 1 scans each tile on its own and
//     writes its total; the totals are scanned by the same kernel (recursively, blelloch.py's
//     multipass_levels); pass 3 adds each tile's exclusive prefix to its elements: y is read and
//     written twice, twice the one-pass traffic.
//
// Look-back state, two layouts:
//   PACKED: one word a tile holding {value, status} (8 bytes for 4-byte types, 16 for 8-byte ones),
//     written and read with one relaxed access each (st/ld.relaxed.gpu .u64 or .b128: a scalar access,
//     one memory operation in the PTX memory model, unlike a .v2 vector access, which is two). A
//     reader sees the whole old word or the whole new one, and the value it needs is in that word, so
//     no fence or acquire/release is needed: nothing else is read on the strength of the status.
//     The words are STRIDE bytes apart (blelloch.py: 128 by default, a line a tile). Packed densely,
//     16 tiles share a line, and the look-backs of many blocks poll the same few lines near the
//     frontier of published prefixes; a line a tile gives each word a line of its own, and ran at
//     1.44x torch.cumsum against 1.20x densely packed on an H200 (int32, 2^28 elements).
//   split: a status array and separate aggregate and prefix arrays. A value is written with a plain
//     store and then published by st.release.gpu of its status (the release orders the value before
//     the status); a reader spins on ld.acquire.gpu of the status and only then reads the value (the
//     acquire orders the status before the value, and invalidates what L1 may hold of it).
//   Both: the host zeroes the tile counter and the state (status NONE) before every launch, on the
//   same stream, so the kernel starts from a state that stream order makes visible.
//
// Staging (a full, aligned tile): each warp's part of the tile (32 x ITEMS consecutive elements) is
// copied with coalesced 16-byte accesses (512 contiguous bytes an instruction) into that warp's part of
// shared memory; after a __syncwarp() each thread reads its ITEMS consecutive elements from there; the
// store goes back the same way. A warp touches only its own part, so staging costs no block barrier.
// Shared rows of 32 elements are padded by 16 bytes: the coalesced side (8 lanes of a 16-byte access
// in one 128-byte row) is free of bank conflicts; on the per-thread side the 8 lanes of an access are
// 64 (int32, 16 items) or 144 bytes (int32/fp32, 32 items) apart and hit 8 different groups of 4 banks;
// for int64 (16 items, 128 bytes apart) two lanes share a group, a 2-way conflict. Unstaged, each
// thread loads its own 16-byte vectors: a warp's load instruction touches 32 sectors ITEMS x size apart.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "blelloch.cu needs sm_80 or newer (cp.async, __nanosleep, .b128 loads and stores)"
#endif

namespace kbench_scan {

constexpr int STATUS_NONE = 0, STATUS_AGGREGATE = 1, STATUS_PREFIX = 2;

__device__ __forceinline__ int padded(int i) { return i + (i >> 5); }  // one slot of padding every 32

// Index of element e of a staged tile: 16 bytes of padding after every 32 elements.
template <typename T>
__device__ __forceinline__ int staged_index(int e) { return e + (e >> 5) * static_cast<int>(16 / sizeof(T)); }

// Elements of one stage: a tile and its padding (blelloch.py's stage_bytes computes the same).
template <typename T, int TILE>
__host__ __device__ constexpr int stage_elements() { return TILE + TILE / 32 * static_cast<int>(16 / sizeof(T)); }

template <typename State>
struct joins_tiles { static constexpr bool value = true; };  // a look-back state: the tile needs its prefix
template <>
struct joins_tiles<void> { static constexpr bool value = false; };  // none: the three-pass kernels

template <typename T>
__device__ __forceinline__ T warp_sum_all(T v) {  // the sum of the warp's values, in every lane
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <typename T>
__device__ __forceinline__ unsigned long long to_bits(T v) {
    if constexpr (sizeof(T) == 4) {
        unsigned bits;
        memcpy(&bits, &v, 4);
        return bits;
    } else {
        unsigned long long bits;
        memcpy(&bits, &v, 8);
        return bits;
    }
}
template <typename T>
__device__ __forceinline__ T from_bits(unsigned long long bits) {
    T v;
    if constexpr (sizeof(T) == 4) {
        const unsigned low = static_cast<unsigned>(bits);
        memcpy(&v, &low, 4);
    } else {
        memcpy(&v, &bits, 8);
    }
    return v;
}

// Between two polls of a tile that has published nothing yet: back off for poll_ns nanoseconds
// (0: poll again at once), so that spinning warps leave L2 and the SM's issue slots to the loads.
__device__ __forceinline__ void poll_pause(unsigned poll_ns) {
    if (poll_ns) __nanosleep(poll_ns);
}

// The look-back state at `base`, laid out for `tiles` tiles (blelloch.py's state_bytes sizes it).
template <typename T, bool PACKED, int STRIDE = 0>
struct TileState;

template <typename T, int STRIDE>
struct TileState<T, false, STRIDE> {  // split: statuses, aggregates, prefixes; release/acquire on the status
    int* status;
    T* aggregates;
    T* prefixes;
    __device__ TileState(void* base, long long tiles)
        : status(static_cast<int*>(base)),
          aggregates(reinterpret_cast<T*>(static_cast<char*>(base) + (tiles * 4 + 15) / 16 * 16)),
          prefixes(aggregates + tiles) {}
    __device__ void publish(int tile, T value, int kind) {
        (kind == STATUS_PREFIX ? prefixes : aggregates)[tile] = value;
        asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(status + tile), "r"(kind) : "memory");
    }
    __device__ void peek(int tile, int& kind, T& value) const {  // one look: kind NONE if nothing yet
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(kind) : "l"(status + tile) : "memory");
        // after the acquire: the published value
        value = kind == STATUS_NONE ? T(0) : (kind == STATUS_PREFIX ? prefixes : aggregates)[tile];
    }
    __device__ void wait(int tile, int& kind, T& value, unsigned poll_ns) const {
        for (peek(tile, kind, value); kind == STATUS_NONE; peek(tile, kind, value)) poll_pause(poll_ns);
    }
};

template <typename T, int STRIDE>
struct TileState<T, true, STRIDE> {  // packed: {value, status} in one word, one relaxed access each way
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4- or 8-byte values");
    // Bytes from one tile's word to the next: dense by default; 32 or 128 put each tile's word in a
    // sector or an L2 line of its own, so the tiles a look-back step reads spread over L2's slices.
    static constexpr long long STEP = STRIDE ? STRIDE : 2 * sizeof(T);
    static_assert(STEP >= 2 * static_cast<long long>(sizeof(T)), "a stride holds a word");
    char* words;
    __device__ TileState(void* base, long long) : words(static_cast<char*>(base)) {}
    __device__ void publish(int tile, T value, int kind) {
        const unsigned long long bits = to_bits(value);
        if constexpr (sizeof(T) == 4) {
            asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(words + STEP * tile),
                         "l"(static_cast<unsigned long long>(kind) << 32 | bits) : "memory");
        } else {
            asm volatile("{\n\t.reg .b128 word;\n\tmov.b128 word, {%1, %2};\n\t"
                         "st.relaxed.gpu.global.b128 [%0], word;\n\t}" ::"l"(words + STEP * tile), "l"(bits),
                         "l"(static_cast<unsigned long long>(kind)) : "memory");
        }
    }
    __device__ void peek(int tile, int& kind, T& value) const {  // one look: kind NONE if nothing yet
        unsigned long long bits, status;
        if constexpr (sizeof(T) == 4) {
            unsigned long long word;
            asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(word) : "l"(words + STEP * tile) : "memory");
            bits = word & 0xffffffffull;
            status = word >> 32;
        } else {
            asm volatile("{\n\t.reg .b128 word;\n\tld.relaxed.gpu.global.b128 word, [%2];\n\t"
                         "mov.b128 {%0, %1}, word;\n\t}" : "=l"(bits), "=l"(status) : "l"(words + STEP * tile)
                         : "memory");
        }
        kind = static_cast<int>(status);
        value = from_bits<T>(bits);
    }
    __device__ void wait(int tile, int& kind, T& value, unsigned poll_ns) const {
        for (peek(tile, kind, value); kind == STATUS_NONE; peek(tile, kind, value)) poll_pause(poll_ns);
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
// predecessors 32 x WINDOW at a time, WINDOW consecutive ones a lane (lane 0 the nearest), adding
// aggregates until a tile with a known inclusive prefix, then publish this tile's inclusive prefix;
// lane 0 stores the exclusive prefix in *tile_prefix. A lane first looks at its WINDOW states at once
// (independent loads, one round trip), then waits on those that had nothing yet.
template <int WINDOW, typename T, typename State>
__device__ __forceinline__ void look_back(int tile, int lane, T total, State& state, T* tile_prefix,
                                          unsigned poll_ns) {
    if (tile == 0) {
        if (lane == 0) {
            state.publish(0, total, STATUS_PREFIX);
            *tile_prefix = T(0);
        }
        return;
    }
    if (lane == 0) state.publish(tile, total, STATUS_AGGREGATE);
    T exclusive = T(0);
    for (int nearest_pred = tile - 1 - lane * WINDOW;; nearest_pred -= 32 * WINDOW) {
        int kind[WINDOW];
        T value[WINDOW];
#pragma unroll
        for (int j = 0; j < WINDOW; ++j) {
            kind[j] = STATUS_PREFIX;  // before tile 0: an empty prefix
            value[j] = T(0);
            if (nearest_pred - j >= 0) state.peek(nearest_pred - j, kind[j], value[j]);
        }
#pragma unroll
        for (int j = 0; j < WINDOW; ++j)
            if (kind[j] == STATUS_NONE) state.wait(nearest_pred - j, kind[j], value[j], poll_ns);
        // This lane's part: its aggregates from the nearest on, up to and including its first prefix.
        T part = T(0);
        bool found = false;
#pragma unroll
        for (int j = 0; j < WINDOW; ++j) {
            if (!found) part += value[j];
            found = found || kind[j] == STATUS_PREFIX;
        }
        const unsigned with_prefix = __ballot_sync(0xffffffffu, found);
        const int nearest = with_prefix ? __ffs(with_prefix) - 1 : 31;  // lane 0 holds the nearest tiles
        exclusive += warp_sum_all(lane <= nearest ? part : T(0));
        if (with_prefix) break;
    }
    if (lane == 0) {
        state.publish(tile, exclusive + total, STATUS_PREFIX);
        *tile_prefix = exclusive;
    }
}

// What a block keeps in static shared memory for the tile scan.
template <typename T, int THREADS>
struct ScanShared {
    T sums[THREADS + THREADS / 32];
    T tile_total, tile_prefix;
};

// Copy the warp's part of a full tile (32 x ITEMS elements at x + tile_first + warp_first) into its part
// of the stage, coalesced: consecutive lanes, consecutive 16 bytes. ASYNC: cp.async (the caller commits
// and waits), else through registers.
template <typename T, int ITEMS, bool ASYNC>
__device__ __forceinline__ void stage_in(const T* x, long long tile_first, int warp_first, int lane, T* stage) {
    constexpr int VECTORS = ITEMS * sizeof(T) / 16, PER_VECTOR = 16 / sizeof(T);
    const uint4* src = reinterpret_cast<const uint4*>(x + tile_first + warp_first);
#pragma unroll
    for (int i = 0; i < VECTORS; ++i) {
        const int vec = lane + i * 32;
        T* dst = stage + staged_index<T>(warp_first + vec * PER_VECTOR);
        if constexpr (ASYNC) {
            const unsigned smem = static_cast<unsigned>(__cvta_generic_to_shared(dst));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(src + vec) : "memory");
        } else {
            *reinterpret_cast<uint4*>(dst) = __ldg(src + vec);
        }
    }
}

// Scan one tile whose elements are in the stage (`staged`: a full tile copied by stage_in, made visible
// to the warp) or in global memory; join it to its predecessors by look-back (State) or not at all
// (State = void: the three-pass kernel, which writes the tile's total to tile_sums[tile] instead).
// Ends with the tile's output written (through the stage when staged). Every thread of the block calls
// it, with block-uniform arguments; it holds block barriers.
template <typename T, int THREADS, int ITEMS, bool EXCLUSIVE, bool VECTOR, bool EARLY, int WINDOW, typename State>
__device__ __forceinline__ void scan_tile(const T* __restrict__ x, T* __restrict__ y, long long n, int tile,
                                          bool staged, T* stage, ScanShared<T, THREADS>& sh, State* state,
                                          T* tile_sums, unsigned poll_ns) {
    constexpr int TILE = THREADS * ITEMS;
    constexpr int VECTORS = ITEMS * sizeof(T) / 16;  // 16-byte vectors per thread
    constexpr int PER_VECTOR = 16 / sizeof(T);
    constexpr bool LOOK_BACK = joins_tiles<State>::value;
    const int tid = threadIdx.x;
    const int lane = tid % 32;
    const long long tile_first = static_cast<long long>(tile) * TILE;
    const long long first = tile_first + static_cast<long long>(tid) * ITEMS;
    const int warp_first = tid / 32 * 32 * ITEMS;  // this warp's part of the tile, in elements

    // 1. This thread's ITEMS consecutive elements, scanned serially.
    T v[ITEMS];
    if (staged) {
#pragma unroll
        for (int i = 0; i < VECTORS; ++i)
            reinterpret_cast<uint4*>(v)[i] =
                *reinterpret_cast<const uint4*>(stage + staged_index<T>(tid * ITEMS + i * PER_VECTOR));
    } else if (VECTOR && first + ITEMS <= n) {
        const uint4* src = reinterpret_cast<const uint4*>(x + first);
#pragma unroll
        for (int i = 0; i < VECTORS; ++i) reinterpret_cast<uint4*>(v)[i] = __ldg(src + i);
    } else {  // the tail of the last tile, or an input that is not 16-byte aligned
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) v[i] = first + i < n ? x[first + i] : T(0);
    }
#pragma unroll
    for (int i = 1; i < ITEMS; ++i) v[i] += v[i - 1];

    // 2. Blelloch exclusive scan of the THREADS thread totals. Level d of a sweep has THREADS / (2d)
    //    threads adding; once that is a warp or fewer, warp 0 does the level alone with __syncwarp
    //    (12 of the 16 levels at 256 threads), so only the wide levels cost a block barrier.
    constexpr int WIDE = THREADS / 64;  // levels d < WIDE have more than 32 threads adding
    T* sums = sh.sums;
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
            sh.tile_total = sums[padded(THREADS - 1)];
            sums[padded(THREADS - 1)] = T(0);
        }
        if constexpr (LOOK_BACK && EARLY) {  // publish and look back now: successors see this tile sooner
            __syncwarp();
            look_back<WINDOW>(tile, lane, sh.tile_total, *state, &sh.tile_prefix, poll_ns);
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

    // The tile's own prefix: decoupled look-back by warp 0 (EARLY: done above), or none (three passes).
    if constexpr (LOOK_BACK) {
        if (!EARLY && tid < 32) look_back<WINDOW>(tile, lane, sh.tile_total, *state, &sh.tile_prefix, poll_ns);
        __syncthreads();
    } else if (tid == 0 && tile_sums != nullptr) {
        tile_sums[tile] = sh.tile_total;
    }
    const T tile_prefix = LOOK_BACK ? sh.tile_prefix : T(0);

    // 3. Write: the tile's prefix + this thread's exclusive total + its local scan.
    const T offset = tile_prefix + thread_prefix;
    T w[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) w[i] = offset + (EXCLUSIVE ? (i ? v[i - 1] : T(0)) : v[i]);
    if (staged) {  // the sweeps' barriers ordered every read of the stage (step 1) before these writes
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

template <typename T>
__device__ __forceinline__ T* dynamic_stage() {
    extern __shared__ __align__(16) unsigned char kbench_scan_smem[];
    return reinterpret_cast<T*>(kbench_scan_smem);
}

}  // namespace kbench_scan

// One pass, one tile a block (the tile number from the counter). Dynamic shared memory: one stage
// when STAGED (blelloch.py's plan), none otherwise.
template <typename T, int THREADS, int ITEMS, bool EXCLUSIVE, bool VECTOR, bool STAGED, bool EARLY, bool PACKED,
          int WINDOW = 1, int STRIDE = 0>
__global__ void __launch_bounds__(THREADS)
scan_blelloch(const T* __restrict__ x, T* __restrict__ y, long long n, int* __restrict__ counter,
              void* __restrict__ tile_state, unsigned poll_ns) {
    using namespace kbench_scan;
    constexpr int TILE = THREADS * ITEMS;
    static_assert(ITEMS * sizeof(T) % 16 == 0, "a thread's items are whole 16-byte vectors");
    static_assert(THREADS % 64 == 0 && (THREADS & (THREADS - 1)) == 0, "a power of two, 64 threads or more");
    __shared__ ScanShared<T, THREADS> sh;
    __shared__ int tile_number;
    if (threadIdx.x == 0) tile_number = atomicAdd(counter, 1);
    __syncthreads();
    const int tile = tile_number;
    const long long tiles = (n + TILE - 1) / TILE;
    TileState<T, PACKED, STRIDE> state(tile_state, tiles);
    T* stage = dynamic_stage<T>();
    const long long tile_first = static_cast<long long>(tile) * TILE;
    const bool staged = STAGED && VECTOR && tile_first + TILE <= n;  // block-uniform
    if (staged) {
        stage_in<T, ITEMS, false>(x, tile_first, threadIdx.x / 32 * 32 * ITEMS, threadIdx.x % 32, stage);
        __syncwarp();
    }
    scan_tile<T, THREADS, ITEMS, EXCLUSIVE, VECTOR, EARLY, WINDOW>(x, y, n, tile, staged, stage, sh, &state,
                                                                   nullptr, poll_ns);
}

// One pass, persistent blocks: each keeps the loads of its next AHEAD tiles in flight (cp.async into
// a ring of AHEAD + 1 stages of dynamic shared memory) while it scans the current one. Tiles are taken
// from the counter one iteration before their loads are issued, so the atomic's round trip is never
// waited for: its result is needed only at the end of the iteration.
template <typename T, int THREADS, int ITEMS, bool EXCLUSIVE, bool VECTOR, int AHEAD, bool EARLY, bool PACKED,
          int WINDOW = 1, int STRIDE = 0>
__global__ void __launch_bounds__(THREADS)
scan_blelloch_pipelined(const T* __restrict__ x, T* __restrict__ y, long long n, int* __restrict__ counter,
                        void* __restrict__ tile_state, unsigned poll_ns) {
    using namespace kbench_scan;
    constexpr int TILE = THREADS * ITEMS, STAGES = AHEAD + 1;
    constexpr int STAGE = stage_elements<T, TILE>();
    static_assert(AHEAD >= 1 && AHEAD <= 3, "1 to 3 tiles loading ahead");
    static_assert(ITEMS * sizeof(T) % 16 == 0, "a thread's items are whole 16-byte vectors");
    static_assert(THREADS % 64 == 0 && (THREADS & (THREADS - 1)) == 0, "a power of two, 64 threads or more");
    __shared__ ScanShared<T, THREADS> sh;
    __shared__ int taken[AHEAD + 1];
    __shared__ int reserved_tile;
    const int tid = threadIdx.x, lane = tid % 32, warp_first = tid / 32 * 32 * ITEMS;
    const long long tiles = (n + TILE - 1) / TILE;
    TileState<T, PACKED, STRIDE> state(tile_state, tiles);
    T* stages = dynamic_stage<T>();

    // A tile's loads go to the stage only for a full tile of an aligned tensor; other tiles (the last,
    // or all of an unaligned input) are read from global memory by scan_tile itself.
    auto full = [&](int tile) { return VECTOR && tile < tiles && static_cast<long long>(tile + 1) * TILE <= n; };
    auto issue = [&](int tile, int slot) {  // one commit group per call, empty or not: uniform wait counts
        if (full(tile)) stage_in<T, ITEMS, true>(x, static_cast<long long>(tile) * TILE, warp_first, lane,
                                                 stages + slot * STAGE);
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    // Prologue: the current tile and the AHEAD after it, one round trip each. Taken back to back, a
    // block's tiles would tend to be consecutive numbers, and the successor of its first tile would be
    // its own second one, which it starts only after the first: the blocks starting together would
    // wait on one another in a chain. One round trip apart, the blocks that start together take their
    // first tiles in between. Each number is read back before the next is asked for: they increase.
    int ring[AHEAD + 1];  // ring[0]: the tile scanned now; ring[1..AHEAD]: tiles whose loads are in flight
#pragma unroll
    for (int s = 0; s <= AHEAD; ++s) {
        if (tid == 0) taken[s] = atomicAdd(counter, 1);
        __syncthreads();
        ring[s] = taken[s];
        if (s < AHEAD) issue(ring[s], s);  // its loads start before the next number is asked for
    }

    for (int k = 0; ring[0] < tiles; ++k) {  // block-uniform: ring[] is the same in every thread
        int reserved = 0;
        if (tid == THREADS - 1) reserved = atomicAdd(counter, 1);  // the tile after ring[AHEAD]
        // This slot's stage held the previous iteration's tile: the barrier ending that iteration
        // ordered every read of it before these copies into it.
        issue(ring[AHEAD], (k + AHEAD) % STAGES);
        asm volatile("cp.async.wait_group %0;" ::"n"(AHEAD) : "memory");  // this thread's copies of ring[0]
        __syncwarp();  // ... and the other lanes' copies: a warp reads only what it staged itself
        scan_tile<T, THREADS, ITEMS, EXCLUSIVE, VECTOR, EARLY, WINDOW>(x, y, n, ring[0], full(ring[0]),
                                                               stages + (k % STAGES) * STAGE, sh, &state,
                                                               nullptr, poll_ns);
        if (tid == THREADS - 1) reserved_tile = reserved;
        __syncthreads();  // reserved_tile visible; this stage's readers done before it is refilled
#pragma unroll
        for (int s = 0; s < AHEAD; ++s) ring[s] = ring[s + 1];
        ring[AHEAD] = reserved_tile;
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
}

// Pass 1 of three (and of each level of tile totals): scan tile blockIdx.x on its own and write its
// total to tile_sums[blockIdx.x] (when tile_sums is given). Dynamic shared memory: one stage when STAGED.
template <typename T, int THREADS, int ITEMS, bool EXCLUSIVE, bool VECTOR, bool STAGED>
__global__ void __launch_bounds__(THREADS)
scan_blelloch_tiles(const T* __restrict__ x, T* __restrict__ y, long long n, T* __restrict__ tile_sums) {
    using namespace kbench_scan;
    constexpr int TILE = THREADS * ITEMS;
    __shared__ ScanShared<T, THREADS> sh;
    const int tile = blockIdx.x;
    T* stage = dynamic_stage<T>();
    const long long tile_first = static_cast<long long>(tile) * TILE;
    const bool staged = STAGED && VECTOR && tile_first + TILE <= n;
    if (staged) {
        stage_in<T, ITEMS, false>(x, tile_first, threadIdx.x / 32 * 32 * ITEMS, threadIdx.x % 32, stage);
        __syncwarp();
    }
    scan_tile<T, THREADS, ITEMS, EXCLUSIVE, VECTOR, false, 1, void>(x, y, n, tile, staged, stage, sh, nullptr,
                                                                    tile_sums, 0);
}

// Pass 3: y[i] += prefixes[i / TILE] for tiles 1 and on (tile 0's prefix is 0), one block a tile,
// 16-byte accesses where aligned (a vector never straddles two tiles: TILE is a multiple of one).
template <typename T, int THREADS, int ITEMS, bool VECTOR>
__global__ void __launch_bounds__(THREADS)
add_tile_prefix(T* __restrict__ y, long long n, const T* __restrict__ prefixes) {
    constexpr int TILE = THREADS * ITEMS, PER_VECTOR = 16 / sizeof(T), VECTORS = TILE / PER_VECTOR / THREADS;
    const int tile = blockIdx.x + 1;
    const T prefix = prefixes[tile];
    const long long tile_first = static_cast<long long>(tile) * TILE;
    if (VECTOR && tile_first + TILE <= n) {
        uint4* v = reinterpret_cast<uint4*>(y + tile_first);
#pragma unroll
        for (int i = 0; i < VECTORS; ++i) {  // coalesced: consecutive threads, consecutive 16 bytes
            uint4 bits = v[threadIdx.x + i * THREADS];
            T* e = reinterpret_cast<T*>(&bits);
#pragma unroll
            for (int j = 0; j < PER_VECTOR; ++j) e[j] += prefix;
            v[threadIdx.x + i * THREADS] = bits;
        }
    } else {
        for (long long i = tile_first + threadIdx.x; i < n && i < tile_first + TILE; i += THREADS) y[i] += prefix;
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the instances kbench launches by default (every flag combination of the
// pipelined kernel at its default shape), the one-tile kernel's flags at the H200 sweep's shapes, the
// other state layouts (packed state a line a tile, as by default, and densely), wider look-back steps,
// and the three-pass kernels.
#define KBENCH_SCAN_ONE(T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED, EARLY, PACKED) \
    template __global__ void scan_blelloch<T, THREADS, ITEMS, EXCLUSIVE, VECTOR, STAGED, EARLY, PACKED, 1, \
                                           (PACKED ? 128 : 0)>(const T*, T*, long long, int*, void*, unsigned);
#define KBENCH_SCAN_PIPELINED(T, THREADS, ITEMS, EXCLUSIVE, VECTOR, AHEAD, EARLY, PACKED) \
    template __global__ void scan_blelloch_pipelined<T, THREADS, ITEMS, EXCLUSIVE, VECTOR, AHEAD, EARLY, PACKED, 1, \
                                                     (PACKED ? 128 : 0)>(const T*, T*, long long, int*, void*, unsigned);
#define KBENCH_SCAN_THREE_PASS(T, THREADS, ITEMS)                                                        \
    template __global__ void scan_blelloch_tiles<T, THREADS, ITEMS, false, true, true>(const T*, T*, long long, T*); \
    template __global__ void scan_blelloch_tiles<T, THREADS, ITEMS, true, true, true>(const T*, T*, long long, T*);  \
    template __global__ void scan_blelloch_tiles<T, THREADS, ITEMS, false, false, false>(const T*, T*, long long, T*); \
    template __global__ void scan_blelloch_tiles<T, THREADS, ITEMS, true, false, false>(const T*, T*, long long, T*);  \
    template __global__ void add_tile_prefix<T, THREADS, ITEMS, true>(T*, long long, const T*);          \
    template __global__ void add_tile_prefix<T, THREADS, ITEMS, false>(T*, long long, const T*);
#define KBENCH_SCAN_PIPELINED_FLAGS(T, THREADS, ITEMS, AHEAD)                  \
    KBENCH_SCAN_PIPELINED(T, THREADS, ITEMS, false, true, AHEAD, false, true)  \
    KBENCH_SCAN_PIPELINED(T, THREADS, ITEMS, true, true, AHEAD, false, true)   \
    KBENCH_SCAN_PIPELINED(T, THREADS, ITEMS, false, false, AHEAD, false, true) \
    KBENCH_SCAN_PIPELINED(T, THREADS, ITEMS, true, false, AHEAD, false, true)  \
    KBENCH_SCAN_PIPELINED(T, THREADS, ITEMS, false, true, AHEAD, true, true)   \
    KBENCH_SCAN_PIPELINED(T, THREADS, ITEMS, false, true, AHEAD, false, false)
#define KBENCH_SCAN_ONE_TILE_FLAGS(T, THREADS, ITEMS)                     \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, false, true, true, false, true)    \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, true, true, true, false, true)     \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, false, false, false, false, true)  \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, false, true, false, false, true)   \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, false, true, true, true, true)     \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, false, true, true, false, false)   \
    KBENCH_SCAN_ONE(T, THREADS, ITEMS, true, true, true, true, false)
KBENCH_SCAN_PIPELINED_FLAGS(int, 256, 16, 1)
KBENCH_SCAN_PIPELINED_FLAGS(float, 256, 16, 1)
KBENCH_SCAN_PIPELINED_FLAGS(long long, 256, 8, 1)
KBENCH_SCAN_PIPELINED(int, 256, 32, false, true, 1, false, true)
KBENCH_SCAN_PIPELINED(int, 256, 16, false, true, 2, false, true)
KBENCH_SCAN_PIPELINED(long long, 256, 16, false, true, 1, false, true)
KBENCH_SCAN_PIPELINED(int, 128, 16, false, true, 1, false, true)
KBENCH_SCAN_ONE_TILE_FLAGS(int, 256, 32)
KBENCH_SCAN_ONE_TILE_FLAGS(long long, 256, 16)
KBENCH_SCAN_ONE(int, 256, 16, false, true, true, false, true)
KBENCH_SCAN_ONE(int, 128, 32, false, true, true, false, true)
KBENCH_SCAN_ONE(float, 256, 32, false, true, true, false, true)
template __global__ void scan_blelloch<int, 256, 32, false, true, true, false, true, 4, 128>(const int*, int*,
                                                                                            long long, int*, void*,
                                                                                            unsigned);
template __global__ void scan_blelloch<long long, 256, 16, false, true, true, false, false, 2>(
    const long long*, long long*, long long, int*, void*, unsigned);
template __global__ void scan_blelloch<int, 256, 32, false, true, true, false, true>(const int*, int*, long long,
                                                                                    int*, void*, unsigned);
template __global__ void scan_blelloch_pipelined<long long, 256, 8, false, true, 1, false, true, 1, 32>(
    const long long*, long long*, long long, int*, void*, unsigned);
KBENCH_SCAN_THREE_PASS(int, 256, 32)
KBENCH_SCAN_THREE_PASS(long long, 256, 16)
#endif
