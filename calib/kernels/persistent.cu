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
