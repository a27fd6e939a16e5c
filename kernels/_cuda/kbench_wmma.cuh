// The element type nvcuda::wmma fragments take for fp16 (false) or bf16 (true).
#pragma once
#include <mma.h>

namespace kbench_wmma {

template <bool BF16>
struct Element;
template <>
struct Element<false> {
    using T = __half;
};
template <>
struct Element<true> {
    using T = __nv_bfloat16;
};

template <class Use>
struct IsA {
    static constexpr bool value = false;
};
template <>
struct IsA<nvcuda::wmma::matrix_a> {
    static constexpr bool value = true;
};

// A row-major 16x16x16 A or B fragment of 16-bit elements loaded from shared memory (`ld`: the row
// pitch in elements). PTX: by the wmma.load instruction with the .shared state space, which ptxas
// turns into ldmatrix (LDSM) for fp16 and bf16 alike; otherwise by the C++ API's load_matrix_sync,
// which does the same for fp16 but, for bf16 under nvcc 13.0, leaves the address generic and compiles
// to generic loads (LD.E), 8 a fragment where LDSM needs 2. The fragments are the API's either way
// (wmma.load is the instruction load_matrix_sync stands for), so mma_sync takes them as they are.
template <bool PTX, bool BF16, class Use>
__device__ __forceinline__ void load_shared(nvcuda::wmma::fragment<Use, 16, 16, 16, typename Element<BF16>::T,
                                                                   nvcuda::wmma::row_major>& f,
                                            const unsigned short* p, unsigned ld) {
    if constexpr (PTX) {
        unsigned* r = reinterpret_cast<unsigned*>(&f.x[0]);
        const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(p));
        if constexpr (IsA<Use>::value) {
            if constexpr (BF16)
                asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0,%1,%2,%3}, [%4], %5;\n"
                             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at), "r"(ld));
            else
                asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8], %9;\n"
                             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
                               "=r"(r[7]) : "r"(at), "r"(ld));
        } else {
            if constexpr (BF16)
                asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0,%1,%2,%3}, [%4], %5;\n"
                             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at), "r"(ld));
            else
                asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8], %9;\n"
                             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
                               "=r"(r[7]) : "r"(at), "r"(ld));
        }
    } else {
        nvcuda::wmma::load_matrix_sync(f, reinterpret_cast<const typename Element<BF16>::T*>(p), ld);
    }
}

}  // namespace kbench_wmma
