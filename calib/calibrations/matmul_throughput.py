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

import dataclasses
import os
import time

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import fit_rates
from ._base import Param, line_figures

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "Dense matmul throughput (cuBLAS)"
INTRO = """Products through `cupy.matmul` (cuBLAS) on random inputs, for fp16, bf16 (where CuPy holds
bfloat16 arrays) and tf32 (float32 with CuPy's TF32 mode): an 8192 × 8192 output with the reduction
depth K from 1024 to 8192, so that cuBLAS's grid of output tiles is the same at every point;
`t = t0 + 2·M·N·K / rate` gives `compute.<type>.tensor_tflops`. Each point starts after an idle
pause: sustained tensor-core work reaches the power cap. A point whose clock dropped or whose samples
never settled is measured again after a longer pause, up to twice, and the fastest attempt is kept (the
others stay in the results store); points still marked throttled ran capped. If cuBLAS switches kernels
along K, the rate changes there and the fit says so (lack of fit, a wide CI)."""
READING = """The rate is cuBLAS's on a large, tile-aligned output before the power cap; a heuristic choosing
between a library call and a fused kernel compares its own achieved rate against this one."""

# CuPy reads its TF32 switch when it is imported: the notebook sets it first.
ENVIRONMENT = {"CUPY_TF32": "1"}
DTYPES = ("fp16", "bf16", "tf32")
SIM_DEFAULTS = {"sim.matmul_throughput.fixed_us": 8.0}
MN = 8192
# K stops at 8192: at larger K a single point ran long enough to reach the power cap (full suite,
# K up to 16384: fp16 fell to 680 TFLOP/s with a ±5% CI; up to 8192: 762 ±0.6%, 2026-11-29).
SUITES = {"quick": [1024, 2048, 4096, 6144, 8192],
          "full": [1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192]}


def param_name(dtype: str) -> str:
    return f"compute.{dtype}.tensor_tflops"


PARAMETERS = tuple(Param(param_name(d), "TFLOP/s", f"dense {d} matmul through cuBLAS, 2MNK flops over time")
                   for d in DTYPES)


