// A persistent softmax: each thread keeps N elements of its block's row in registers across two
// block-wide reductions (max, then sum), as a persistent normalization kernel does. Compiled for
// many N to read how the register count grows with the buffer and where it starts to spill.

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <bool MAX>
__device__ float block_reduce(float v) {
    __shared__ float part[32];
    v = MAX ? warp_max(v) : warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    const int warps = (blockDim.x + 31) >> 5;
    v = threadIdx.x < warps ? part[threadIdx.x] : (MAX ? -3.0e38f : 0.0f);
    if (threadIdx.x < 32) v = MAX ? warp_max(v) : warp_sum(v);
    if (threadIdx.x == 0) part[0] = v;
    __syncthreads();
    v = part[0];
    __syncthreads();
    return v;
}

template <int N>
__global__ void persistent_softmax(const float* __restrict__ in, float* __restrict__ out) {
    const unsigned long long base = (unsigned long long)blockIdx.x * N * blockDim.x + threadIdx.x;
    float v[N];
    float m = -3.0e38f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        v[i] = in[base + (unsigned long long)i * blockDim.x];
        m = fmaxf(m, v[i]);
    }
    m = block_reduce<true>(m);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        v[i] = __expf(v[i] - m);
        s += v[i];
    }
    const float inv = 1.0f / block_reduce<false>(s);
#pragma unroll
    for (int i = 0; i < N; ++i) out[base + (unsigned long long)i * blockDim.x] = v[i] * inv;
}

// The same persistent softmax over rows of E*blockDim.x floats, loading and storing VEC floats at
// a time (4, 8 or 16 bytes per access): the access width a normalization scheduler chooses. It is
// not the registers calibration's kernel too: with large E this one spills where persistent_softmax
// keeps its buffer in registers (nvcc 13.0, sm_90: E=200 spills 1.8 KB here, none there), so the
// two stay separate.
template <int VEC> struct vec_of;
template <> struct vec_of<1> { typedef float t; };
template <> struct vec_of<2> { typedef float2 t; };
template <> struct vec_of<4> { typedef float4 t; };

template <int E, int VEC>
__global__ void softmax_rows(const float* __restrict__ in, float* __restrict__ out) {
    typedef typename vec_of<VEC>::t V;
    const unsigned long long row = (unsigned long long)blockIdx.x * E * blockDim.x;
    const V* src = reinterpret_cast<const V*>(in + row);
    V* dst = reinterpret_cast<V*>(out + row);
    float v[E];
    float m = -3.0e38f;
#pragma unroll
    for (int i = 0; i < E / VEC; ++i) {
        const V x = src[i * blockDim.x + threadIdx.x];
        const float* f = reinterpret_cast<const float*>(&x);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            v[i * VEC + j] = f[j];
            m = fmaxf(m, f[j]);
        }
    }
    m = block_reduce<true>(m);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
        v[i] = __expf(v[i] - m);
        s += v[i];
    }
    const float inv = 1.0f / block_reduce<false>(s);
#pragma unroll
    for (int i = 0; i < E / VEC; ++i) {
        V x;
        float* f = reinterpret_cast<float*>(&x);
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = v[i * VEC + j] * inv;
        dst[i * blockDim.x + threadIdx.x] = x;
    }
}
