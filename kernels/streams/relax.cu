// The streams suite's kernel: y <- a*y + b, `work` times per element, one fp32 FMA each.
//
// a = 1 - 2^-k and b = 2^-k (kbench/pipeline.py: relax_constants), so the answer is
// 1 + (x - 1) a^work, with a^work between 0.5 and 0.78 for any work: it always depends on x.
// `work` is a run-time argument, so the compiler cannot fold the loop: the arithmetic per byte
// copied is exactly 2 * work FLOP per 4 bytes in. work = 0 makes it a copy kernel.
//
// One element per thread in a grid-stride loop; the chain of FMAs is dependent, so throughput
// comes from the many resident warps (each SM scheduler needs about 4 ready warps to hide the
// FMA latency). 64-bit indices: a chunk may hold more than 2^31 elements.
//
// No headers: NVRTC (cupy.RawModule) and nvcc compile it alike.

template <int UNROLL>
__global__ void __launch_bounds__(256)
streams_relax(const float* __restrict__ x, float* __restrict__ y, long long n, int work, float a, float b) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        int k = 0;
        for (; k + UNROLL <= work; k += UNROLL) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) v = fmaf(v, a, b);
        }
        for (; k < work; ++k) v = fmaf(v, a, b);
        y[i] = v;
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configuration kbench launches.
template __global__ void streams_relax<8>(const float*, float*, long long, int, float, float);
#endif
