// fp32 matmul C = A B, shared-memory tiles plus register blocking.
//
// A is M x K, B is K x N, C is M x N, all row-major and contiguous, fp32.
//
// One block of (BM/TM) x (BN/TN) threads owns a BM x BN tile of C; each thread
// owns a TM x TN micro-tile of it, held in registers. K is walked BK at a time:
// the block copies a BM x BK tile of A (transposed, As[k][m], so that a thread's
// TM values of one k are contiguous) and a BK x BN tile of B (Bs[k][n]) into
// shared memory; then for each of the BK values of k every thread reads TM
// values of A and TN of B from shared memory and does TM x TN FMAs: per shared
// load it does TM·TN/(TM+TN) FMAs instead of the tiled kernel's 1/2, which is
// what register tiling buys.
//
// A thread's micro-tile is not one contiguous block: its TM rows are TM/4 runs
// of 4 rows, run g at row g·(BM/TM)·4 + ty·4 (and likewise its TN columns), so
// the float4 shared loads of the threads of a warp are contiguous (no bank
// conflicts) and so are their float4 stores of C.
//
// Shared tiles are double-buffered: tile t+1 is read from global memory into
// registers before tile t is computed and written to the other buffer after,
// so one __syncthreads per tile suffices and the load latency hides behind the
// FMAs.
//
// VEC: global loads and stores of 4 floats at once. The host sets it only when
// K % 4 == 0, N % 4 == 0 and A, B, C are 16-byte aligned, so that a float4
// lies wholly inside or wholly outside a row; otherwise element by element.
// Every global load and store is bounds-checked (zeros past M, N, K), so any
// M, N, K >= 1 works.
//
// No headers: NVRTC (cupy.RawModule) and nvcc compile it alike.

// One thread's chunk of a tile: V floats from src (one float4 when VEC: the chunk is wholly inside
// or outside the matrix), zeros where it is outside.
template <int V, bool VEC>
__device__ __forceinline__ void load_chunk(float (&dst)[V], const float* src, bool inside) {
    if (VEC) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (inside) v = *reinterpret_cast<const float4*>(src);
        dst[0] = v.x;
        dst[V > 1 ? 1 : 0] = v.y;
        dst[V > 2 ? 2 : 0] = v.z;
        dst[V > 3 ? 3 : 0] = v.w;
    } else {
        dst[0] = inside ? *src : 0.f;
    }
}

template <int BM, int BN, int BK, int TM, int TN, bool VEC>
// VEC kernels ask for two blocks per SM (at most 128 registers: 128x128/8x8 fits with no spill).
__global__ void __launch_bounds__((BM / TM) * (BN / TN), VEC ? 2 : 1)
matmul_regblock(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                int M, int N, int K) {
    constexpr int TX = BN / TN;  // threads along n
    constexpr int TY = BM / TM;  // threads along m
    constexpr int THREADS = TX * TY;
    constexpr int V = VEC ? 4 : 1;           // floats per global access
    constexpr int A_LOADS = BM * BK / (V * THREADS);
    constexpr int B_LOADS = BK * BN / (V * THREADS);
    constexpr int AS_LD = BM + 4;            // As row pad: the transposed stores of a warp spread over banks
    static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tiles are runs of 4");
    static_assert(BM % TM == 0 && BN % TN == 0, "micro-tiles divide the block tile");
    static_assert(A_LOADS * V * THREADS == BM * BK, "the block copies whole A tiles");
    static_assert(B_LOADS * V * THREADS == BK * BN, "the block copies whole B tiles");
    static_assert(BK % V == 0 && BN % V == 0, "vector loads stay inside a tile row");

    __shared__ __align__(16) float As[2][BK][AS_LD];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % TX;
    const int ty = tid / TX;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;

    // Staging registers for the next tiles.
    float ra[A_LOADS][V];
    float rb[B_LOADS][V];

    auto load_global = [&](int k0) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            const int r = idx / (BK / V);        // row of the A tile
            const int kc = (idx % (BK / V)) * V; // first column of the A tile
            const int gr = m0 + r;
            const int gk = k0 + kc;
            // VEC: K % 4 == 0, so the float4 at gk is inside the row when gk < K.
            load_chunk<V, VEC>(ra[l], A + static_cast<long long>(gr) * K + gk, gr < M && gk < K);
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            const int kr = idx / (BN / V);        // row of the B tile
            const int nc = (idx % (BN / V)) * V;  // first column of the B tile
            const int gk = k0 + kr;
            const int gn = n0 + nc;
            // VEC: N % 4 == 0, so the float4 at gn is inside the row when gn < N.
            load_chunk<V, VEC>(rb[l], B + static_cast<long long>(gk) * N + gn, gk < K && gn < N);
        }
    };

    auto store_shared = [&](int buf) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            const int r = idx / (BK / V);
            const int kc = (idx % (BK / V)) * V;
