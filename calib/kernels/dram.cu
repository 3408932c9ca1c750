// DRAM streaming kernels for calib's memory_bandwidth calibration.
//
// T is the per-thread access: unsigned char/short/int, uint2 or uint4 (1 to 16 bytes). UNROLL
// independent accesses are issued before any is used, so that enough bytes are in flight to cover
// DRAM latency. Every kernel walks the buffer with the same grid-stride loop, so the copy kernel's
// correctness check (every element written, equal to the source) vouches for the read kernel's
// coverage too.

__device__ __forceinline__ unsigned fold(unsigned char v) { return v; }
__device__ __forceinline__ unsigned fold(unsigned short v) { return v; }
__device__ __forceinline__ unsigned fold(unsigned int v) { return v; }
__device__ __forceinline__ unsigned fold(uint2 v) { return v.x ^ v.y; }
__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

template <typename T> __device__ __forceinline__ T splat(unsigned s);
template <> __device__ __forceinline__ unsigned char splat<unsigned char>(unsigned s) { return (unsigned char)(s | 1u); }
template <> __device__ __forceinline__ unsigned short splat<unsigned short>(unsigned s) { return (unsigned short)(s | 1u); }
template <> __device__ __forceinline__ unsigned int splat<unsigned int>(unsigned s) { return s | 1u; }
template <> __device__ __forceinline__ uint2 splat<uint2>(unsigned s) { return make_uint2(s | 1u, s ^ 0x5bd1e995u); }
template <> __device__ __forceinline__ uint4 splat<uint4>(unsigned s) {
    return make_uint4(s | 1u, s ^ 0x5bd1e995u, s + 0x9e3779b9u, ~s);
}

template <typename T, int UNROLL>
__global__ void dram_read(const T* __restrict__ src, unsigned long long n, unsigned* __restrict__ sink) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
        T v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= fold(v[u]);
    }
    for (; i < n; i += stride) acc ^= fold(src[i]);
    // Practically never true, but the compiler cannot know: the loads stay.
    if (acc == 0x9e3779b9u) sink[blockIdx.x & 1023u] = acc;
}

template <typename T, int UNROLL>
__global__ void dram_write(T* __restrict__ dst, unsigned long long n, unsigned seed) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const T v = splat<T>(seed ^ (blockIdx.x * 2654435761u));
    for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = v;
    }
    for (; i < n; i += stride) dst[i] = v;
}

template <typename T, int UNROLL>
__global__ void dram_copy(const T* __restrict__ src, T* __restrict__ dst, unsigned long long n) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
        T v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = v[u];
    }
    for (; i < n; i += stride) dst[i] = src[i];
}
