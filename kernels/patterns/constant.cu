// The constant-memory lesson (the classic convKernel): out[i] = sum_j x[i + j] w[j], j < 256,
// with the 256 weights in __constant__ memory or in global memory; otherwise the same kernel.
//
// At every step j all 32 lanes of a warp read the same weight w[j]. From __constant__ memory that one
// address is broadcast to the warp by the constant cache, and the compiler makes it an operand of the
// FMA itself (no load instruction). From global memory each thread issues a load of w[j] (one
// address for the warp, served once from L1): a load instruction per weight per thread.
//
// x holds count + 255 elements (the classic listing reads past its input's end: here the input is
// that long). kbench copies the weights into conv_weights before every launch, on the same stream,
// so the kernel always sees the current input. Bounds-checked for any count.

constexpr int TAPS = 256;

__constant__ float conv_weights[TAPS];

__global__ void __launch_bounds__(256)
conv_cmem(const float* __restrict__ x, float* __restrict__ out, long long count) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float acc = 0.f;
#pragma unroll 16
    for (int j = 0; j < TAPS; ++j) acc = fmaf(x[i + j], conv_weights[j], acc);
    out[i] = acc;
}

__global__ void __launch_bounds__(256)
conv_global(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, long long count) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float acc = 0.f;
#pragma unroll 16
    for (int j = 0; j < TAPS; ++j) acc = fmaf(x[i + j], w[j], acc);
    out[i] = acc;
}
