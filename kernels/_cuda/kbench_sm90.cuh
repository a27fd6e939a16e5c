// PTX wrappers for Hopper's asynchronous machinery: mbarriers, TMA tensor loads, wgmma, setmaxnreg.
//
// No headers: NVRTC and nvcc compile it alike. The wgmma and setmaxnreg wrappers need the
// sm_90a target (NVRTC and nvcc: -arch=sm_90a; nvcc also -gencode=arch=compute_90a,code=sm_90a);
// the mbarrier and TMA ones are plain sm_90.
#pragma once

namespace kbench_sm90 {

// A CUtensorMap (cuda.h): 128 opaque bytes, 64-byte aligned, encoded on the host by
// cuTensorMapEncodeTiled and passed by value as a `const __grid_constant__` kernel parameter, so
// that its address (a generic address into the parameter space) can be given to the TMA unit.
// Declared here because NVRTC cannot include the driver API's cuda.h.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

// ---- mbarriers (shared::cta, 8 bytes each) ---------------------------------------------------

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// Make the initialised barriers visible to the async proxy (the TMA unit's complete_tx) and to the
// other threads; a __syncthreads must follow.
__device__ __forceinline__ void mbarrier_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` more to come from the TMA unit in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// How long a try_wait may hold its thread suspended, in nanoseconds (the PTX suspendTimeHint; CUTLASS's
// value). Without the hint a try_wait gives up after a short, system-dependent time and mbarrier_wait's
// loop spins, every retry an instruction issued by the scheduler that the SM's other warps share (a TMA
// producer waiting for a stage to empty retried about every 20 cycles).
constexpr unsigned MBARRIER_SUSPEND_NS = 10000000;

// Phases alternate parity 0, 1, 0, ... starting with phase 0 in progress. try_wait.parity P succeeds
// once the phase of parity P has completed: right after init, waiting on parity 1 passes at once (the
// "previous" phase counts as complete) and waiting on parity 0 blocks until the first phase ends.
__device__ __forceinline__ bool mbarrier_try_wait(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity), "r"(MBARRIER_SUSPEND_NS)
        : "memory");
    return done != 0;
}

__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
    while (!mbarrier_try_wait(bar, parity)) {
    }
}

// ---- TMA ---------------------------------------------------------------------------------------

__device__ __forceinline__ void tensormap_prefetch(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// Copy the box at coordinates (c0 innermost, c1) of a 2-D tensor map into shared memory at `dst`,
// completing `bar`'s transaction bytes (the whole box, out-of-bounds elements zero-filled, counts).
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}

// The same for a 3-D tensor map: the box at (c0 innermost, c1, c2).
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1,
                                            int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// Copy `bytes` contiguous bytes from global memory at `src` into shared memory at `dst` (no tensor map:
// both 16-byte aligned, `bytes` a multiple of 16), completing `bar`'s transaction bytes.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(src)), "r"(bytes), "r"(bar)
                 : "memory");
}

// The same copy of a 2-D box, written at `dst` in the shared memory of every CTA of the cluster whose
// bit is set in `cta_mask` (bit r: the CTA of rank r), each completing the mbarrier at `bar` in its own
// shared memory (dst and bar are this CTA's addresses: the same offsets in every CTA).
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TensorMap* map, unsigned bar, int c0,
                                                      int c1, unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%3, %4}], [%2], %5;\n"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
        : "memory");
}

// Write the box at shared address `src` (laid out as the map's swizzle says) to the box of a 2-D tensor
// map at coordinates (c0 innermost, c1); elements past the tensor's edges are not written. The copy joins
// the issuing thread's current bulk group: bulk_commit closes the group, bulk_wait_read<N> waits until
// at most N of the thread's groups still read shared memory, bulk_wait<N> until at most N are unfinished.
// Shared-memory writes by threads become visible to the copy engine after fence_proxy_async_shared.
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- thread-block clusters -------------------------------------------------------------------------

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Every non-exited thread of every CTA of the cluster arrives, then waits for the others: what each
// did before (barrier initialisation, remote arrivals) is visible to all after.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// One arrival on the mbarrier at this CTA's shared address `bar`, in the shared memory of the CTA of
// rank `rank` of the cluster (mapa gives its address in the cluster's shared window). The arrive keeps
// its default CTA-scope release: what it orders are this warp's reads of a stage that wgmma (the async
// proxy) has finished, waited for before the arrive. A cluster-scope release would make ptxas put a
// MEMBAR before every arrival; ncu showed consumer warps stalled on it most of the time, halving
// wgmma's throughput in clusters of two.
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned bar, unsigned rank) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(bar), "r"(rank)
        : "memory");
}

// Named barrier `id` (1 .. 15; 0 is __syncthreads) over `threads` threads (a multiple of 32): sync waits
// for all of them, arrive counts this warp in and goes on. Lets some warpgroups take turns without
// stopping the others.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- setmaxnreg (sm_90a): registers handed between the warpgroups of a block ----------------------

template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// ---- wgmma (sm_90a) --------------------------------------------------------------------------------

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format" of wgmma), 64 bits:
//   bits  0-13  start address >> 4
//   bits 16-29  leading dimension byte offset >> 4 (LBO)
//   bits 32-45  stride dimension byte offset >> 4 (SBO)
//   bits 49-51  base offset (0: every swizzle pattern starts at a 1024-byte aligned address)
//   bits 62-63  swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
// Meaning of LBO and SBO with the 128-byte swizzle, in the canonical layouts of 16-byte units:
//   K-major operand (rows of the operand along M or N, K contiguous; 8 rows of 128 bytes form one
//     1024-byte swizzle atom): SBO = byte distance between consecutive 8-row groups; LBO unused (1).
//   MN-major operand (K rows, M or N contiguous; 64 16-bit elements of M or N per 128-byte row):
//     LBO = byte distance between consecutive 64-element column blocks along M or N,
//     SBO = byte distance between consecutive 8-row groups along K.
__host__ __device__ constexpr unsigned long long matrix_descriptor(unsigned smem_address, unsigned lbo_bytes,
                                                                   unsigned sbo_bytes) {
    return static_cast<unsigned long long>((smem_address & 0x3FFFF) >> 4) |
           static_cast<unsigned long long>((lbo_bytes & 0x3FFFF) >> 4) << 16 |
           static_cast<unsigned long long>((sbo_bytes & 0x3FFFF) >> 4) << 32 |
           1ull << 62;  // 128-byte swizzle
}

static_assert(matrix_descriptor(0x400, 16, 1024) == 0x4000004000010040ull, "descriptor field positions");
static_assert(matrix_descriptor(0x12380, 8192, 1024) == 0x4000004002001238ull, "descriptor field positions");

// matrix_descriptor(address + bytes, ...) from matrix_descriptor(address, ...) by one add: the start
// address field is the low field, address >> 4, and a shared-memory address stays below 2^18 (228 KiB of
// shared memory an SM), so adding bytes >> 4 (bytes a multiple of 16) never carries out of it. Computed
// once for a buffer's first byte, a wgmma's descriptor is then that plus a constant, instead of the
// mask, shift and or of matrix_descriptor again for each wgmma.
__host__ __device__ constexpr unsigned long long descriptor_plus(unsigned long long descriptor, unsigned bytes) {
    // A 32-bit add to the low word, which cannot carry into the high one: one instruction, not two.
    return (descriptor & 0xFFFFFFFF00000000ull) | (static_cast<unsigned>(descriptor) + (bytes >> 4));
}

static_assert(descriptor_plus(matrix_descriptor(0x400, 16, 1024), 0x11f80) == matrix_descriptor(0x12380, 16, 1024),
              "descriptor_plus moves the start address");

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Wait until at most N of this warpgroup's committed wgmma groups are still pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Tell the compiler an accumulator register may have changed here (after a wgmma_wait), so that no
// read of it is moved above the wait while the tensor cores may still be writing it.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Operand lists of the accumulators (the {d} vector of wgmma), 8 at a time.
#define KBENCH_D8(i)                                                                                              \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])

// m64nNk16: %0 .. %(N/2 - 1) accumulators; then the descriptor of A, of B, and scale-d.
#define KBENCH_WGMMA_N64_D                                                        \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KBENCH_WGMMA_N128_D                                                       \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KBENCH_WGMMA_N256_D                                                                          \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "               \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "               \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "               \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "               \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "               \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "   \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define KBENCH_WGMMA_N176_D \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87"
#define KBENCH_WGMMA_N192_D \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"

// The text of one wgmma with both operands in shared memory: D (+)= A B for one warpgroup, A 64 x 16
// (K-major), B 16 x N, D 64 x N fp32 in registers; scale-d = 0 ignores the old D. The trailing
// immediates are imm-scale-a = 1, imm-scale-b = 1, imm-trans-a = 0 and imm-trans-b = TRANS_B: 1 for B
// stored MN-major (N contiguous, as a row-major K x N matrix), 0 for B stored K-major (K contiguous:
// the rows of a row-major N x K matrix, as K is in attention's S = Q Kᵀ).
#define KBENCH_WGMMA_TEXT_(N, TYPE, DESC_A, DESC_B, SCALE, TRANS_B)                                        \
    "{\n"                                                                                                 \
    ".reg .pred p;\n"                                                                                     \
    "setp.ne.b32 p, %" #SCALE ", 0;\n"                                                                    \
    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" KBENCH_WGMMA_N##N##_D "}, %" #DESC_A \
    ", %" #DESC_B ", p, 1, 1, 0, " #TRANS_B ";\n"                                                         \
    "}\n"

// The text of one wgmma with A from registers: A 64 x 16 as four 32-bit registers a0..a3 of each
// thread (two 16-bit elements each, in the layout of wgmma's accumulator fragment: see WgmmaRS),
// B 16 x N MN-major in shared memory (imm-trans-b = 1). There is no imm-trans-a: a register A is
// always K-major.
#define KBENCH_WGMMA_RS_TEXT_(N, TYPE, A0, A1, A2, A3, DESC_B, SCALE)                                         \
    "{\n"                                                                                                    \
    ".reg .pred p;\n"                                                                                        \
    "setp.ne.b32 p, %" #SCALE ", 0;\n"                                                                       \
    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" KBENCH_WGMMA_N##N##_D "}, {%" #A0 \
    ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #DESC_B ", p, 1, 1, 1;\n"                                           \
    "}\n"

// Through one more expansion, so that operand numbers given as macros (N_OPS_64 below) are replaced
// by their values before the texts above turn them into strings.
#define KBENCH_WGMMA_TEXT(...) KBENCH_WGMMA_TEXT_(__VA_ARGS__)
#define KBENCH_WGMMA_RS_TEXT(...) KBENCH_WGMMA_RS_TEXT_(__VA_ARGS__)

// Output-only accumulators, for a wgmma that ignores the old D (scale-d = 0): the registers are then
// not inputs of the instruction, so instructions that write them earlier (the last use of the previous
// tile's values) do not count as writing a wgmma's operands while other wgmma are in flight, which
// would make ptxas serialise the wgmma (its warning C7513).
#define KBENCH_D8_OUT(i)                                                                                          \
    "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), "=f"(d[i + 4]), "=f"(d[i + 5]), "=f"(d[i + 6]), \
        "=f"(d[i + 7])
#define KBENCH_D64_OUT KBENCH_D8_OUT(0), KBENCH_D8_OUT(8), KBENCH_D8_OUT(16), KBENCH_D8_OUT(24)
#define KBENCH_D128_OUT KBENCH_D64_OUT, KBENCH_D8_OUT(32), KBENCH_D8_OUT(40), KBENCH_D8_OUT(48), KBENCH_D8_OUT(56)
#define KBENCH_D176_OUT KBENCH_D128_OUT, KBENCH_D8_OUT(64), KBENCH_D8_OUT(72), KBENCH_D8_OUT(80)
#define KBENCH_D192_OUT KBENCH_D176_OUT, KBENCH_D8_OUT(88)
#define KBENCH_D256_OUT                                                                                     \
    KBENCH_D128_OUT, KBENCH_D8_OUT(64), KBENCH_D8_OUT(72), KBENCH_D8_OUT(80), KBENCH_D8_OUT(88),             \
        KBENCH_D8_OUT(96), KBENCH_D8_OUT(104), KBENCH_D8_OUT(112), KBENCH_D8_OUT(120)

#define KBENCH_D64 KBENCH_D8(0), KBENCH_D8(8), KBENCH_D8(16), KBENCH_D8(24)
#define KBENCH_D128 KBENCH_D64, KBENCH_D8(32), KBENCH_D8(40), KBENCH_D8(48), KBENCH_D8(56)
#define KBENCH_D176 KBENCH_D128, KBENCH_D8(64), KBENCH_D8(72), KBENCH_D8(80)
#define KBENCH_D192 KBENCH_D176, KBENCH_D8(88)
#define KBENCH_D256                                                                                        \
    KBENCH_D128, KBENCH_D8(64), KBENCH_D8(72), KBENCH_D8(80), KBENCH_D8(88), KBENCH_D8(96), KBENCH_D8(104), \
        KBENCH_D8(112), KBENCH_D8(120)

// Wgmma<N, BF16, TRANS_B>::mma(d, desc_a, desc_b, scale_d): one m64nNk16 wgmma.mma_async of 16-bit
// inputs (fp16, or bf16 when BF16) with fp32 accumulators d[N / 2], A and B from shared memory.
// TRANS_B: B stored MN-major (true) or K-major (false); see KBENCH_WGMMA_TEXT.
template <int N, bool BF16, bool TRANS_B = true>
struct Wgmma;

// WgmmaRS<N, BF16>::mma(d, a, desc_b, scale_d): the same with A from registers a[4]. Thread t of the
// warpgroup (warp w = t / 32, lane l) holds A(16w + l/4 [+ 8], 2(l%4) [+ 8] + {0, 1}):
//   a[0] = row 16w + l/4, columns 2(l%4), +1       a[1] = row 16w + l/4 + 8, the same columns
//   a[2] = row 16w + l/4, columns 8 + 2(l%4), +1   a[3] = row 16w + l/4 + 8, the same columns
// which is the accumulator layout of a 64 x 16 slice of D (d[8j .. 8j + 7] packed in pairs): a
// product's fp32 result, rounded to 16 bits, is the A operand of the next wgmma without any shuffle.
template <int N, bool BF16>
struct WgmmaRS;

// One partial specialisation per N, for both input types and both majors of B.
#define KBENCH_WGMMA_SPECIALISE(N)                                                                               \
    template <bool BF16, bool TRANS_B>                                                                           \
    struct Wgmma<N, BF16, TRANS_B> {                                                                             \
        __device__ __forceinline__ static void mma(float (&d)[N / 2], unsigned long long desc_a,                  \
                                                   unsigned long long desc_b, int scale_d) {                     \
            if (BF16 && TRANS_B)                                                                                 \
                asm volatile(KBENCH_WGMMA_TEXT(N, "bf16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, 1)                   \
                             : KBENCH_D##N : "l"(desc_a), "l"(desc_b), "r"(scale_d));                            \
            else if (BF16)                                                                                       \
                asm volatile(KBENCH_WGMMA_TEXT(N, "bf16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, 0)                   \
                             : KBENCH_D##N : "l"(desc_a), "l"(desc_b), "r"(scale_d));                            \
            else if (TRANS_B)                                                                                    \
                asm volatile(KBENCH_WGMMA_TEXT(N, "f16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, 1)                    \
                             : KBENCH_D##N : "l"(desc_a), "l"(desc_b), "r"(scale_d));                            \
            else                                                                                                 \
                asm volatile(KBENCH_WGMMA_TEXT(N, "f16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, 0)                    \
                             : KBENCH_D##N : "l"(desc_a), "l"(desc_b), "r"(scale_d));                            \
        }                                                                                                        \
        /* D = A B, the old D ignored (scale-d = 0) and not read: see KBENCH_D8_OUT */                          \
        __device__ __forceinline__ static void mma_fresh(float (&d)[N / 2], unsigned long long desc_a,            \
                                                         unsigned long long desc_b) {                            \
            if (BF16 && TRANS_B)                                                                                 \
                asm volatile(KBENCH_WGMMA_TEXT(N, "bf16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, 1)                   \
                             : KBENCH_D##N##_OUT : "l"(desc_a), "l"(desc_b), "n"(0));                            \
            else if (BF16)                                                                                       \
                asm volatile(KBENCH_WGMMA_TEXT(N, "bf16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, 0)                   \
                             : KBENCH_D##N##_OUT : "l"(desc_a), "l"(desc_b), "n"(0));                            \
            else if (TRANS_B)                                                                                    \
                asm volatile(KBENCH_WGMMA_TEXT(N, "f16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, 1)                    \
                             : KBENCH_D##N##_OUT : "l"(desc_a), "l"(desc_b), "n"(0));                            \
            else                                                                                                 \
                asm volatile(KBENCH_WGMMA_TEXT(N, "f16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, 0)                    \
                             : KBENCH_D##N##_OUT : "l"(desc_a), "l"(desc_b), "n"(0));                            \
        }                                                                                                        \
    };                                                                                                           \
    template <bool BF16>                                                                                         \
    struct WgmmaRS<N, BF16> {                                                                                    \
        __device__ __forceinline__ static void mma(float (&d)[N / 2], const unsigned (&a)[4],                     \
                                                   unsigned long long desc_b, int scale_d) {                     \
            if (BF16)                                                                                            \
                asm volatile(KBENCH_WGMMA_RS_TEXT(N, "bf16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, N_OPS3_##N,       \
                                                  N_OPS4_##N, N_OPS5_##N)                                        \
                             : KBENCH_D##N : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b),             \
                               "r"(scale_d));                                                                    \
            else                                                                                                 \
                asm volatile(KBENCH_WGMMA_RS_TEXT(N, "f16", N_OPS_##N, N_OPS1_##N, N_OPS2_##N, N_OPS3_##N,        \
                                                  N_OPS4_##N, N_OPS5_##N)                                        \
                             : KBENCH_D##N : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b),             \
                               "r"(scale_d));                                                                    \
        }                                                                                                        \
    };

// The operand numbers that follow N / 2 accumulators (%0 .. %(N/2 - 1)): N_OPS_N is N / 2, N_OPSk_N is
// N / 2 + k. The preprocessor cannot add, so they are spelled out.
#define N_OPS_64 32
#define N_OPS1_64 33
#define N_OPS2_64 34
#define N_OPS3_64 35
#define N_OPS4_64 36
#define N_OPS5_64 37
#define N_OPS_128 64
#define N_OPS1_128 65
#define N_OPS2_128 66
#define N_OPS3_128 67
#define N_OPS4_128 68
#define N_OPS5_128 69
#define N_OPS_176 88
#define N_OPS1_176 89
#define N_OPS2_176 90
#define N_OPS3_176 91
#define N_OPS4_176 92
#define N_OPS5_176 93
#define N_OPS_192 96
#define N_OPS1_192 97
#define N_OPS2_192 98
#define N_OPS3_192 99
#define N_OPS4_192 100
#define N_OPS5_192 101
#define N_OPS_256 128
#define N_OPS1_256 129
#define N_OPS2_256 130
#define N_OPS3_256 131
#define N_OPS4_256 132
#define N_OPS5_256 133

KBENCH_WGMMA_SPECIALISE(64)
KBENCH_WGMMA_SPECIALISE(128)
KBENCH_WGMMA_SPECIALISE(176)
KBENCH_WGMMA_SPECIALISE(192)
KBENCH_WGMMA_SPECIALISE(256)

}  // namespace kbench_sm90
