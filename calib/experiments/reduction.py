"""Reductions along the contiguous (inner) and the strided (outer) axis of a row-major fp32 matrix.

Inner: one block per row sums its contiguous elements. Outer: threads own columns and walk the rows
of a slab, adding their partial sums atomically. Both over row counts at a fixed width, far beyond
L2; ``t = t0 + bytes / bandwidth`` gives ``reduction.inner.bandwidth_gbps`` and
``reduction.outer.bandwidth_gbps`` (bytes of the input, read once).
"""

from __future__ import annotations

import numpy as np

from ..fit import fit_rates

EXPERIMENT = "reduction"
AXES = ("inner", "outer")
SIM_DEFAULTS = {"sim.reduction.fixed_us": 5.0}
COLS = 8192
# Up to 4 GiB per matrix: with 2 GiB at most, the outer-axis line's CI was ±0.68% on an H200
# (2026-11-29); a longer lever arm narrows it.
SUITES = {"quick": [16384, 24576, 32768, 49152, 65536, 98304, 131072],
          "full": [8192, 16384, 24576, 32768, 49152, 65536, 81920, 98304, 114688, 131072]}


def param_name(axis: str) -> str:
    return f"reduction.{axis}.bandwidth_gbps"


def plan(suite: str, *, memory_bytes: int = 2**34, **_) -> list[dict]:
    return [{"experiment": EXPERIMENT, "axis": a, "rows": r, "cols": COLS} for r in SUITES[suite] for a in AXES
            if footprint_bytes({"rows": r, "cols": COLS}) < memory_bytes / 2]


def footprint_bytes(config: dict) -> int:
    return 2 * 4 * config["rows"] * config["cols"]  # two input sets, rotated


def bytes_read(c):
    return 4.0 * np.asarray(c["rows"], dtype=float) * np.asarray(c["cols"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {param_name("inner"): 4150.0, param_name("outer"): 3900.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    bw = np.array([truth[param_name(a)] for a in frame["axis"]])
    return truth["sim.reduction.fixed_us"] + bytes_read(frame) / (bw * 1e3)


def fit(frame, *, robust: bool = False, source: str | None = None) -> tuple[dict, dict]:
    return fit_rates(frame, EXPERIMENT, work=bytes_read, name=param_name, by="axis", scale=1e9, unit="GB/s",
                     robust=robust, source=source)
