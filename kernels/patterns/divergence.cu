// The divergence lesson (the classic badKernel / goodKernel), computing the same thing.
//
// out[i] = A(x[i]) for even i, B(x[i]) for odd i, where A is `rounds` steps of y = y (1 - 2^-10) + 2^-10
// (one FMA) and B is `rounds` steps of y = y - y^2 2^-10 (a multiply and an FMA): two different paths,
// long enough that the kernel is bound by the instructions it issues, not by memory.
//
//   divergence<false>  thread i takes element i and branches on its parity: every warp holds both
//                      even and odd lanes, so it runs path A with half its lanes masked, then path B.
//   divergence<true>   each pair of warps shares 64 consecutive elements: the first warp takes the
//                      even ones, the second the odd ones (element 64 g + 2 lane + warp parity), and
//                      branches on the warp's parity: no warp is ever split. This is the classic
//                      goodKernel with its data rearranged so that it still computes the same output
//                      (the lesson's answer: put the threads that take one path in one warp).
//
// Blocks must be a multiple of 64 threads (kbench launches 256). Bounds-checked for any count.

template <bool WARP_BRANCH>
__global__ void __launch_bounds__(256)
divergence(const float* __restrict__ x, float* __restrict__ out, long long count, int rounds) {
    const long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    long long i;
    bool path_a;
    if constexpr (WARP_BRANCH) {
        const int lane = threadIdx.x & 31;
        const int warp_parity = (threadIdx.x >> 5) & 1;
        i = (t & ~63LL) + 2 * lane + warp_parity;
        path_a = warp_parity == 0;  // the same for all 32 lanes
    } else {
        i = t;
        path_a = (t & 1) == 0;  // lane parity: splits every warp
    }
    if (i >= count) return;
    float y = x[i];
    if (path_a) {
#pragma unroll 8
        for (int r = 0; r < rounds; ++r) y = fmaf(y, 0.9990234375f, 0.0009765625f);
    } else {
#pragma unroll 8
        for (int r = 0; r < rounds; ++r) y = fmaf(y * y, -0.0009765625f, y);
    }
    out[i] = y;
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the configurations kbench launches.
template __global__ void divergence<false>(const float*, float*, long long, int);
template __global__ void divergence<true>(const float*, float*, long long, int);
#endif
