"""Search copy-kernel shapes (bench/copy_explore.cu) against cudaMemcpyAsync at one size; checks
each variant copies every byte before timing it. A diagnostic, not part of calib run."""

import itertools
import sys
from pathlib import Path

import cupy as cp
import numpy as np

from calib.backends.cupy_backend import CupyBackend
from calib.timing import StoppingRule

size = int(sys.argv[1]) * 2**20 if len(sys.argv) > 1 else 2**30
b = CupyBackend(rule=StoppingRule(min_samples=20, max_samples=20, batch=20))
src, dst = b._ensure_buffers(size)
n = np.uint64(size // 16)
variants = list(itertools.product((2, 4, 8, 16), (0, 1, 2)))
names = [f"copy_x<{u},{h}>" for u, h in variants]
mod = cp.RawModule(code=(Path(__file__).parent / "copy_explore.cu").read_text(), options=("-std=c++17",),
                   name_expressions=names)
sm = b.sm_count
memcpy = b.measure_memcpy(size)
ref = 2 * size / (memcpy.median_us * 1e3)
rows = []
check_src = cp.random.random(3 * 2**20 // 4 + 12, dtype=cp.float32).view(cp.uint8)
check_dst = cp.empty_like(check_src)
for name in names:
    k = mod.get_function(name)
    check_dst.fill(0xA5)
    k((sm * 2,), (256,), (check_src, check_dst, np.uint64(check_src.size // 16)))
    cp.cuda.Device().synchronize()
    assert bool(cp.all(check_dst == check_src)), name
    for threads, bps in itertools.product((128, 256, 512, 1024), (1, 2, 4)):
        if threads * bps > 2048:
            continue
        launch = lambda i, k=k, t=threads, g=sm * bps: k((g,), (t,), (src[i % 2], dst[i % 2], n), stream=b.stream)
        try:
            m = b.time_launches(launch)
        except cp.cuda.driver.CUDADriverError:  # too many registers for this block size
            continue
        rows.append((2 * size / (m.median_us * 1e3), name, threads, bps))
tma = [(st, ch) for st in (2, 4, 8) for ch in (8192, 16384, 32768) if st * ch <= 200 * 1024]
tma_names = [f"copy_tma<{st},{ch}>" for st, ch in tma]
tmod = cp.RawModule(code=(Path(__file__).parent / "copy_explore.cu").read_text(), options=("-std=c++17",),
                    name_expressions=tma_names)
src8, dst8 = src, dst
for (st, ch), name in zip(tma, tma_names):
    k = tmod.get_function(name)
    smem = st * ch
    try:
        k.max_dynamic_shared_size_bytes = smem
    except AttributeError:
        cp.cuda.driver.funcSetAttribute(k.ptr, 8, smem)
    check_dst.fill(0xA5)
    k((sm,), (32,), (check_src, check_dst, np.uint64(check_src.size)), shared_mem=smem)
    cp.cuda.Device().synchronize()
    if not bool(cp.all(check_dst == check_src)):
        print("WRONG", name)
        continue
    for bps in (1, 2, 3, 4):
        if bps * smem > 220 * 1024:
            continue
        launch = lambda i, k=k, g=sm * bps, smem=smem: k((g,), (32,), (src8[i % 2], dst8[i % 2], np.uint64(size)),
                                                           shared_mem=smem, stream=b.stream)
        try:
            m = b.time_launches(launch)
        except cp.cuda.driver.CUDADriverError as exc:
            print("skip", name, bps, exc)
            continue
        rows.append((2 * size / (m.median_us * 1e3), name, 32, bps))
rows.sort(key=lambda r: -r[0])
print(f"cudaMemcpyAsync {ref:.0f} GB/s at {size >> 20} MiB")
for gbps, name, t, bps in rows[:15]:
    print(f"  {gbps:7.0f}  {gbps / ref:.3f}  {name} threads={t} blocks/SM={bps}")
