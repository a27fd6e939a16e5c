// The constant-memory lesson (the classic convKernel): out[i] = sum_j x[i + j] w[j], j < 256,
// with the 256 weights in __constant__ memory or in global memory; otherwise the same kernel.
//
// At every step j all 32 lanes of a warp read the same weight w[j]. From __constant__ memory that one
// address is broadcast to the warp by the constant cache: no load instruction a thread (nvcc 13 for
// sm_90 reads each pair of weights once a warp, ULDC.64 into uniform registers, and the FFMAs take
// them from there). From global memory each thread issues a load of w[j] (one address for the warp,
// served once from L1): a load instruction per weight per thread.
//
// The loops are unrolled in full, so every weight's offset is a constant of the instruction. Unrolled
// 16 at a time, j is a register and so is the constant address: the weights are then read through the
// indexed path, which on the H200 misses the immediate-constant cache so often (56 % hits, imc_miss the
// top stall) that the __constant__ version ran at 0.54x the global one instead of 1.6x.
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
#pragma unroll
    for (int j = 0; j < TAPS; ++j) acc = fmaf(x[i + j], conv_weights[j], acc);
    out[i] = acc;
}

__global__ void __launch_bounds__(256)
conv_global(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, long long count) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < TAPS; ++j) acc = fmaf(x[i + j], w[j], acc);
    out[i] = acc;
}
