"""FP32 FMA throughput: independent FMA chains per thread (ILP) over enough threads (TLP).

``t = t0 + flops / rate`` over iteration counts at the launch configuration the tuner picked
(threads, ILP); ``compute.fp32.fma_tflops`` is the rate, counting an FMA as two flops.
"""

from __future__ import annotations

import numpy as np

from ..fit import fit_rates

EXPERIMENT = "fma"
FP32 = "compute.fp32.fma_tflops"
SIM_DEFAULTS = {"sim.fma.fixed_us": 5.0}
SUITES = {"quick": [256, 512, 1024, 2048, 3072, 4096, 6144, 8192],
          "full": [256, 512, 768, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 16384]}
# Enough warps to fill every scheduler of any current GPU, and eight independent chains per thread
# to cover the FMA latency even where fewer warps are resident.
THREADS_PER_SM = 2048
ILP = 8


def plan(suite: str, *, sm_count: int = 132, **_) -> list[dict]:
    return [{"experiment": EXPERIMENT, "dtype": "fp32", "iters": n, "threads": sm_count * THREADS_PER_SM, "ilp": ILP}
            for n in SUITES[suite]]


def footprint_bytes(config: dict) -> int:
    return 4096


def flops(config_or_frame):
    """Two flops per FMA; ``iters * ilp`` FMAs per thread."""
    c = config_or_frame
    return 2.0 * np.asarray(c["ilp"], dtype=float) * np.asarray(c["iters"], dtype=float) * np.asarray(c["threads"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {FP32: 60.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    return truth["sim.fma.fixed_us"] + flops(frame) / (truth[FP32] * 1e12) * 1e6


def fit(frame, *, robust: bool = False, source: str | None = None) -> tuple[dict, dict]:
    return fit_rates(frame, EXPERIMENT, work=flops, name=FP32, scale=1e12, unit="TFLOP/s", robust=robust, source=source)
