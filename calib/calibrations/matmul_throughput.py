"""Dense matmul throughput through cuBLAS (``cupy.matmul``), per data type.

An M×N output of fixed size (8192²: whole tiles) and a reduction depth K that grows to 8192. The
sweep varies K rather than the side of square products: cuBLAS's grid of output tiles, and so its
wave quantization over the SMs, is then the same at every point. Square sizes on an H200 scattered
by up to 20% around any line (5120² in TF32 ran slower per flop than 4096², 2026-11-29); at fixed
M×N the time is linear in K within one cuBLAS regime. TF32 is float32 inputs with CuPy's TF32 mode
on; bf16 is measured where CuPy can hold bfloat16 arrays.

``compute.<type>.tensor_tflops`` is the asymptotic rate of the regime large problems use:
``t = t0 + 2MNK / rate`` fitted over the points of the last regime along K, from K = FIT_K_MIN on,
whose samples settled. What the H200 data (2026-12-01, both suites) shows, and why:

- TF32 has two cuBLAS regimes along K: K ≤ 4096 about 340–350 TFLOP/s (even the fastest samples),
  K ≥ 5120 about 410–415. One line through both missed by 7.8% (residuals 127–155× the noise,
  CI ±8–14%). The fit finds the regime change as a jump of more than REGIME_JUMP in the achieved
  rate between neighbouring settled points, fits the large-K regime only, and says where the
  change lies (``diagnostics.regime_boundary_k``: the last K below it and the first K of it) and
  the achieved rate below it (``diagnostics.small_k_tflops``): a heuristic with K below the
  boundary gets that, not the parameter.
- fp16 and bf16 have one regime, but at K = 1024 and 1536 the points sit 0.4–0.7% off the line
  the larger K follow (a lack-of-fit flag, 4.7–6.3× the noise): the fit starts at K = 2048, where
  the line misses by at most 0.3% (full: fp16 775.6 ±0.41%, bf16 808.8 ±0.32%, unflagged).
- TF32 at K ≥ 5120 draws the H200 into its power cap within 13–20 launches (30–45 ms): the
  samples of a point go from 413 to about 360 TFLOP/s within the point, often with no clock drop
  NVML sees, and the point never settles (``stop_reason`` "budget") however often it is retried.
  Its time is then a mix of two clock states, not the regime's: the fit leaves unsettled points
  out (and names them in ``diagnostics.left_out_k``); only where fewer than 3 settled points
  remain does it use them, flagged.

In the recorded full suite only K = 7168 and 8192 of the large TF32 regime settled, in the quick
suite only 8192: no CI at all, whatever the model. The plan therefore measures TF32 at more K of
the large regime (quick 5120–8192 in six points and 4096 below it, full eleven points from 1024),
so that at least five settle even when a third do not; fp16 and bf16 start the quick suite at
K = 2048 (five points where the fit looks). The next H200 run must show that five TF32 points
settle in each suite and give ±1%.
"""

from __future__ import annotations

import dataclasses
import os
import time

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import FitResult, fit_timed
from ._base import Param, line_figures

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "Dense matmul throughput (cuBLAS)"
INTRO = """Products through `cupy.matmul` (cuBLAS) on random inputs, for fp16, bf16 (where CuPy holds
bfloat16 arrays) and tf32 (float32 with CuPy's TF32 mode): an 8192 × 8192 output with the reduction
depth K up to 8192, so that cuBLAS's grid of output tiles is the same at every point;
`t = t0 + 2·M·N·K / rate` over the regime large problems use gives `compute.<type>.tensor_tflops`.
cuBLAS changes kernels along K: on an H200 TF32 runs at about 345 TFLOP/s for K ≤ 4096 and about
414 from K = 5120 on. The fit finds such a change as a jump in the achieved rate between neighbouring
points and fits the last regime only, from K = 2048 on (fp16 and bf16 at K ≤ 1536 lie 0.4–0.7% off
the line the larger K follow); the points it leaves out are drawn as crosses. Each point starts after an idle
pause: sustained tensor-core work reaches the power cap. A point whose clock dropped or whose samples
never settled is measured again after a longer pause, up to twice, and the fastest attempt is kept (the
others stay in the results store); points still marked throttled ran capped. A point whose samples never
settled (TF32 at large K reaches the power cap within a point: its samples fall from 413 to about 360
TFLOP/s) is a mix of two clock states and is left out of the fit; only where fewer than three settled
points remain is it used, and the record says so. A point that settled with every sample capped runs
slower per flop than a point of smaller K: it is measured again, and if it stays above the line it is
left out too (`diagnostics.capped_k`)."""
READING = """The rate is cuBLAS's on a large, tile-aligned output before the power cap, in the regime large
problems use; a heuristic choosing between a library call and a fused kernel compares its own achieved
rate against this one. Below the regime change (`diagnostics.regime_boundary_k`: the last K below it and
the first K of it, on an H200 TF32 between 4096 and 5120) cuBLAS achieves less: the record's
`diagnostics.small_k_tflops` (TF32 on an H200: about 345 TFLOP/s, 0.84 of the parameter)."""

