"""Shared-memory bandwidth of the whole device.

Every thread reads 16-byte words from its block's shared memory (conflict-free: a warp's 32 reads
fall in 32 different banks' rows), ``iters`` times; ``t = t0 + bytes / bandwidth`` over iteration
counts gives ``memory.shared.bandwidth_gbps``.
"""

from __future__ import annotations

import numpy as np

from ..fit import fit_rates

EXPERIMENT = "smem"
BANDWIDTH = "memory.shared.bandwidth_gbps"
SIM_DEFAULTS = {"sim.smem.fixed_us": 4.0}
THREADS_PER_SM = 2048
BYTES_PER_ACCESS = 16
SUITES = {"quick": [1024, 2048, 4096, 6144, 8192, 12288, 16384],
          "full": [512, 1024, 2048, 3072, 4096, 6144, 8192, 10240, 12288, 16384, 20480, 24576]}


def plan(suite: str, *, sm_count: int = 132, **_) -> list[dict]:
    return [{"experiment": EXPERIMENT, "iters": n, "threads": sm_count * THREADS_PER_SM, "access_bytes": BYTES_PER_ACCESS}
            for n in SUITES[suite]]


def footprint_bytes(config: dict) -> int:
    return 4096


def bytes_read(c):
    return (np.asarray(c["iters"], dtype=float) * np.asarray(c["threads"], dtype=float)
            * np.asarray(c["access_bytes"], dtype=float))


def default_truth(base: dict | None = None) -> dict:
    truth = {BANDWIDTH: 32000.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    return truth["sim.smem.fixed_us"] + bytes_read(frame) / (truth[BANDWIDTH] * 1e3)


def fit(frame, *, robust: bool = False, source: str | None = None) -> tuple[dict, dict]:
    return fit_rates(frame, EXPERIMENT, work=bytes_read, name=BANDWIDTH, scale=1e9, unit="GB/s", robust=robust,
                     source=source)
