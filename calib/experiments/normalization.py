"""Achieved bandwidth of a persistent normalization kernel by access width.

A persistent softmax (each 256-thread block holds one row of 4096 fp32 values in registers, 16 per
thread) runs over row counts far beyond L2, loading and storing 4, 8 or 16 bytes per access.
``t = t0 + bytes / bandwidth``, bytes read plus bytes written (as for the copy bandwidth), gives
``normalization.load_bandwidth_gbps.align{4,8,16}``: what a normalization scheduler gets for the
vector width it picks, reductions and exponentials included.
"""

from __future__ import annotations

import numpy as np

from ..fit import fit_rates

EXPERIMENT = "normalization"
WIDTHS = (4, 8, 16)
COLS = 4096
SIM_DEFAULTS = {"sim.normalization.fixed_us": 5.0}
SUITES = {"quick": [16384, 24576, 32768, 49152, 65536, 98304, 131072],
          "full": [16384, 20480, 24576, 32768, 40960, 49152, 65536, 81920, 98304, 131072, 163840]}


def param_name(width: int) -> str:
    return f"normalization.load_bandwidth_gbps.align{width}"


def plan(suite: str, *, memory_bytes: int = 2**34, **_) -> list[dict]:
    return [{"experiment": EXPERIMENT, "width_bytes": w, "rows": r, "cols": COLS} for r in SUITES[suite] for w in WIDTHS
            if footprint_bytes({"rows": r, "cols": COLS}) < memory_bytes / 2]


def footprint_bytes(config: dict) -> int:
    return 2 * 2 * 4 * config["rows"] * config["cols"]  # input and output, two sets


def bytes_moved(c):
    return 2.0 * 4.0 * np.asarray(c["rows"], dtype=float) * np.asarray(c["cols"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {param_name(4): 3500.0, param_name(8): 3900.0, param_name(16): 4000.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    bw = np.array([truth[param_name(int(w))] for w in frame["width_bytes"]])
    return truth["sim.normalization.fixed_us"] + bytes_moved(frame) / (bw * 1e3)


def fit(frame, *, robust: bool = False, source: str | None = None) -> tuple[dict, dict]:
    return fit_rates(frame, EXPERIMENT, work=bytes_moved, name=lambda w: param_name(int(w)), by="width_bytes",
                     scale=1e9, unit="GB/s", robust=robust, source=source)