# CuPy reads its TF32 switch when it is imported: the notebook sets it first.
ENVIRONMENT = {"CUPY_TF32": "1"}
DTYPES = ("fp16", "bf16", "tf32")
# The simulated device shares the fit's model: TF32 below the regime's K runs at a fraction of the
# parameter's rate (H200, 2026-12-01: 345 of 414 TFLOP/s below K = 5120); t0 as the H200's fits (17-22 us).
SIM_DEFAULTS = {"sim.matmul_throughput.fixed_us": 20.0,
                "sim.matmul_throughput.tf32_regime_k": 5120.0,
                "sim.matmul_throughput.tf32_small_k_ratio": 0.84}
MN = 8192
# K stops at 8192: at larger K a single point ran long enough to reach the power cap (full suite,
# K up to 16384: fp16 fell to 680 TFLOP/s with a ±5% CI; up to 8192: 762 ±0.6%, 2026-11-29).
# Per type: TF32 is measured densely in its large-K regime (5120 on, on an H200), where a third of the
# points may not settle (power cap within the point) and are left out; 4096 brackets the regime change.
# fp16 and bf16 in the quick suite start where the fit does (K = 2048): five points in the fit.
SUITES = {"quick": {"fp16": [2048, 3072, 4096, 6144, 8192], "bf16": [2048, 3072, 4096, 6144, 8192],
                    "tf32": [4096, 5120, 6144, 6656, 7168, 7680, 8192]},
          "full": {"fp16": [1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192],
                   "bf16": [1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192],
                   "tf32": [1024, 2048, 3072, 4096, 5120, 5632, 6144, 6656, 7168, 7680, 8192]}}
# The fit: the line over the last regime along K, from FIT_K_MIN on. A regime change is a rise of the
# achieved rate by more than REGIME_JUMP between neighbouring settled points (TF32 on an H200: +18%;
# fp16 and bf16 rise by at most 4% from one K to the next, the fixed cost amortized).
FIT_K_MIN = 2048
REGIME_JUMP = 0.08
# Points that settled after the power cap bit (every sample capped) ran 4-9% slower than the line
# through the uncapped points (TF32 376-392 against 406-413 TFLOP/s, three quick suites on an H200,
# 2026-12-01) and made the CI ±25-33%; uncapped points scatter about it by at most 0.5%.
CAPPED_FRACTION = 0.015
# Measured again (after RETRY_COOLDOWN_S) when slower per flop than a point of smaller K by this much.
RETRY_SLOWER_FRACTION = 0.03
MIN_SETTLED = 3


def param_name(dtype: str) -> str:
    return f"compute.{dtype}.tensor_tflops"


PARAMETERS = tuple(Param(param_name(d), "TFLOP/s", f"dense {d} matmul through cuBLAS, 2MNK flops over time, "
                         "in the regime along K that large problems use") for d in DTYPES)


def plan(suite: str, *, memory_bytes: int = 2**34, dtypes=DTYPES, **_) -> list[dict]:
    return [{"calibration": ID, "dtype": d, "m": MN, "n": MN, "k": k} for d in dtypes for k in SUITES[suite][d]
            if footprint_bytes({"dtype": d, "m": MN, "n": MN, "k": k}) < memory_bytes / 4]


def element_bytes(dtype: str) -> int:
    return 4 if dtype == "tf32" else 2


