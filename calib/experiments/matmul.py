"""Dense matmul throughput through cuBLAS (``cupy.matmul``), per data type.

An M×N output of fixed size (8192²: whole tiles) and a reduction depth K that grows from 1024 to
8192. The sweep varies K rather than the side of square products: cuBLAS's grid of output tiles,
and so its wave quantization over the SMs, is then the same at every point. Square sizes on an
H200 scattered by up to 20% around any line (5120² in TF32 ran slower per flop than 4096²,
2026-11-29); at fixed M×N the time is linear in K. ``t = t0 + 2MNK / rate`` per type gives
``compute.<type>.tensor_tflops``; t0 absorbs writing the output once. TF32 is float32 inputs with
CuPy's TF32 mode on; bf16 is measured where CuPy can hold bfloat16 arrays.
"""

from __future__ import annotations

import numpy as np

from ..fit import fit_rates

EXPERIMENT = "matmul"
DTYPES = ("fp16", "bf16", "tf32")
SIM_DEFAULTS = {"sim.matmul.fixed_us": 8.0}
MN = 8192
# K stops at 8192: at larger K a single point ran long enough to reach the power cap (full suite,
# K up to 16384: fp16 fell to 680 TFLOP/s with a ±5% CI; up to 8192: 762 ±0.6%, 2026-11-29).
SUITES = {"quick": [1024, 2048, 4096, 6144, 8192],
          "full": [1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192]}


def param_name(dtype: str) -> str:
    return f"compute.{dtype}.tensor_tflops"


def plan(suite: str, *, memory_bytes: int = 2**34, dtypes=DTYPES, **_) -> list[dict]:
    return [{"experiment": EXPERIMENT, "dtype": d, "m": MN, "n": MN, "k": k} for d in dtypes for k in SUITES[suite]
            if footprint_bytes({"dtype": d, "m": MN, "n": MN, "k": k}) < memory_bytes / 4]


def element_bytes(dtype: str) -> int:
    return 4 if dtype == "tf32" else 2


def footprint_bytes(config: dict) -> int:
    m, n, k = config["m"], config["n"], config["k"]
    return 2 * element_bytes(config["dtype"]) * (m * k + k * n + m * n)  # two sets, rotated


def flops(c):
    return 2.0 * np.asarray(c["m"], dtype=float) * np.asarray(c["n"], dtype=float) * np.asarray(c["k"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {param_name("fp16"): 780.0, param_name("bf16"): 780.0, param_name("tf32"): 390.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    rate = np.array([truth[param_name(d)] for d in frame["dtype"]]) * 1e12
    return truth["sim.matmul.fixed_us"] + flops(frame) / rate * 1e6


def fit(frame, *, robust: bool = False, source: str | None = None) -> tuple[dict, dict]:
    return fit_rates(frame, EXPERIMENT, work=flops, name=param_name, by="dtype", scale=1e12, unit="TFLOP/s",
                     robust=robust, source=source)
