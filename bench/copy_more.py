"""More copy shapes against cudaMemcpyAsync, after bench/diagnose.py showed (2026-11-29) that the
driver's device-to-device copy is itself an SM kernel (it waits for thread slots held by another
kernel), so an SM copy can in principle match it. A diagnostic, not part of calib run; prints the
best shapes with their ratio to memcpy at one size.

    python bench/copy_more.py [size MiB]
"""

import itertools
import sys

import cupy as cp
import numpy as np

from calib.backends.cupy_backend import CupyBackend
from calib.timing import StoppingRule

CODE = r"""
typedef unsigned long long u64;

// One tile of blockDim * U elements per block, no loop: blocks retire and new ones take their
// place, as a grid sized to the data does.
template <int U>
__global__ void copy_flat(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 base = (u64)blockIdx.x * blockDim.x * U + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) { u64 i = base + (u64)u * blockDim.x; if (i < n) v[u] = src[i]; }
#pragma unroll
    for (int u = 0; u < U; ++u) { u64 i = base + (u64)u * blockDim.x; if (i < n) dst[i] = v[u]; }
}

// The same with each thread's U elements adjacent (a 16*U-byte run per thread).
template <int U>
__global__ void copy_flat_runs(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    const u64 base = ((u64)blockIdx.x * blockDim.x + threadIdx.x) * U;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) if (base + u < n) v[u] = src[base + u];
#pragma unroll
    for (int u = 0; u < U; ++u) if (base + u < n) dst[base + u] = v[u];
}
"""


def main():
    size = int(sys.argv[1]) * 2**20 if len(sys.argv) > 1 else 2**30
    b = CupyBackend(rule=StoppingRule(min_samples=20, max_samples=20, batch=20))
    src, dst = b._ensure_buffers(size)
    n = size // 16
    memcpy = b.measure_memcpy(size)
    ref = 2 * size / (memcpy.median_us * 1e3)
    names = [f"copy_flat<{u}>" for u in (1, 2, 4, 8)] + [f"copy_flat_runs<{u}>" for u in (1, 2, 4)]
    mod = cp.RawModule(code=CODE, options=("-std=c++17",), name_expressions=names)
    check_src = cp.random.random(3 * 2**20 // 4 + 12, dtype=cp.float32).view(cp.uint8)
    check_dst = cp.empty_like(check_src)
    rows = []
    for name in names:
        k = mod.get_function(name)
        u = int(name.split("<")[1].rstrip(">"))
        for threads in (128, 256, 512, 1024):
            per_block = threads * u
            m16 = check_src.size // 16
            check_dst.fill(0xA5)
            k(((m16 + per_block - 1) // per_block,), (threads,), (check_src, check_dst, np.uint64(m16)))
            cp.cuda.Device().synchronize()
            assert bool(cp.all(check_dst[: m16 * 16] == check_src[: m16 * 16])), name
            grid = (n + per_block - 1) // per_block
            launch = lambda i, k=k, g=grid, t=threads: k((g,), (t,), (src[i % 2], dst[i % 2], np.uint64(n)),
                                                          stream=b.stream)
            m = b.time_launches(launch)
            rows.append((2 * size / (m.median_us * 1e3), f"{name} threads={threads}"))
    # calib's own best copy with the destination moved against the source by an offset
    pipelined = {"threads": 256, "blocks_per_sm": 1, "unroll": 8, "layout": "pipelined"}
    for offset in (0, 256, 4096, 65536 + 4096, 2**20 + 8192, 2**25 + 2**16):
        big = [cp.empty(size + offset, dtype=cp.uint8) for _ in range(2)]
        moved = [x[offset:offset + size] for x in big]
        m = b.time_launches(b._launcher("copy", 16, pipelined, size, src, moved), perf_config=pipelined)
        rows.append((2 * size / (m.median_us * 1e3), f"dram_copy_pipelined 1 block/SM x 256, dst offset {offset} B"))
        del big, moved
    for bps, unroll in itertools.product((1, 2), (4, 8)):
        perf = {**pipelined, "blocks_per_sm": bps, "unroll": unroll}
        m = b.time_launches(b._launcher("copy", 16, perf, size, src, dst), perf_config=perf)
        rows.append((2 * size / (m.median_us * 1e3), f"dram_copy_pipelined {perf}"))
    rows.sort(key=lambda r: -r[0])
    print(f"# copy shapes at {size >> 20} MiB: cudaMemcpyAsync {ref:.0f} GB/s (r+w, one launch, fixed cost included)")
    for gbps, label in rows:
        print(f"  {gbps:7.0f}  {gbps / ref:.3f}  {label}")
    b.close()


if __name__ == "__main__":
    main()
