// Exploration variants of a 16-byte DRAM copy (not used by calib itself): which shape reaches
// cudaMemcpyAsync's bandwidth. LOADHINT: 0 plain, 1 ld.global.nc with an L2 256-byte prefetch,
// 2 evict-first (.cs). The software-pipelined shape that won is calib's own dram_copy_pipelined,
// timed by bench/copy_variants.py with the other shapes calib's tuner searches.
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

template <int UNROLL, int LOADHINT>
__global__ void copy_x(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 cur[UNROLL];
    for (; i + (UNROLL - 1) * threads < n; i += UNROLL * threads) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) cur[u] = ld<LOADHINT>(src + i + u * threads);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * threads] = cur[u];
    }
    for (; i < n; i += threads) dst[i] = src[i];
}

// Hopper bulk copies (the TMA engine without tensor maps): one thread per block streams chunks
// global -> shared -> global through STAGES shared-memory buffers, loads tracked by mbarriers,
// stores by bulk groups. Needs sm_90; every address and size a multiple of 16 bytes.
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

template <int STAGES, int CHUNK>
__global__ void copy_tma(const char* __restrict__ src, char* __restrict__ dst, u64 nbytes) {
    extern __shared__ __align__(128) char stage_buf[];
    __shared__ __align__(8) u64 bar[STAGES];
    const u64 nchunks = nbytes / CHUNK;
    // The tail past the last whole chunk, by every thread of the grid.
    for (u64 i = nchunks * CHUNK + (u64)blockIdx.x * blockDim.x + threadIdx.x; i < nbytes;
         i += (u64)gridDim.x * blockDim.x)
        dst[i] = src[i];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < STAGES; ++s)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    auto load = [&](int s, u64 c) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[s])), "r"(CHUNK)
                     : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem_addr(stage_buf + s * CHUNK)), "l"(src + c * CHUNK), "r"(CHUNK), "r"(smem_addr(&bar[s]))
                     : "memory");
    };
    for (int s = 0; s < STAGES; ++s) {
        const u64 c = blockIdx.x + (u64)s * gridDim.x;
        if (c < nchunks) load(s, c);
    }
    for (u64 it = 0;; ++it) {
        const u64 c = blockIdx.x + it * gridDim.x;
        if (c >= nchunks) break;
        const int s = (int)(it % STAGES);
        const unsigned parity = (unsigned)((it / STAGES) & 1);
        unsigned ready = 0;
        while (!ready)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(ready) : "r"(smem_addr(&bar[s])), "r"(parity) : "memory");
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     ::"l"(dst + c * CHUNK), "r"(smem_addr(stage_buf + s * CHUNK)), "r"(CHUNK) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        // The previous step's store has finished reading its stage: refill that stage.
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        if (it > 0) {
            const int sp = (int)((it - 1) % STAGES);
            const u64 cn = blockIdx.x + (it - 1 + STAGES) * gridDim.x;
            if (cn < nchunks) load(sp, cn);
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
