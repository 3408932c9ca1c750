// Direct 2-D convolution forward, NCHW input, KCRS filter (C per group), NKPQ output: one thread per
// output element, accumulating in float. Simple on purpose: the autotune cache's conv2d family
// needs one algorithm that uses no workspace and no library, and is easy to believe.
#include <cuda_fp16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half(v); }

template <typename T>
__global__ void conv2d_direct(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                              int N, int C, int H, int W, int K, int R, int S, int P, int Q,
                              int pad_h, int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, int groups) {
    long long total = (long long)N * K * P * Q;
    int Cg = C / groups, Kg = K / groups;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        int q = (int)(i % Q);
        int p = (int)((i / Q) % P);
        int k = (int)((i / ((long long)P * Q)) % K);
        int n = (int)(i / ((long long)K * P * Q));
        int g = k / Kg;
        float acc = 0.0f;
        for (int c = 0; c < Cg; ++c) {
            const T* xc = x + ((long long)n * C + (long long)g * Cg + c) * H * W;
            const T* wc = w + ((long long)k * Cg + c) * R * S;
            for (int r = 0; r < R; ++r) {
                int h = p * stride_h - pad_h + r * dil_h;
                if (h < 0 || h >= H) continue;
                for (int s = 0; s < S; ++s) {
                    int v = q * stride_w - pad_w + s * dil_w;
                    if (v < 0 || v >= W) continue;
                    acc += to_float(xc[(long long)h * W + v]) * to_float(wc[r * S + s]);
                }
            }
        }
        store(y + i, acc);
    }
}
