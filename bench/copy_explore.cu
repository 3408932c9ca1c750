// Exploration variants of a 16-byte DRAM copy (not used by calib itself): which shape reaches
// cudaMemcpyAsync's bandwidth. LOADHINT: 0 plain, 1 ld.global.nc with an L2 256-byte prefetch,
// 2 evict-first (.cs). PIPE: software pipelining, the next step's loads issued before this
// step's stores.
typedef unsigned long long u64;

template <int LOADHINT> __device__ __forceinline__ uint4 ld(const uint4* p) {
    uint4 v;
    if constexpr (LOADHINT == 1) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    } else if constexpr (LOADHINT == 2) {
        v = __ldcs(p);
    } else {
        v = *p;
    }
    return v;
}

template <int UNROLL, int LOADHINT, bool PIPE>
__global__ void copy_x(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 cur[UNROLL];
    if constexpr (PIPE) {
        if (i + (UNROLL - 1) * threads < n) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) cur[u] = ld<LOADHINT>(src + i + u * threads);
            while (true) {
                const u64 next = i + UNROLL * threads;
                const bool more = next + (UNROLL - 1) * threads < n;
                uint4 nxt[UNROLL];
                if (more) {
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u) nxt[u] = ld<LOADHINT>(src + next + u * threads);
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) dst[i + u * threads] = cur[u];
                i = next;
                if (!more) break;
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) cur[u] = nxt[u];
            }
        }
    } else {
        for (; i + (UNROLL - 1) * threads < n; i += UNROLL * threads) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) cur[u] = ld<LOADHINT>(src + i + u * threads);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) dst[i + u * threads] = cur[u];
        }
    }
    for (; i < n; i += threads) dst[i] = src[i];
}
