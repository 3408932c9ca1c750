"""Split-K reduction: summing S partial M×N fp32 tiles into one.

``t = t0 + S*M*N / rate`` at fixed M×N over split factors S; the intercept absorbs writing the
output tile once. ``matmul.splitk.elements_reduced_per_second`` is the rate.
"""

from __future__ import annotations

import numpy as np

from ..fit import fit_rates

EXPERIMENT = "splitk"
RATE = "matmul.splitk.elements_reduced_per_second"
SIM_DEFAULTS = {"sim.splitk.fixed_us": 6.0}
# An 8192×8192 tile (256 MiB per split) keeps every point far beyond L2: with a 4096×4096 tile the
# small split factors ran partly from an H200's 60 MiB L2 and bent the line (2026-11-29).
SUITES = {"quick": {"mn": 8192 * 8192, "splits": [4, 5, 6, 8, 10, 12, 16]},
          "full": {"mn": 8192 * 8192, "splits": [4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24]}}


def plan(suite: str, *, memory_bytes: int, **_) -> list[dict]:
    s = SUITES[suite]
    return [{"experiment": EXPERIMENT, "mn": s["mn"], "splits": k} for k in s["splits"]
            if footprint_bytes({"mn": s["mn"], "splits": k}) < memory_bytes / 2]


def footprint_bytes(config: dict) -> int:
    return 4 * config["mn"] * (config["splits"] + 1)


def elements(config_or_frame):
    return np.asarray(config_or_frame["splits"], dtype=float) * np.asarray(config_or_frame["mn"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {RATE: 1.05e12, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    return truth["sim.splitk.fixed_us"] + elements(frame) / truth[RATE] * 1e6


def fit(frame, *, robust: bool = False, source: str | None = None) -> tuple[dict, dict]:
    return fit_rates(frame, EXPERIMENT, work=elements, name=RATE, scale=1.0, unit="elements/s", robust=robust,
                     source=source)
