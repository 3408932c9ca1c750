"""Three questions the H200 runs of 2026-11-29 left open, answered in one short GPU call. Prints
a report; not part of calib run.

1. Occupancy: why did 1 GiB points of the DRAM read kernel run at 3.95 TB/s where 2 GiB points ran
   at 4.60 (and the DRAM sweep's 1.1 GB point at 4.6)? Times the same kernel at 1 GiB and 2 GiB,
   alternating as the occupancy sweep does and not, and at sizes that are not powers of two.
2. Copy: does cudaMemcpyAsync device-to-device run on the copy engines or on the SMs? Times it
   alone and beside a kernel that holds every thread slot of every SM.
3. TF32: is cupy.matmul's TF32 rate at a fixed shape stable from one burst to the next, and does
   torch.matmul differ at the same moment?

    python bench/diagnose.py
"""

import time

import numpy as np

from calib.backends.cupy_backend import CupyBackend
from calib.timing import StoppingRule
from ceilings import torch_median_s  # bench/ is this script's folder

SPIN = r"""
extern "C" __global__ void hold_sms(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def occupancy_sizes(b):
    perf = {"threads": 256, "blocks_per_sm": 8, "unroll": 8, "layout": "strided"}
    tuned = {"threads": 256, "blocks_per_sm": 8, "unroll": 4, "layout": "tiled"}
    print("## 1. DRAM read kernel, 16-byte loads: GB/s by size and allocation order")
    order = [("1 GiB after 2 GiB", 2**30, perf), ("2 GiB after 1 GiB", 2**31, perf),
             ("1 GiB after 2 GiB", 2**30, perf), ("1 GiB again, same buffers", 2**30, perf),
             ("1 GiB, DRAM sweep's tuned config", 2**30, tuned), ("1.0e9 bytes (not 2^n)", 10**9 // 16 * 16, perf),
             ("1.1e9 bytes (not 2^n)", 1_100_000_000 // 16 * 16, perf), ("2 GiB again", 2**31, perf),
             ("2.1e9 bytes (not 2^n)", 2_100_000_000 // 16 * 16, perf), ("1536 MiB", 1536 * 2**20, perf)]
    for label, size, p in order:
        if "again, same" not in label:
            b.release_buffers()
        src, dst = b._ensure_buffers(size)
        m = b.time_launches(b._launcher("read", 16, p, size, src, dst), perf_config=p)
        print(f"  {label:34s} {size / 2**20:8.0f} MiB  {m.median_us:8.1f} us  {size / m.median_us / 1e3:6.0f} GB/s"
              f"  first {m.samples_us[0]:.0f} us, n={m.n}")


def memcpy_engines(b):
    cp = b.cp
    print("## 2. cudaMemcpyAsync D2D, 1 GiB: alone and beside a kernel holding every SM")
    size = 2**30
    b.release_buffers()
    src, dst = b._ensure_buffers(size)
    hold = cp.RawKernel(SPIN, "hold_sms")
    other = cp.cuda.Stream(non_blocking=True)
    rt = cp.cuda.runtime

    def copy_ms(stream):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(stream)
        rt.memcpyAsync(dst[0].data.ptr, src[0].data.ptr, size, rt.memcpyDeviceToDevice, stream.ptr)
        e1.record(stream)
        e1.synchronize()
        return cp.cuda.get_elapsed_time(e0, e1)

    alone = [copy_ms(b.stream) for _ in range(10)]
    h0, h1 = cp.cuda.Event(), cp.cuda.Event()
    h0.record(other)
    hold((b.sm_count * 2,), (1024,), (np.int64(100_000_000),), stream=other)
    h1.record(other)
    time.sleep(0.005)  # the holding kernel is resident before the copy is submitted
    beside = copy_ms(b.stream)
    h1.synchronize()
    held = cp.cuda.get_elapsed_time(h0, h1)
    print(f"  alone: median {np.median(alone):.3f} ms ({2 * size / np.median(alone) / 1e6:.0f} GB/s r+w)")
    print(f"  beside a {held:.1f} ms kernel holding 2 x 1024 threads on every SM: {beside:.3f} ms")
    # A copy engine would copy at its usual speed beside the holding kernel; a copy kernel has to
    # wait until blocks of the holding kernel retire (which may be its first wave, not its end).
    print("  -> " + ("copy engines: the copy ran at its usual speed" if beside < 3 * np.median(alone)
                     else "SMs: the copy waited for thread slots held by the other kernel"))


def tf32_bursts(b):
    import os

    cp = b.cp
    print("## 3. TF32 8192 x 8192 x K: TFLOP/s per burst (0.25 s idle before each, 20 samples)")
    if os.environ.get("CUPY_TF32") != "1":
        print("  skipped: run with CUPY_TF32=1")
        return
    try:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = True
    except ImportError:
        torch = None
    n = 8192
    rule = StoppingRule(min_samples=20, max_samples=20, batch=20)
    for k in (4096, 8192):
        a = cp.random.standard_normal((n, k), dtype=cp.float32)
        w = cp.random.standard_normal((k, n), dtype=cp.float32)
        out = cp.empty((n, n), dtype=cp.float32)
        flops = 2 * n * n * k
        rates, trates, clocks = [], [], []
        for _ in range(4):
            time.sleep(0.25)
            def launch(i):
                with b.stream:
                    cp.matmul(a, w, out=out)

            m = b.time_launches(launch, rule=rule)
            rates.append(flops / m.median_us / 1e6)
            clocks.append((m.clocks or {}).get("sm_mhz_min"))
            if torch is not None:
                ta, tw = torch.as_tensor(a, device="cuda"), torch.as_tensor(w, device="cuda")
                time.sleep(0.25)
                trates.append(flops / torch_median_s(lambda: ta @ tw) / 1e12)
        print(f"  K={k}: cupy {' '.join(f'{r:.0f}' for r in rates)} (SM MHz min {clocks})"
              + (f"; torch {' '.join(f'{r:.0f}' for r in trates)}" if trates else ""))
        del a, w, out


def main():
    b = CupyBackend(rule=StoppingRule(min_samples=20, max_samples=60, batch=20, rel_precision=0.002))
    print(f"# diagnose: {b.fingerprint()[0].get('name')}, {time.strftime('%Y-%m-%d %H:%M')}")
    for step in (occupancy_sizes, memcpy_engines, tf32_bursts):
        try:
            step(b)
        except Exception as exc:  # one question's failure leaves the others' answers
            print(f"  {step.__name__} failed: {type(exc).__name__}: {exc}")
    b.close()


if __name__ == "__main__":
    main()