def footprint_bytes(config: dict) -> int:
    m, n, k = config["m"], config["n"], config["k"]
    return 2 * element_bytes(config["dtype"]) * (m * k + k * n + m * n)  # two sets, rotated


def flops(c):
    return 2.0 * np.asarray(c["m"], dtype=float) * np.asarray(c["n"], dtype=float) * np.asarray(c["k"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {param_name("fp16"): 778.0, param_name("bf16"): 810.0, param_name("tf32"): 414.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    dtype = np.asarray(frame["dtype"])
    rate = np.array([truth[param_name(d)] for d in dtype]) * 1e12
    small = (dtype == "tf32") & (np.asarray(frame["k"], dtype=float) < truth["sim.matmul_throughput.tf32_regime_k"])
    rate = np.where(small, rate * truth["sim.matmul_throughput.tf32_small_k_ratio"], rate)
    return truth["sim.matmul_throughput.fixed_us"] + flops(frame) / rate * 1e6


def large_k_regime(g):
    """The rows of one type's sweep the rate is fitted over, and what was left out and why: the last
    regime along K (a rise of the achieved rate by more than REGIME_JUMP between neighbouring
    settled points starts a new one), from FIT_K_MIN on, settled points only (unless fewer than
    MIN_SETTLED settled, then all of them, flagged), less the points that ran capped (furthest
    above the line by more than CAPPED_FRACTION, one at a time, named in ``capped_k``)."""
    g = g.sort_values("k")
    k = g["k"].to_numpy(dtype=float)
    settled = (g["stop_reason"] != "budget").to_numpy() if "stop_reason" in g else np.ones(len(g), dtype=bool)
    rate = flops(g) / g["time_us"].to_numpy(dtype=float) * 1e-6  # TFLOP/s achieved
    diag, flags = {"regime_boundary_k": None}, []
    start = -np.inf
    # Regime changes are looked for among the settled points, or among all where too few settled
    # (a slow GPU whose every point ran out of the budget).
    idx = np.flatnonzero(settled) if settled.sum() >= MIN_SETTLED else np.arange(len(k))
    for a, b in zip(idx[:-1], idx[1:]):
        if rate[b] > (1 + REGIME_JUMP) * rate[a]:
            start = k[a + 1]  # the regime starts after the last settled point below the change
            diag["regime_boundary_k"] = [float(k[a]), float(start)]
            below = np.isin(np.arange(len(k)), idx) & (k <= k[a])
            diag["small_k_tflops"] = float(np.median(rate[below]))
    regime = (k >= start) & (k >= FIT_K_MIN)
    use = regime & settled
    if use.sum() < MIN_SETTLED:
        use = regime
        if (regime & ~settled).any():
            flags.append(f"{int((regime & ~settled).sum())} of the {int(regime.sum())} points fitted never settled "
                         "(a mix of clock states: the power cap within the point)")
    # A point that settled in the capped state lies above the regime's line, never below it: the
    # point furthest above the line through the remaining points (itself included) is left out
    # while it misses by more than CAPPED_FRACTION and more than MIN_SETTLED points remain.
    capped = np.zeros(len(k), dtype=bool)
    t = g["time_us"].to_numpy(dtype=float)
    x = flops(g)
    while (use & ~capped).sum() > MIN_SETTLED:
        keep = use & ~capped
        slope, icpt = np.polyfit(x[keep], t[keep], 1)
        above = np.where(keep, t / (icpt + slope * x) - 1, -np.inf)
        worst = int(np.argmax(above))
        if above[worst] <= CAPPED_FRACTION:
            break
        capped[worst] = True
    if capped.any():
        use = use & ~capped
        diag["capped_k"] = [float(x) for x in k[capped]]
    diag["left_out_k"] = [float(x) for x in k[~use]]
    diag["unsettled_k"] = [float(x) for x in k[~settled]]
    diag["fit_k_range"] = [float(k[use].min()), float(k[use].max())] if use.any() else None
    return g[use], g[~use], flags, diag


def fit(frame, *, robust: bool = False, source: str | None = None):
    result = FitResult(ID)
    frame = frame[frame["calibration"] == ID] if len(frame) else frame
    for dtype, g in frame.groupby("dtype"):
        name = param_name(dtype)
        use, left, flags, diag = large_k_regime(g)
        if len(use) < 3:
            result.failures[name] = (f"{len(use)} point(s) in the large-K regime from K = {FIT_K_MIN}; a line "
                                     "needs at least 3")
            continue
        try:
            f = fit_timed(use, flops(use), robust=robust)
        except ValueError as exc:
            result.failures[name] = str(exc)
            continue
        f.diagnostics.update(diag)
        f.left_out = left
        result.models[name] = f
        rec = f.rate_record(1e12, "TFLOP/s", source=source, extra_flags=flags)
        lo, hi = diag["fit_k_range"]
        rec["method"] += f"; the regime large problems use: K {lo:.0f} to {hi:.0f}, settled points"
        result.records[name] = rec
    return result


def figures(frame, result, *, title) -> dict:
    figs = line_figures(result, title, {param_name(d): ("TFLOP", 1e12) for d in DTYPES})
    for d in DTYPES:
        f = result.models.get(param_name(d))
        left = getattr(f, "left_out", None)
        fig = figs.get(f"line-{param_name(d).replace('.', '_')}")
        if fig is None or left is None or not len(left):
            continue
        ax = fig.axes[0]
        ax.plot(flops(left) / 1e12, left["time_us"], "x", ms=6, color="C3",
                label="not fitted (other regime, K < %d, or unsettled)" % FIT_K_MIN)
        ax.legend(fontsize=8)
    return figs


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
    too_slow, remember = capped_guard(b, dtype_name, m, n, k)
    kept = measure_unthrottled(b, launch, rule, {"library": "cuBLAS via cupy.matmul", "dtype": dtype_name},
                               too_slow=too_slow)
    remember(kept)
    return kept


def capped_guard(b, dtype_name: str, m: int, n: int, k: int):
    """``too_slow(measurement)`` for a point of the line (type, M, N) at this K: a reason where it
    runs slower per flop than a point of smaller K measured before it on ``b`` (the plan goes up in
    K) by RETRY_SLOWER_FRACTION, since it then ran capped; and ``remember(kept)``, which records the
    kept point's rate for the points after it. From FIT_K_MIN on only; per backend: one run, one GPU."""
    fastest = b.__dict__.setdefault("_matmul_fastest", {})
    line, work = (dtype_name, m, n), 2.0 * m * n * k
    floor = fastest.get(line) if k >= FIT_K_MIN else None

    def too_slow(meas):
        rate = work / meas.median_us * 1e-6
        if floor and rate < (1 - RETRY_SLOWER_FRACTION) * floor:
            return f"{rate:.0f} TFLOP/s, {1 - rate / floor:.1%} below a point of smaller K: capped"
        return None

    def remember(kept):
        if k >= FIT_K_MIN and unsettled(kept) is None and too_slow(kept) is None:
            fastest[line] = max(fastest.get(line, 0.0), work / kept.median_us * 1e-6)

    return too_slow, remember


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


def measure_unthrottled(b, launch, rule, perf: dict, too_slow=None):
    """Time ``launch`` after an idle pause; while the point looks throttled (or ``too_slow(m)``
    gives a reason), try again after a longer pause, up to THROTTLE_RETRIES times, and keep the
    fastest attempt. The pause and the attempt are bookkeeping, kept in the protocol beside the
    perf-config, not in it."""
    def why(m):
        return unsettled(m) or (too_slow(m) if too_slow is not None else None)

    attempts = []
    for attempt in range(1 + THROTTLE_RETRIES):
        cooldown_s = COOLDOWN_S if attempt == 0 else RETRY_COOLDOWN_S
        b.stream.synchronize()
        time.sleep(cooldown_s)
        m = b.time_launches(launch, rule=rule, perf_config=dict(perf))
        m.protocol.update(cooldown_s=cooldown_s, attempt=attempt + 1)
        attempts.append(m)
        if why(m) is None:
            break
    kept = attempts[-1] if why(attempts[-1]) is None else min(attempts, key=lambda m: m.median_us)
    kept.candidates = [m for m in attempts if m is not kept]
    for m in kept.candidates:
        m.protocol.update(role="set_aside", set_aside_because=why(m))
    return kept
