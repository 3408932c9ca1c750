// DRAM streaming kernels for calib's memory_bandwidth calibration.
//
// T is the per-thread access: unsigned char/short/int, uint2 or uint4 (1 to 16 bytes). UNROLL
// independent accesses are issued before any is used, so that enough bytes are in flight to cover
// DRAM latency. LAYOUT picks the walk:
//   0 strided: the whole grid strides over the buffer, UNROLL grid-widths per step;
//   1 tiled:   blocks take turns on contiguous tiles of blockDim*UNROLL elements;
//   2 chunked: each block owns one contiguous chunk of the buffer and walks it tile by tile, so
//              the thousand concurrent streams spread over the whole buffer (in a copy, reads and
//              writes then rarely meet in the same DRAM bank at the same time).
// With a grid sized to the data (one step per thread), the strided walk is the plain copy of one
// element per thread that a driver-style copy uses; the backend offers such grids beside the
// persistent ones.
// dram_copy_pipelined is the strided copy with the next step's loads issued before this step's
// stores, the fastest copy shape found on an H200 (bench/results/2026-11-29-h200-explorations.md;
// evict-first and L2 prefetch hints and TMA bulk copies were slower there, so none is offered).
// The walked kernels share one walk, so the copy kernel's correctness check (every element written,
// equal to the source) vouches for the read kernel's coverage too.

typedef unsigned long long u64;

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

// Calls body(idx) with UNROLL element indices per step, then tail(i) for what is left over.
template <int UNROLL, int LAYOUT, typename Body, typename Tail>
__device__ __forceinline__ void walk(u64 n, Body body, Tail tail) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    const u64 gtid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 idx[UNROLL];
    if constexpr (LAYOUT == 2) {
        const u64 tile = (u64)blockDim.x * UNROLL;
        const u64 full = n / tile;
        const u64 per_block = (full + gridDim.x - 1) / gridDim.x;
        const u64 first = blockIdx.x * per_block;
        const u64 last = first + per_block < full ? first + per_block : full;
        for (u64 t = first; t < last; ++t) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) idx[u] = t * tile + (u64)u * blockDim.x + threadIdx.x;
            body(idx);
        }
        for (u64 i = full * tile + gtid; i < n; i += threads) tail(i);
    } else if constexpr (LAYOUT == 1) {
        const u64 tile = (u64)blockDim.x * UNROLL;
        const u64 full = n / tile;
        for (u64 t = blockIdx.x; t < full; t += gridDim.x) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) idx[u] = t * tile + (u64)u * blockDim.x + threadIdx.x;
            body(idx);
        }
        for (u64 i = full * tile + gtid; i < n; i += threads) tail(i);
    } else {
        u64 i = gtid;
        for (; i + (UNROLL - 1) * threads < n; i += UNROLL * threads) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) idx[u] = i + (u64)u * threads;
            body(idx);
        }
        for (; i < n; i += threads) tail(i);
    }
}

template <typename T, int UNROLL, int LAYOUT>
__global__ void dram_read(const T* __restrict__ src, u64 n, unsigned* __restrict__ sink) {
    unsigned acc = 0;
    walk<UNROLL, LAYOUT>(n, [&](const u64* idx) {
        T v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[idx[u]];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= fold(v[u]);
    }, [&](u64 i) { acc ^= fold(src[i]); });
    // Practically never true, but the compiler cannot know: the loads stay.
    if (acc == 0x9e3779b9u) sink[blockIdx.x & 1023u] = acc;
}

template <typename T, int UNROLL, int LAYOUT>
__global__ void dram_write(T* __restrict__ dst, u64 n, unsigned seed) {
    const T v = splat<T>(seed ^ (blockIdx.x * 2654435761u));
    walk<UNROLL, LAYOUT>(n, [&](const u64* idx) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[idx[u]] = v;
    }, [&](u64 i) { dst[i] = v; });
}

template <typename T, int UNROLL, int LAYOUT>
__global__ void dram_copy(const T* __restrict__ src, T* __restrict__ dst, u64 n) {
    walk<UNROLL, LAYOUT>(n, [&](const u64* idx) {
        T v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[idx[u]];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[idx[u]] = v[u];
    }, [&](u64 i) { dst[i] = src[i]; });
}

template <typename T, int UNROLL>
__global__ void dram_copy_pipelined(const T* __restrict__ src, T* __restrict__ dst, u64 n) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    T cur[UNROLL];
    if (i + (UNROLL - 1) * threads < n) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) cur[u] = src[i + u * threads];
        while (true) {
            const u64 next = i + UNROLL * threads;
            const bool more = next + (UNROLL - 1) * threads < n;
            T nxt[UNROLL];
            if (more) {
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) nxt[u] = src[next + u * threads];
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) dst[i + u * threads] = cur[u];
            i = next;
            if (!more) break;
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) cur[u] = nxt[u];
        }
    }
    for (; i < n; i += threads) dst[i] = src[i];
}
