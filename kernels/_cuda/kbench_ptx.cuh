// PTX wrappers shared by kbench's CUDA kernels: 16-bit packing, ldmatrix, cp.async, mma.sync m16n8k16,
// the softmax helpers of the attention kernels (2^x, -inf, a row's maximum, P packed for P V), and
// Flag, a bool as a type.
//
// No headers: NVRTC and nvcc compile it alike. CuPy kernels get it inlined by
// kernels/_cupy_common.py (so CuPy's compile cache sees its text); nvcc builds
// use -I kernels/_cuda.
#pragma once

namespace kbench_ptx {

// A bool as a type: a generic lambda called with Flag<false>() and Flag<true>() is instantiated for
// both values (a loop's body with and without its edge cases; no <type_traits> in NVRTC).
template <bool B>
struct Flag {
    static constexpr bool value = B;
};

// Two floats -> one register of two 16-bit values, `lo` in the low half (lower address).
template <bool BF16>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    if (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 writes 16 zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's commit groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// C += A B for one warp: m16n8k16, 16-bit A (four registers) and B (two), fp32 C (four).
template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x in one MUFU.EX2 (-inf gives +0): exp2f() adds range fix-ups around it (denormal results, which
// softmax flushes to zero anyway).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// The largest of `init` and row half r (0: row lane/4, 1: row lane/4 + 8) of the scores of one m16 tile
// (NT m16n8 accumulator fragments), over the quad of lanes that hold the row.
template <int NT>
__device__ __forceinline__ float row_max_of(const float (&s)[NT][4], int r, float init) {
    float mx = init;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
}

// P = exp2(s scale_log2 - shift) of row half r of one m16 tile, packed to 16-bit pairs as soon as it
// is computed (the packed pairs are exactly the A fragments of P V); returns this lane's part of the
// row's sum.
template <int NT, bool BF16>
__device__ __forceinline__ float exp2_row(const float (&s)[NT][4], int r, float scale_log2, float shift,
                                          unsigned (&p)[NT][2]) {
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const float p0 = fast_exp2(fmaf(s[nt][2 * r], scale_log2, -shift));
        const float p1 = fast_exp2(fmaf(s[nt][2 * r + 1], scale_log2, -shift));
        sum += p0 + p1;
        p[nt][r] = pack2<BF16>(p0, p1);
    }
    return sum;
}

}  // namespace kbench_ptx
