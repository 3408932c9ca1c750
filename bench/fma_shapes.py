"""Benchmark: FP32 FMA kernel shapes against the clock-derived peak (issue 13).

    python bench/fma_shapes.py [--out FILE]

`compute.fp32.fma_tflops` came out at 0.905-0.913 of SMs x 128 lanes x 2 flops x SM clock on an
H200 (2026-12-01), with eight chains per thread and the step loop unrolled four times. This times
the same kernel over chains per thread (ILP), unroll of the step loop and threads per SM, each at
two iteration counts so that the launch's fixed cost drops out of the rate (the slope between the
two), and reads the SM clock through NVML while each shape runs: the ratio is to the peak at the
clock the shape actually ran at. CUDA events, a warm-up per shape, the median of 7 launches.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import threading

# One kernel per (chains, unroll), written out rather than templated: `#pragma unroll` takes the
# count as a literal here, whatever the compiler's support for template arguments there.
TEMPLATE = r"""
extern "C" __global__ void fma_i{ilp}_u{unroll}(float* __restrict__ sink, int iters, float a, float b) {{
    float x[{ilp}];
#pragma unroll
    for (int i = 0; i < {ilp}; ++i) x[i] = threadIdx.x * 1e-6f + i;
#pragma unroll {unroll}
    for (int k = 0; k < iters; ++k) {{
#pragma unroll
        for (int i = 0; i < {ilp}; ++i) x[i] = fmaf(x[i], a, b);
    }}
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < {ilp}; ++i) s += x[i];
    if (s == 12345.678f) sink[blockIdx.x] = s;
}}
"""

SHAPES = [(ilp, unroll, tps) for ilp in (4, 8, 16) for unroll in (4, 16, 64) for tps in (1024, 2048)]


class ClockWatch:
    """The SM clock (MHz) NVML reports, sampled every 5 ms on a thread while a shape runs."""

    def __init__(self, index: int = 0):
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
        self.readings: list[int] = []
        self._stop = threading.Event()

    def __enter__(self):
        self.readings, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.005):
            self.readings.append(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def time_ms(cp, fn, repeats: int = 7) -> float:
    fn()
    cp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(repeats):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(times)


def main(argv=None) -> int:
    import cupy as cp
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    names = [f"fma_i{i}_u{u}" for i, u, _ in SHAPES]
    pairs = sorted({(i, u) for i, u, _ in SHAPES})
    module = cp.RawModule(code="".join(TEMPLATE.format(ilp=i, unroll=u) for i, u in pairs))
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    sink = cp.zeros(1 << 20, dtype=cp.float32)
    watch = ClockWatch()
    # spin the GPU up from its idle clock before the first shape
    k0 = module.get_function(names[0])
    for _ in range(20):
        k0((sms * 8,), (256,), (sink, np.int32(20000), np.float32(0.999999), np.float32(1e-7)))
    cp.cuda.get_current_stream().synchronize()
    rows = []
    for (ilp, unroll, tps), name in zip(SHAPES, names):
        kernel = module.get_function(name)
        grid = (sms * tps // 256,)
        walls = {}
        with watch:
            for iters in (8192, 32768):
                launch_args = (sink, np.int32(iters), np.float32(0.999999), np.float32(1e-7))
                walls[iters] = time_ms(cp, lambda k=kernel, g=grid, a=launch_args: k(g, (256,), a))
        threads = grid[0] * 256
        flops = 2.0 * ilp * threads * (32768 - 8192)
        tflops = flops / ((walls[32768] - walls[8192]) * 1e-3) / 1e12
        mhz = statistics.median(watch.readings) if watch.readings else float("nan")
        peak = sms * 128 * 2 * mhz * 1e6 / 1e12
        rows.append((ilp, unroll, tps, tflops, mhz, peak, tflops / peak))
    lines = [f"# FP32 FMA kernel shapes, {props['name'].decode()}, {dt.date.today().isoformat()}", "",
             f"{sms} SMs; rate = the slope between 8192 and 32768 steps (fixed cost excluded); peak = SMs x 128 x 2 x "
             "the median NVML SM clock while the shape ran", "",
             "| chains (ILP) | unroll | threads/SM | TFLOP/s | SM MHz | peak TFLOP/s | of peak |",
             "|---|---|---|---|---|---|---|"]
    for ilp, unroll, tps, tf, mhz, peak, ratio in sorted(rows, key=lambda r: -r[-1]):
        lines.append(f"| {ilp} | {unroll} | {tps} | {tf:.2f} | {mhz:.0f} | {peak:.2f} | {ratio:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
