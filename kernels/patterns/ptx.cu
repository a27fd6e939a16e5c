// The inline-PTX lesson (the classic fastSqrt and ldgInt): out[i] = sum_{r < terms} sqrt(x[i] + r),
// with the load and the square root written as plain C++ or as inline PTX.
//
//   CG      the load is `ld.global.cg.f32` (cache in L2, not L1) instead of a plain load. For data that
//           each thread reads once, as here, there is nothing in L1 to keep: the lesson's hint changes
//           little.
//   APPROX  the square root is `sqrt.approx.f32` (one MUFU instruction) instead of sqrtf, which without
//           --use_fast_math is the IEEE-rounded sqrt.rn.f32: a reciprocal-square-root MUFU plus a
//           Newton correction and a branch for special operands. With 32 square roots an element the
//           kernel is bound by these instructions, so this is where the time goes.
//
// Bounds-checked for any count. No headers: NVRTC (cupy.RawModule) and nvcc compile it alike.

template <bool CG, bool APPROX>
__global__ void __launch_bounds__(256)
sqrt_sum(const float* __restrict__ x, float* __restrict__ out, long long count, int terms) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float v;
    if constexpr (CG) {
        asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(x + i));
    } else {
        v = x[i];
    }
    float acc = 0.f;
    for (int r = 0; r < terms; ++r) {
        const float a = v + static_cast<float>(r);
        float s;
        if constexpr (APPROX) {
            asm("sqrt.approx.f32 %0, %1;" : "=f"(s) : "f"(a));
        } else {
            s = sqrtf(a);
        }
        acc += s;
    }
    out[i] = acc;
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
template __global__ void sqrt_sum<false, false>(const float*, float*, long long, int);
template __global__ void sqrt_sum<true, false>(const float*, float*, long long, int);
template __global__ void sqrt_sum<true, true>(const float*, float*, long long, int);
#endif
