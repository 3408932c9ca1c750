// Kernels of the launch, split-K and FP32 FMA calibrations.

extern "C" __global__ void empty_kernel() {}

// W dependent FMAs in one warp: a kernel whose run time is linear in W, for the launch latency.
extern "C" __global__ void spin_kernel(float* __restrict__ sink, int iters) {
    float a = threadIdx.x * 1e-3f;
    for (int i = 0; i < iters; ++i) a = fmaf(a, 0.9999f, 1e-4f);
    if (a == 12345.678f) sink[0] = a;
}

// Sum S partial M*N tiles (stored one after another) into one: the split-K epilogue. Each thread
// owns 4 consecutive outputs (16-byte loads) and keeps four splits' loads in flight before it adds:
// a loop that adds each load before issuing the next keeps one load in flight per thread, and
// then measures DRAM latency rather than the reduction rate a tuned epilogue reaches.
extern "C" __global__ void splitk_reduce(const float4* __restrict__ partial, float4* __restrict__ out,
                                         unsigned long long mn4, int splits) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < mn4; i += stride) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        int s = 0;
        for (; s + 4 <= splits; s += 4) {
            float4 v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = __ldcs(partial + (unsigned long long)(s + j) * mn4 + i);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                acc.x += v[j].x; acc.y += v[j].y; acc.z += v[j].z; acc.w += v[j].w;
            }
        }
        for (; s < splits; ++s) {
            const float4 v = __ldcs(partial + (unsigned long long)s * mn4 + i);
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
        __stcs(out + i, acc);
    }
}

// ILP independent FMA chains per thread, iters steps each: 2*ILP*iters flops per thread. The step
// loop is unrolled 64 times: unrolled 4 times, its compare and branch cost about 9% of the issue
// slots (0.91 of the clock peak on an H200); 64 times with 16 chains reached 0.990 of it
// (bench/fma_shapes.py, 2026-12-01).
template <int ILP>
__global__ void fma_chains(float* __restrict__ sink, int iters, float a, float b) {
    float x[ILP];
#pragma unroll
    for (int i = 0; i < ILP; ++i) x[i] = threadIdx.x * 1e-6f + i;
#pragma unroll 64
    for (int k = 0; k < iters; ++k) {
#pragma unroll
        for (int i = 0; i < ILP; ++i) x[i] = fmaf(x[i], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < ILP; ++i) s += x[i];
    if (s == 12345.678f) sink[blockIdx.x] = s;
}

// The L2 working-set sweep: `total` 16-byte reads of an n-word buffer, `total / n` passes over it,
// through L2 only (ld.global.cg, so the L1s of the SMs do not serve the repeats). The passes are one
// flat grid-stride loop over total words, wrapped onto the buffer, rather than a loop over passes
// around a loop over the buffer: with small working sets each thread had fewer than four words per
// pass, the unrolled body never ran, and the points below ~20 MB measured the loop's tail.
extern "C" __global__ void l2_read(const uint4* __restrict__ src, unsigned n, unsigned total,
                                   unsigned* __restrict__ sink) {
    const unsigned stride = gridDim.x * blockDim.x;
    const unsigned step = stride % n;  // < n, so one conditional subtraction wraps an index
    unsigned k = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned i = k % n;
    unsigned acc = 0;
    for (; k + 3 * stride < total; k += 4 * stride) {
        unsigned j1 = i + step;  j1 -= (j1 >= n) ? n : 0;
        unsigned j2 = j1 + step; j2 -= (j2 >= n) ? n : 0;
        unsigned j3 = j2 + step; j3 -= (j3 >= n) ? n : 0;
        const uint4 a = __ldcg(src + i), b = __ldcg(src + j1), c = __ldcg(src + j2), d = __ldcg(src + j3);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
        i = j3 + step; i -= (i >= n) ? n : 0;
    }
    for (; k < total; k += stride) {
        const uint4 a = __ldcg(src + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
        i += step; i -= (i >= n) ? n : 0;
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x & 1023u] = acc;
}

// Shared-memory reads: 16-byte words, a warp's 32 reads in distinct banks, iters per thread.
extern "C" __global__ void smem_read(unsigned* __restrict__ sink, int iters) {
    __shared__ uint4 buf[1024];  // 16 KiB: eight 256-thread blocks fit on any current SM
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) buf[i] = make_uint4(i, i ^ 0x55u, i * 3u, ~i);
    __syncthreads();
    unsigned acc = 0;
    const int lane = threadIdx.x;
#pragma unroll 8
    for (int k = 0; k < iters; ++k) {
        const uint4 v = buf[(lane + k * 32) & 1023];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x & 1023u] = acc;
}

// Inner reduction: one 256-thread block per row of `cols` floats (cols a multiple of 1024).
extern "C" __global__ void reduce_inner(const float4* __restrict__ in, float* __restrict__ out, int cols) {
    __shared__ float part[8];
    const float4* row = in + (unsigned long long)blockIdx.x * (cols / 4);
    float acc = 0.0f;
    for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
        const float4 v = row[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += part[w];
        out[blockIdx.x] = s;
    }
}

// Outer reduction: thread c of block (x, y) sums column c over rows [y*slab, (y+1)*slab) and adds
// its partial sum to out[c]; out must be zeroed before.
extern "C" __global__ void reduce_outer(const float* __restrict__ in, float* __restrict__ out, int rows, int cols,
                                        int slab) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const int r0 = blockIdx.y * slab;
    const int r1 = min(rows, r0 + slab);
    float acc = 0.0f;
    for (int r = r0; r < r1; ++r) acc += in[(unsigned long long)r * cols + c];
    atomicAdd(out + c, acc);
}