def plan(suite: str, *, memory_bytes: int = 2**34, dtypes=DTYPES, **_) -> list[dict]:
    return [{"calibration": ID, "dtype": d, "m": MN, "n": MN, "k": k} for d in dtypes for k in SUITES[suite]
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
    return truth["sim.matmul_throughput.fixed_us"] + flops(frame) / rate * 1e6


def fit(frame, *, robust: bool = False, source: str | None = None):
    return fit_rates(frame, ID, work=flops, name=param_name, by="dtype", scale=1e12, unit="TFLOP/s",
                     robust=robust, source=source)


def figures(frame, result, *, title) -> dict:
    return line_figures(result, title, {param_name(d): ("TFLOP", 1e12) for d in DTYPES})


def prepare(b, configs):
    """TF32 is CuPy's mode switch, read when CuPy is imported: say so before any point is timed."""
    if any(c["dtype"] == "tf32" for c in configs) and os.environ.get("CUPY_TF32") != "1":
        print("calib: TF32 points need CUPY_TF32=1 set before CuPy is imported; they will be reported unsupported")


# Sustained tensor-core matmul brings an H200 to its power cap within about a second, and the clocks
# then drop: fp16 fell from 760 to 670 TFLOP/s at K >= 10240 in a back-to-back sweep (2026-11-29).
# Each matmul point starts after an idle pause so that every point of a line is measured in the same,
# uncapped state; a point that capped anyway is still marked throttled by the NVML readings.
COOLDOWN_S = 0.25
BUDGET_S = 0.1
# Inside a suite the pause was not always enough: points of the quick suite ran with the SM clock
# at 1590-1860 MHz instead of 1980, 7-20% slow, and made the TF32 CI ±22% (H200, 2026-11-29). The
# same points were the ones whose samples never settled (the stopping rule ran out of budget),
# also where NVML's two clock readings missed the drop. Such a point is measured again after a
# longer pause, and the fastest attempt is kept: the parameter is the unthrottled rate. Attempts
# set aside stay in the results store (role "set_aside"); a point that never settles stays marked.
RETRY_COOLDOWN_S = 1.0
THROTTLE_RETRIES = 2
THROTTLED_CLOCK_FRACTION = 0.97


def measure(b, config: dict):
    """cuBLAS through cupy.matmul on random inputs, two input sets alternated."""
    cp = b.cp
    dtype_name, m, n, k = config["dtype"], int(config["m"]), int(config["n"]), int(config["k"])
    if dtype_name == "tf32":
        if os.environ.get("CUPY_TF32") != "1":
            raise UnsupportedConfig("TF32 needs CUPY_TF32=1 in the environment before CuPy is imported")
        dtype = cp.float32
    elif dtype_name == "fp16":
        dtype = cp.float16
    elif dtype_name == "bf16":
        try:
            dtype = cp.dtype("bfloat16")
            cp.zeros(1, dtype=dtype)
        except Exception as exc:
            raise UnsupportedConfig(f"this CuPy holds no bfloat16 arrays ({exc})") from None
    else:
        raise UnsupportedConfig(f"no matmul for {dtype_name!r}")

    def make():
        b.check_free(2 * (m * k + k * n + m * n) * cp.dtype(dtype).itemsize)
        held = {"src": [(cp.random.standard_normal((m, k), dtype=cp.float32).astype(dtype),
                         cp.random.standard_normal((k, n), dtype=cp.float32).astype(dtype)) for _ in range(2)],
                "dst": [cp.empty((m, n), dtype=dtype) for _ in range(2)]}
        a, bb = held["src"][0]
        ref = a[:64].astype(cp.float64) @ bb.astype(cp.float64)
        cp.matmul(a, bb, out=held["dst"][0])
        err = float(cp.linalg.norm(held["dst"][0][:64].astype(cp.float64) - ref) / cp.linalg.norm(ref))
        if not err < 2e-2:
            raise RuntimeError(f"{dtype_name} matmul is wrong at {m}x{n}x{k}: relative error {err:.2e}")
        return held

    held = b.buffers(("matmul", dtype_name, m, n, k), make)
    src, dst = held["src"], held["dst"]

    def launch(i):
        with b.stream:
            cp.matmul(src[i % 2][0], src[i % 2][1], out=dst[i % 2])

    # A noisy point would otherwise keep sampling for up to the rule's budget, heat the GPU into the
    # power cap and get noisier still: at most BUDGET_S of matmul per point.
    rule = dataclasses.replace(b.rule, budget_s=min(b.rule.budget_s, BUDGET_S))
    return measure_unthrottled(b, launch, rule, {"library": "cuBLAS via cupy.matmul", "dtype": dtype_name})


def clock_dropped(m) -> bool:
    low, top = (m.clocks or {}).get("sm_mhz_min"), (m.clocks or {}).get("max_sm_mhz")
    return bool(low and top and low < THROTTLED_CLOCK_FRACTION * top)


def unsettled(m) -> str | None:
    """Why a matmul point looks throttled, or None."""
    if clock_dropped(m):
        return f"SM clock dropped to {m.clocks['sm_mhz_min']} MHz"
    if m.stop_reason == "budget":
        return "samples did not settle within the budget"
    return None


def measure_unthrottled(b, launch, rule, perf: dict):
    """Time ``launch`` after an idle pause; while the point looks throttled, try again after a
    longer pause, up to THROTTLE_RETRIES times, and keep the fastest attempt. The pause and the
    attempt are bookkeeping, kept in the protocol beside the perf-config, not in it."""
    attempts = []
    for attempt in range(1 + THROTTLE_RETRIES):
        cooldown_s = COOLDOWN_S if attempt == 0 else RETRY_COOLDOWN_S
        b.stream.synchronize()
        time.sleep(cooldown_s)
        m = b.time_launches(launch, rule=rule, perf_config=dict(perf))
        m.protocol.update(cooldown_s=cooldown_s, attempt=attempt + 1)
        attempts.append(m)
        if unsettled(m) is None:
            break
    kept = attempts[-1] if unsettled(attempts[-1]) is None else min(attempts, key=lambda m: m.median_us)
    kept.candidates = [m for m in attempts if m is not kept]
    for m in kept.candidates:
        m.protocol.update(role="set_aside", set_aside_because=unsettled(m))
    return kept
