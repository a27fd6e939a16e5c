// Sum of a vector: the classic warp-shuffle block reduction, at memory speed.
//
// Each thread sums a grid-stride share of x with 16-byte vector loads (VEC elements a
// load, UNROLL loads in flight before the first add, so enough bytes are in flight per
// SM to cover HBM latency). Then the block reduces: each warp with __shfl_down_sync,
// one partial per warp in shared memory, the first warp reduces those, and thread 0
// adds the block's sum into *out with one atomicAdd. *out is zeroed by the host before
// the launch (the closure's memset).
//
// T is the element type (float, __half, int), Acc the accumulator (float for float and
// __half, int for int). VECTOR = false takes one element a load, for an x that is not
// 16-byte aligned. Elements past the last whole vector (n % VEC) are summed by the
// threads of the grid in a short grid-stride loop of their own.

#include <cuda_fp16.h>

namespace kbench_reduction {

template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ int to_acc(int v) { return v; }

// The sum of the VEC elements in one 16-byte vector.
__device__ __forceinline__ float vector_sum(const float4 v, float) { return (v.x + v.y) + (v.z + v.w); }
__device__ __forceinline__ int vector_sum(const int4 v, int) { return (v.x + v.y) + (v.z + v.w); }
__device__ __forceinline__ float vector_sum(const uint4 v, __half) {
    const __half2* h = reinterpret_cast<const __half2*>(&v);
    float2 a = __half22float2(h[0]), b = __half22float2(h[1]), c = __half22float2(h[2]), d = __half22float2(h[3]);
    return ((a.x + a.y) + (b.x + b.y)) + ((c.x + c.y) + (d.x + d.y));
}

template <typename T> struct Vector;
template <> struct Vector<float> { using type = float4; };
template <> struct Vector<int> { using type = int4; };
template <> struct Vector<__half> { using type = uint4; };

}  // namespace kbench_reduction

template <typename T, typename Acc, bool VECTOR, int UNROLL>
__global__ void __launch_bounds__(256) reduce_sum(const T* __restrict__ x, long long n, Acc* __restrict__ out) {
    using namespace kbench_reduction;
    using V = typename Vector<T>::type;
    constexpr int VEC = VECTOR ? sizeof(V) / sizeof(T) : 1;

    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    const long long tid = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    Acc acc = 0;
    const long long whole = n / VEC;  // whole vectors (or elements)
    if (VECTOR) {
        const V* xv = reinterpret_cast<const V*>(x);
        long long i = tid;
        // UNROLL independent loads before the adds that need them.
        for (; i + (UNROLL - 1) * stride < whole; i += UNROLL * stride) {
            V v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(xv + i + u * stride);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) acc += vector_sum(v[u], T());
        }
        for (; i < whole; i += stride) acc += vector_sum(__ldg(xv + i), T());
        for (long long j = whole * VEC + tid; j < n; j += stride) acc += to_acc(x[j]);  // the n % VEC tail
    } else {
        for (long long i = tid; i < n; i += stride) acc += to_acc(x[i]);
    }

    __shared__ Acc partial[32];  // one per warp (at most 32 warps a block)
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    acc = warp_sum(acc);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < (blockDim.x + 31) / 32 ? partial[lane] : Acc(0);
        acc = warp_sum(acc);
        if (lane == 0) atomicAdd(out, acc);
    }
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the instances kbench launches.
template __global__ void reduce_sum<float, float, true, 4>(const float*, long long, float*);
template __global__ void reduce_sum<float, float, false, 4>(const float*, long long, float*);
template __global__ void reduce_sum<__half, float, true, 4>(const __half*, long long, float*);
template __global__ void reduce_sum<__half, float, false, 4>(const __half*, long long, float*);
template __global__ void reduce_sum<int, int, true, 4>(const int*, long long, int*);
template __global__ void reduce_sum<int, int, false, 4>(const int*, long long, int*);
#endif
