"""FP32 FMA throughput: independent FMA chains per thread (ILP) over enough threads (TLP).

``t = t0 + flops / rate`` over iteration counts at the launch configuration the tuner picked
(threads, ILP); ``compute.fp32.fma_tflops`` is the rate, counting an FMA as two flops.
"""

from __future__ import annotations

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import fit_rates
from ._base import Param, line_figures, small_kernels

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]

TITLE = "FP32 FMA throughput"
INTRO = """Sixteen independent FMA chains per thread over 2048 threads per SM, over iteration counts;
`t = t0 + flops / rate` gives `compute.fp32.fma_tflops` (an FMA counts two flops)."""
READING = """Compare with the peak from the SM count and the SM clock (`bench/ceilings.py`): a kernel whose
arithmetic intensity puts it above DRAM bandwidth over this rate is compute-bound."""
FP32 = "compute.fp32.fma_tflops"
PARAMETERS = (Param(FP32, "TFLOP/s", "FP32 FMA throughput (an FMA is 2 flops)"),)
SIM_DEFAULTS = {"sim.compute_throughput.fixed_us": 5.0}
SUITES = {"quick": [256, 512, 1024, 2048, 3072, 4096, 6144, 8192],
          "full": [256, 512, 768, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 16384]}
# Enough warps to fill every scheduler of any current GPU, and sixteen independent chains per thread
# to cover the FMA latency even where fewer warps are resident (with the kernel's step loop unrolled
# 64 times: 0.990 of the clock peak on an H200, against 0.914 for eight chains unrolled 4 times;
# bench/fma_shapes.py, 2026-12-01).
THREADS_PER_SM = 2048
ILP = 16


def plan(suite: str, *, sm_count: int = 132, **_) -> list[dict]:
    return [{"calibration": ID, "dtype": "fp32", "iters": n, "threads": sm_count * THREADS_PER_SM, "ilp": ILP}
            for n in SUITES[suite]]


def footprint_bytes(config: dict) -> int:
    return 4096


def flops(config_or_frame):
    """Two flops per FMA; ``iters * ilp`` FMAs per thread."""
    c = config_or_frame
    ilp, iters, threads = (np.asarray(c[k], dtype=float) for k in ("ilp", "iters", "threads"))
    return 2.0 * ilp * iters * threads


def default_truth(base: dict | None = None) -> dict:
    truth = {FP32: 60.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    return truth["sim.compute_throughput.fixed_us"] + flops(frame) / (truth[FP32] * 1e12) * 1e6


def fit(frame, *, robust: bool = False, source: str | None = None):
    return fit_rates(frame, ID, work=flops, name=FP32, scale=1e12, unit="TFLOP/s", robust=robust, source=source)


def figures(frame, result, *, title) -> dict:
    return line_figures(result, title, {FP32: ("GFLOP", 1e9)})


def measure(b, config: dict):
    if config.get("ilp") != ILP or config.get("dtype") != "fp32":
        raise UnsupportedConfig(f"the FMA kernel is compiled for fp32 with {ILP} chains")
    kernel = small_kernels(b).get_function(f"fma_chains<{ILP}>")
    threads = int(config["threads"])
    grid, block = ((threads + 255) // 256,), (256,)
    args = (b.sink(), np.int32(config["iters"]), np.float32(0.999999), np.float32(1e-7))
    return b.time_launches(lambda i: kernel(grid, block, args, stream=b.stream),
                           perf_config={"threads": 256, "blocks": grid[0], "ilp": ILP})


def prepare(b, configs):
    small_kernels(b)
