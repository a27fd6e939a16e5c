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

}  // namespace kbench_wmma