#pragma unroll
            for (int j = 0; j < V; ++j) As[buf][kc + j][r] = ra[l][j];
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            const int kr = idx / (BN / V);
            const int nc = (idx % (BN / V)) * V;
            if (VEC) {
                *reinterpret_cast<float4*>(&Bs[buf][kr][nc]) =
                    make_float4(rb[l][0], rb[l][V > 1 ? 1 : 0], rb[l][V > 2 ? 2 : 0], rb[l][V > 3 ? 3 : 0]);
            } else {
                Bs[buf][kr][nc] = rb[l][0];
            }
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    const int k_tiles = (K + BK - 1) / BK;
    load_global(0);
    store_shared(0);
    __syncthreads();

    for (int t = 0; t < k_tiles; ++t) {
        const int buf = t & 1;
        const bool more = t + 1 < k_tiles;
        if (more) load_global((t + 1) * BK);  // in flight while this tile is computed

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM];
            float b[TN];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) {
                const float4 v = *reinterpret_cast<const float4*>(&As[buf][k][g * TY * 4 + ty * 4]);
                a[g * 4 + 0] = v.x;
                a[g * 4 + 1] = v.y;
                a[g * 4 + 2] = v.z;
                a[g * 4 + 3] = v.w;
            }
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][k][g * TX * 4 + tx * 4]);
                b[g * 4 + 0] = v.x;
                b[g * 4 + 1] = v.y;
                b[g * 4 + 2] = v.z;
                b[g * 4 + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }

        // The other buffer was last read in iteration t-1, before the barrier that ended it.
        if (more) store_shared(buf ^ 1);
        __syncthreads();
    }

    // Micro-tile element (i, j) is C[m0 + row(i)][n0 + col(j)], row(i) = (i/4)·TY·4 + ty·4 + i%4.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gr = m0 + (i / 4) * TY * 4 + ty * 4 + (i % 4);
        if (gr >= M) continue;
        float* crow = C + static_cast<long long>(gr) * N;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            const int gc = n0 + g * TX * 4 + tx * 4;
            if (VEC && gc + 3 < N) {
                *reinterpret_cast<float4*>(crow + gc) =
                    make_float4(acc[i][g * 4 + 0], acc[i][g * 4 + 1], acc[i][g * 4 + 2], acc[i][g * 4 + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (gc + j < N) crow[gc + j] = acc[i][g * 4 + j];
            }
        }
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
#define KBENCH_REGBLOCK(BM, BN, BK, TM, TN)                                                           \
    template __global__ void matmul_regblock<BM, BN, BK, TM, TN, true>(const float*, const float*,    \
                                                                       float*, int, int, int);        \
    template __global__ void matmul_regblock<BM, BN, BK, TM, TN, false>(const float*, const float*,   \
                                                                        float*, int, int, int);
KBENCH_REGBLOCK(128, 128, 8, 8, 8)
KBENCH_REGBLOCK(64, 64, 16, 4, 4)
KBENCH_REGBLOCK(128, 64, 16, 8, 4)
#endif
