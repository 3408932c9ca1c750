"""Every launch configuration of the DRAM copy kernel against cudaMemcpyAsync, at one size.

A diagnostic for the copy-bandwidth target: which perf-config the tuner should find, and how far
the best one is from the driver's own copy. Prints a table; needs a GPU.

    python bench/copy_variants.py [--size-mib 1024] [--width 16]
"""

import argparse

from calib.backends.cupy_backend import CupyBackend
from calib.timing import StoppingRule


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--width", type=int, default=16)
    args = ap.parse_args()
    size = args.size_mib * 2**20
    b = CupyBackend(rule=StoppingRule(min_samples=20, max_samples=20, batch=20))
    src, dst = b._ensure_buffers(size)
    rows = []
    for perf in b.perf_configs("copy"):
        m = b.time_launches(b._launcher("copy", args.width, perf, size, src, dst), perf_config=perf)
        rows.append((2 * size / (m.median_us * 1e3), perf))
    memcpy = b.measure_memcpy(size)
    ref = 2 * size / (memcpy.median_us * 1e3)
    rows.sort(key=lambda r: -r[0])
    print(f"copy {args.width}-byte accesses, {args.size_mib} MiB: cudaMemcpyAsync {ref:.0f} GB/s (r+w, incl. fixed cost)")
    for gbps, perf in rows[:12] + [(None, None)] + rows[-4:]:
        if gbps is None:
            print("  ...")
            continue
        print(f"  {gbps:7.0f} GB/s  {gbps / ref:.3f}  {perf}")


if __name__ == "__main__":
    main()
