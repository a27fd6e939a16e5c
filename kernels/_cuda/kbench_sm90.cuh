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

// Phases alternate parity 0, 1, 0, ... starting with phase 0 in progress. try_wait.parity P succeeds
// once the phase of parity P has completed: right after init, waiting on parity 1 passes at once (the
// "previous" phase counts as complete) and waiting on parity 0 blocks until the first phase ends.
__device__ __forceinline__ bool mbarrier_try_wait(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
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

// The text of one wgmma: D (+)= A B for one warpgroup, A 64 x 16 (K-major, from shared memory), B 16 x N
// (MN-major, from shared memory: imm-trans-b = 1), D 64 x N fp32 in registers; scale-d = 0 ignores the
// old D. The trailing immediates are imm-scale-a = 1, imm-scale-b = 1, imm-trans-a = 0, imm-trans-b = 1.
#define KBENCH_WGMMA_TEXT(N, TYPE, DESC_A, DESC_B, SCALE)                                                  \
    "{\n"                                                                                                 \
    ".reg .pred p;\n"                                                                                     \
    "setp.ne.b32 p, %" #SCALE ", 0;\n"                                                                    \
    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" KBENCH_WGMMA_N##N##_D "}, %" #DESC_A \
    ", %" #DESC_B ", p, 1, 1, 0, 1;\n"                                                                    \
    "}\n"

// Wgmma<N, BF16>::mma(d, desc_a, desc_b, scale_d): one m64nNk16 wgmma.mma_async of 16-bit inputs
// (fp16, or bf16 when BF16) with fp32 accumulators d[N / 2].
template <int N, bool BF16>
struct Wgmma;

template <bool BF16>
struct Wgmma<64, BF16> {
    __device__ __forceinline__ static void mma(float (&d)[32], unsigned long long desc_a, unsigned long long desc_b,
                                               int scale_d) {
        if (BF16)
            asm volatile(KBENCH_WGMMA_TEXT(64, "bf16", 32, 33, 34)
                         : KBENCH_D8(0), KBENCH_D8(8), KBENCH_D8(16), KBENCH_D8(24)
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));
        else
            asm volatile(KBENCH_WGMMA_TEXT(64, "f16", 32, 33, 34)
                         : KBENCH_D8(0), KBENCH_D8(8), KBENCH_D8(16), KBENCH_D8(24)
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    }
};

template <bool BF16>
struct Wgmma<128, BF16> {
    __device__ __forceinline__ static void mma(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b,
                                               int scale_d) {
        if (BF16)
            asm volatile(KBENCH_WGMMA_TEXT(128, "bf16", 64, 65, 66)
                         : KBENCH_D8(0), KBENCH_D8(8), KBENCH_D8(16), KBENCH_D8(24), KBENCH_D8(32), KBENCH_D8(40),
                           KBENCH_D8(48), KBENCH_D8(56)
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));
        else
            asm volatile(KBENCH_WGMMA_TEXT(128, "f16", 64, 65, 66)
                         : KBENCH_D8(0), KBENCH_D8(8), KBENCH_D8(16), KBENCH_D8(24), KBENCH_D8(32), KBENCH_D8(40),
                           KBENCH_D8(48), KBENCH_D8(56)
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    }
};

template <bool BF16>
struct Wgmma<256, BF16> {
    __device__ __forceinline__ static void mma(float (&d)[128], unsigned long long desc_a, unsigned long long desc_b,
                                               int scale_d) {
        if (BF16)
            asm volatile(KBENCH_WGMMA_TEXT(256, "bf16", 128, 129, 130)
                         : KBENCH_D8(0), KBENCH_D8(8), KBENCH_D8(16), KBENCH_D8(24), KBENCH_D8(32), KBENCH_D8(40),
                           KBENCH_D8(48), KBENCH_D8(56), KBENCH_D8(64), KBENCH_D8(72), KBENCH_D8(80), KBENCH_D8(88),
                           KBENCH_D8(96), KBENCH_D8(104), KBENCH_D8(112), KBENCH_D8(120)
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));
        else
            asm volatile(KBENCH_WGMMA_TEXT(256, "f16", 128, 129, 130)
                         : KBENCH_D8(0), KBENCH_D8(8), KBENCH_D8(16), KBENCH_D8(24), KBENCH_D8(32), KBENCH_D8(40),
                           KBENCH_D8(48), KBENCH_D8(56), KBENCH_D8(64), KBENCH_D8(72), KBENCH_D8(80), KBENCH_D8(88),
                           KBENCH_D8(96), KBENCH_D8(104), KBENCH_D8(112), KBENCH_D8(120)
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    }
};

}  // namespace kbench_sm90
