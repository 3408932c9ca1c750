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

- TF32 has two cuBLAS regimes along K: K ≤ 4096 about 340–355 TFLOP/s (even the fastest samples),
  K ≥ 5120 about 420–435. One line through both missed by 7.8% (residuals 127–155× the noise,
  CI ±8–14%). The fit finds the regime change as a jump of more than REGIME_JUMP in the achieved
  rate between neighbouring settled points, fits the large-K regime only, and says where the
  change lies (``diagnostics.regime_boundary_k``: the last K below it and the first K of it) and
  the achieved rate below it (``diagnostics.small_k_tflops``): a heuristic with K below the
  boundary gets that, not the parameter.
- fp16 and bf16 have one regime, but at K = 1024 and 1536 the points sit 0.4–0.7% off the line
  the larger K follow (a lack-of-fit flag, 4.7–6.3× the noise): the fit starts at K = 2048, where
  the line misses by at most 0.3–0.5%. What is left is the same at every run and host (K = 3072
  +0.25%, 2048 −0.18%): a property of each K's kernel, which the CI, taken from the residuals,
  carries.

The power cap sets how a point is timed. Sustained TF32 at K ≥ 5120 draws an H200 into its power
cap after 24–51 ms of back-to-back products (median 35 ms, 10–20 launches at K = 8192; 71 of the 100
recorded points of eight suites, 2026-12-01), often with no clock drop NVML sees: the samples step
from 422 to 410, 395, 380 TFLOP/s within the point. Points of 20–65 samples (the suite's stopping
rule; the first sample of each batch times the host's launch after a synchronize, so 20 were
needed) mixed the two states: a third of the TF32 points never settled, retries after a 1 s pause
did no better, and the slope over the few settled ones came out ±1.9–2.6%. A point is therefore one
short burst (``time_back_to_back``): WARMUP launches and SAMPLES timed ones enqueued without a
synchronize between them, 18 ms at TF32 K = 8192, before the cap can bite. Its median's CI (with 5
samples, half its range) is its settling test: within the suite's precision it settled; a burst the
cap reached mid-way did not (``stop_reason`` "budget": the burst is its budget) and is measured
again. Timed so (the recorded first attempts' back-to-back samples from the third launch of a batch
on stand in for it), the recorded points settled but two (TF32 K = 8192 capped at its 10th launch,
after the burst would have ended; one slow sample at TF32 K = 4096, which a retry measures again),
and scattered about their lines by 0.05–0.18% (TF32) and 0.08–0.31% (fp16, bf16).

The slope's CI with an intercept is set by the lever arm, the number of points and their scatter.
TF32's regime spans only K = 5120–8192 (a lever arm of 1.6×; fp16's is 4×): over its six or seven
recorded points the short bursts gave ±0.35–1.36%, so the plan measures it every 128 of K (25
points) in both suites; each recorded run's own scatter planted over that grid gives a median of
±0.14–0.56% and a 95th percentile of at most ±0.70%. fp16 and bf16 take K = 2048–8192 every 1024 in
both suites (7 points; 1024 and 1536 before them in the full suite, outside the fit): over these the
recorded full suites gave ±0.18–0.55%, and each K's own offset (the same at every run and host: K =
3072 +0.24%, 2048 −0.17%, 8192 −0.13%) with the run-to-run scatter about it (0.07–0.09%) gives a
median of ±0.38–0.43% with no lack-of-fit flag; denser K would add chances of one K missing by over
0.5% and flagging the line. K stops at 8192: at larger K one TF32 launch is most of the burst the cap
allows.

Every point starts after an idle pause of IDLE_PER_BUSY times the GPU time of the burst before it
(a 20% duty cycle; MIN_PAUSE_S to COOLDOWN_S; COOLDOWN_S before the first), and the points of each
line are measured alternately from its two ends (``measure_order``), so that any drift of the GPU's
state over a sweep scatters about the line instead of tilting it. The measure phase is then about
5 s in the quick suite (40 points, 0.5 s of it products, 2.4 s pauses) and in the full one (47),
predicted from the recorded points' times; with the suite's rule it took 8.5–14.3 and 21.6–23.4 s.
Those counts are one pass: the TF32 repeats below add 25 points (65 and 72) and about 2.5 s.

The TF32 line starts slow (nine H200 suites of session 3 on four hosts, 2026-12-02, after the fp16
and bf16 lines): in 7 of 9 runs its first 3–13 points of K ≥ 5120 (0.3–1.3 s of the line) ran
0.2–0.8% slower than the later ones, and the later ones at their rate, often from one point to the
next, with NVML's SM clock at 1965–1980 MHz in both states; a retry's 0.5 s pause ended it twice and
the points after it ran up to 0.4% fast. Measured from both ends, the slow points were the line's
ends: a U of the residuals (+0.2% at both ends, −0.1% between, the mean over the nine) that flagged 3
of 9 lines (lack of fit 4.7–6.5×, runs test p = 3–6e-4) and set the full suites' rate 0.6–1.1% low.
fp16 and bf16 show no such start (their residuals are per-K offsets, the same in every run; the one
fp16 lack-of-fit flag, c2 quick, is three points ±0.15–0.18% off those offsets, of both signs).
The dense TF32 points are therefore measured again after the line (``"repeat": 1``) and the fit
takes the repeats (``resolve_repeats``; the record's ``diagnostics.first_pass_slower_pct`` says how
much slower the first measurements ran). Repeating the first 13 (session 4's second H200 call,
2026-12-02, four suites) left one line flagged: in quick #3 the whole first pass ran slow (its 13
repeats 0.24–0.55% faster than their first measurements), so the 12 points measured once sat 0.2%
above the line through the repeats (runs test p = 9e-6); in quick #2 points 14–18 of the first pass
ran 0.3% slow. The slow state can outlast the first pass (2.5 s), so all 25 are measured again
(about 2.5 s at 0.1 s a point): the fit's points all come from the second pass.
"""

from __future__ import annotations

import os
import time

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import FitResult, fit_timed, refuse_unusable_points
from ._base import Param, line_figures

np = lazy("numpy")
pd = lazy("pandas")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "Dense matmul throughput (cuBLAS)"
# fit, plot and write after measuring: 5.7 s (three quick suites on an H200, 2026-12-01); see _base.TAIL_S
TAIL_S = 5.7
INTRO = """Products through `cupy.matmul` (cuBLAS) on random inputs, for fp16, bf16 (where CuPy holds
bfloat16 arrays) and tf32 (float32 with CuPy's TF32 mode): an 8192 × 8192 output with the reduction
depth K up to 8192, so that cuBLAS's grid of output tiles is the same at every point;
`t = t0 + 2·M·N·K / rate` over the regime large problems use gives `compute.<type>.tensor_tflops`.
cuBLAS changes kernels along K: on an H200 TF32 runs at about 350 TFLOP/s for K ≤ 4096 and about
420–435 from K = 5120 on. The fit finds such a change as a jump in the achieved rate between neighbouring
points and fits the last regime only, from K = 2048 on (fp16 and bf16 at K ≤ 1536 lie 0.4–0.7% off
the line the larger K follow); the points it leaves out are drawn as crosses. TF32's regime spans only
K = 5120–8192, so it is measured every 128 of K there (25 points), fp16 and bf16 every 1024 from 2048.

Sustained tensor-core work reaches the H200's power cap after 24–51 ms (median 35), and the samples of a point then
step down by 3–10%. Each point is therefore one short burst timed before the cap can bite: 2 warm-up and
5 timed launches enqueued back to back (18 ms at TF32 K = 8192), after an idle pause of 4× the previous
point's GPU time (at least 0.05 s), the points of a line taken alternately from its two ends so that a
drift of the GPU's state over the sweep scatters about the line instead of tilting it. TF32's line starts
slow on an H200 (its first points 0.2–0.8% slower than the rest in 8 of 13 suites, 2026-12-02, for up
to the whole line): all its points of K ≥ 5120 are measured again after the line, and the fit takes those. A burst whose
samples did not settle (the cap reached it mid-way: `stop_reason` "budget"), whose clock dropped, or
that runs slower per flop than a point of smaller K by over 3% is measured again after a 0.5 s pause,
up to twice, and the fastest attempt is kept (the others stay in the results store). A point that never
settled is left out of the fit; only where fewer than three settled points remain is it used, and the
record says so. A settled point that still lies above the line by over 1.5% (and by over 4 of its own
standard errors) ran capped and is left out too (`diagnostics.capped_k`)."""
READING = """The rate is cuBLAS's on a large, tile-aligned output before the power cap, in the regime large
problems use; a heuristic choosing between a library call and a fused kernel compares its own achieved
rate against this one. Below the regime change (`diagnostics.regime_boundary_k`: the last K below it and
the first K of it, on an H200 TF32 between 4096 and 5120) cuBLAS achieves less: the record's
`diagnostics.small_k_tflops` (TF32 on an H200: about 350 TFLOP/s, 0.81 of the parameter). A product long
enough to reach the power cap (tens of milliseconds of back-to-back tensor-core work) runs 5–10% slower
than this rate once the cap bites."""

# CuPy reads its TF32 switch when it is imported: the notebook sets it first.
ENVIRONMENT = {"CUPY_TF32": "1"}
DTYPES = ("fp16", "bf16", "tf32")
# The simulated device shares the fit's model: TF32 below the regime's K runs at a fraction of the
# parameter's rate (H200, 2026-12-01: 345 of 414 TFLOP/s below K = 5120); t0 as the H200's fits (17-22 us).
# It can plant the slow start of the TF32 line (REMEASURED; off by default): the first
# tf32_early_points TF32 points of one measure call (the sim times a call's points in the order
# given: in tests the whole plan) take tf32_early_slow_fraction longer (H200, 2026-12-02: 0.2-0.8%
# over 3-13 points).
SIM_DEFAULTS = {"sim.matmul_throughput.fixed_us": 20.0,
                "sim.matmul_throughput.tf32_regime_k": 5120.0,
                "sim.matmul_throughput.tf32_small_k_ratio": 0.84,
                "sim.matmul_throughput.tf32_early_slow_fraction": 0.0,
                "sim.matmul_throughput.tf32_early_points": 0.0}
MN = 8192
# K stops at 8192: at larger K one TF32 launch is most of the burst the power cap allows (a point of
# the full suite up to K = 16384, 2026-11-29, had fp16 fall to 680 TFLOP/s with a ±5% CI).
# TF32's large-K regime (5120 on, on an H200) is a lever arm of 1.6x: measured every 128 of K (25
# points) in both suites; 4096 brackets the regime change, and the full suite adds 1024-3072 for the
# small-K rate. fp16 and bf16 every 1024 from K = 2048, where the fit starts (7 points); the full suite
# adds 1024 and 1536, which show how the points below FIT_K_MIN leave the line.
_TF32_LARGE_K = list(range(5120, 8192 + 1, 128))
SUITES = {"quick": {"fp16": [2048, 3072, 4096, 5120, 6144, 7168, 8192],
                    "bf16": [2048, 3072, 4096, 5120, 6144, 7168, 8192],
                    "tf32": [4096] + _TF32_LARGE_K},
          "full": {"fp16": [1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192],
                   "bf16": [1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192],
                   "tf32": [1024, 2048, 3072, 4096] + _TF32_LARGE_K}}
# The fit: the line over the last regime along K, from FIT_K_MIN on. A regime change is a rise of the
# achieved rate by more than REGIME_JUMP between neighbouring settled points (TF32 on an H200: +18%;
# fp16 and bf16 rise by at most 4% from one K to the next, the fixed cost amortized).
FIT_K_MIN = 2048
REGIME_JUMP = 0.08
# Points that settled after the power cap bit (every sample capped) ran 4-9% slower than the line
# through the uncapped points (TF32 376-392 against 406-413 TFLOP/s, three quick suites on an H200,
# 2026-12-01) and made the CI ±25-33%; uncapped points scatter about it by at most 0.5%.
CAPPED_FRACTION = 0.015
# ... and by more than this many of its own standard errors: the capped H200 points lay 4-9% above the
# line through the others with standard errors of 0.07-0.9%; on the noisy simulated GPU (4% a sample)
# points 1.5% above the line by chance were left out 1.8 times a fit of 25 points without this, and
# the rate's CI covered 84%.
CAPPED_Z = 4.0
# Measured again (after RETRY_COOLDOWN_S) when slower per flop than a point of smaller K by this much.
RETRY_SLOWER_FRACTION = 0.03
MIN_SETTLED = 3
# The GPU's state at the start of the TF32 line: its first points ran 0.2-0.8% slower than the rest
# of it, and then, often within one point, at the rate of the later ones (nine H200 suites on four
# hosts, 2026-12-02: in 7 of 9 runs, for 0.3-1.3 s of the line, its first 3-13 points of K >= 5120;
# the later points scatter by 0.05-0.18%). NVML's SM clock read 1965-1980 MHz in both states. The
# line is measured from its two ends alternately, so the slow first points are its ends: a U of the
# residuals that the lack-of-fit and runs tests flagged (3 of 9 runs) and a tilt of up to 0.3%. The
# dense grid is therefore measured again after the line and the fit takes the second measurement:
# every fitted point in the state the line ends in. Repeating only the first 13 (the longest slow
# stretch of session 3) left a line flagged in session 4 (quick #3: the whole first pass, 25 points
# and 2.5 s, ran 0.2-0.55% slow), so all of it is. fp16 and
# bf16, measured before TF32, showed no such start (their residuals are the same per-K offsets in
# every run).
REMEASURED = {"tf32": frozenset(_TF32_LARGE_K)}


def param_name(dtype: str) -> str:
    return f"compute.{dtype}.tensor_tflops"


PARAMETERS = tuple(Param(param_name(d), "TFLOP/s", f"dense {d} matmul through cuBLAS, 2MNK flops over time, "
                         "in the regime along K that large problems use") for d in DTYPES)


def plan(suite: str, *, memory_bytes: int = 2**34, dtypes=DTYPES, **_) -> list[dict]:
    """The points of each type's line in the order they are measured (``measure_order``), then, for
    the types in REMEASURED, the points of its dense grid measured again (in the same order) at the
    line's end (``"repeat": 1``): the fit takes those (``resolve_repeats``)."""
    out = []
    for d in dtypes:
        line = [{"calibration": ID, "dtype": d, "m": MN, "n": MN, "k": k} for k in measure_order(SUITES[suite][d])
                if footprint_bytes({"dtype": d, "m": MN, "n": MN, "k": k}) < memory_bytes / 4]
        again = [c for c in line if c["k"] in REMEASURED.get(d, ())]
        out += line + [{**c, "repeat": 1} for c in again]
    return out


def measure_order(ks) -> list:
    """``ks`` taken alternately from the two ends of their sorted order (smallest, largest, second
    smallest, ...): a drift of the GPU's state over a line's sweep (its temperature, a boost bin)
    then scatters about the line instead of tilting it, as it did when K only went up."""
    ks = sorted(ks)
    out = []
    while ks:
        out.append(ks.pop(0))
        if ks:
            out.append(ks.pop())
    return out


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
    t_us = truth["sim.matmul_throughput.fixed_us"] + flops(frame) / rate * 1e6
    early = (dtype == "tf32") & (np.cumsum(dtype == "tf32") <= truth["sim.matmul_throughput.tf32_early_points"])
    return np.where(early, t_us * (1 + truth["sim.matmul_throughput.tf32_early_slow_fraction"]), t_us)


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
    # while it misses by more than CAPPED_FRACTION, lies above the line through the others by more
    # than CAPPED_Z of its own standard errors (noise alone does not make a point capped: a one-sided
    # rule on noise biases the line), and more than MIN_SETTLED points remain.
    capped = np.zeros(len(k), dtype=bool)
    t = g["time_us"].to_numpy(dtype=float)
    se = g["se_us"].to_numpy(dtype=float) if "se_us" in g else np.zeros(len(k))
    se = np.where(np.isfinite(se), se, np.inf)
    x = flops(g)
    while (use & ~capped).sum() > MIN_SETTLED:
        keep = use & ~capped
        slope, icpt = np.polyfit(x[keep], t[keep], 1)
        above = np.where(keep, t / (icpt + slope * x) - 1, -np.inf)
        worst = int(np.argmax(above))
        if above[worst] <= CAPPED_FRACTION:
            break
        others = keep.copy()
        others[worst] = False
        slope, icpt = np.polyfit(x[others], t[others], 1)
        if t[worst] - (icpt + slope * x[worst]) <= CAPPED_Z * se[worst]:
            break
        capped[worst] = True
    if capped.any():
        use = use & ~capped
        diag["capped_k"] = [float(x) for x in k[capped]]
    diag["left_out_k"] = [float(x) for x in k[~use]]
    diag["unsettled_k"] = [float(x) for x in k[~settled]]
    diag["fit_k_range"] = [float(k[use].min()), float(k[use].max())] if use.any() else None
    return g[use], g[~use], flags, diag


def resolve_repeats(g):
    """One type's sweep with one row per K: where K was measured again at the line's end (column
    ``repeat``, see REMEASURED), the repeat, unless it never settled and the first did; the rows
    not taken, and a diagnostic: the K measured again and how much slower the first measurement
    of each ran than the taken one, in percent (the drift of the GPU's state the repeat removed)."""
    if "repeat" not in g or not (g["repeat"].fillna(0) > 0).any():
        return g, g.iloc[:0], {}
    g = g.assign(_again=(g["repeat"].fillna(0) > 0).astype(int))
    settled = (g["stop_reason"] != "budget") if "stop_reason" in g else True
    g = g.assign(_settled=settled)
    g = g.reset_index(drop=True)
    has_again = g["k"].isin(g.loc[g["_again"] == 1, "k"])
    order = g[has_again].sort_values(["k", "_settled", "_again"], kind="stable")
    taken = pd.concat([g[~has_again], order.groupby("k", sort=False).tail(1)])
    dropped = g.loc[~g.index.isin(taken.index)]
    pairs = g.groupby("k").filter(lambda h: h["_again"].nunique() == 2)
    first = pairs[pairs["_again"] == 0].groupby("k")["time_us"].min()
    again = pairs[pairs["_again"] == 1].groupby("k")["time_us"].min()
    slower = (first / again - 1) * 100
    diag = {"remeasured_k": [float(k) for k in slower.index],
            "first_pass_slower_pct": [round(float(v), 3) for v in slower]}
    cols = [c for c in g.columns if c not in ("_again", "_settled")]
    return taken[cols].sort_values("k"), dropped[cols], diag


def fit(frame, *, robust: bool = False, source: str | None = None):
    result = FitResult(ID)
    frame = frame[frame["calibration"] == ID] if len(frame) else frame
    for dtype, g in frame.groupby("dtype"):
        name = param_name(dtype)
        # every point of the type, before the regime is sought: an infinite time or one of zero had
        # been read as a rate of 0 or of infinity, and the type failed for "1 point(s) in the large-K
        # regime", naming no point
        points = {"k": g["k"], "flops": flops(g), "time_us": g["time_us"], "n_samples": g["n_samples"]}
        try:
            refuse_unusable_points(points, positive=tuple(points), fitting=name)
        except ValueError as exc:
            result.failures[name] = str(exc)
            continue
        g, superseded, rdiag = resolve_repeats(g)
        use, left, flags, diag = large_k_regime(g)
        diag.update(rdiag)
        left = left if superseded.empty else pd.concat([left, superseded])
        if len(use) < 3:
            result.failures[name] = (f"{len(use)} point(s) in the large-K regime from K = {FIT_K_MIN}; a line "
                                     "needs at least 3")
            continue
        try:
            f = fit_timed(use, flops(use), robust=robust, fitting=name)
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
                label="not fitted (other regime, K < %d, unsettled, or measured again)" % FIT_K_MIN)
        ax.legend(fontsize=8)
    return figs


def prepare(b, configs):
    """TF32 is CuPy's mode switch, read when CuPy is imported: say so before any point is timed."""
    if any(c["dtype"] == "tf32" for c in configs) and os.environ.get("CUPY_TF32") != "1":
        print("calib: TF32 points need CUPY_TF32=1 set before CuPy is imported; they will be reported unsupported")


# Sustained tensor-core matmul brings an H200 to its power cap, and the clocks then drop: fp16 fell
# from 760 to 670 TFLOP/s at K >= 10240 in a back-to-back sweep (2026-11-29), and TF32 at K >= 5120
# stepped from 422 to 410-380 TFLOP/s after 24-51 ms of back-to-back launches (median 35 ms; 71 of
# 100 recorded points of 20-65 samples, eight suites on two hosts, 2026-12-01). A point is therefore
# one burst: WARMUP launches and SAMPLES timed ones, enqueued without a synchronize between them
# (``time_back_to_back``), 7 launches or 18 ms at TF32 K = 8192. Two warm-ups because after an idle
# GPU the first launch times the host's enqueue and the second ran 0.1-1.4% fast at K <= 2048; the
# third on matched the rest of its batch (within 0.1%).
WARMUP = 2
SAMPLES = 5
# Each burst starts after an idle pause of IDLE_PER_BUSY times the GPU time of the burst before it
# (a 20% duty cycle), at least MIN_PAUSE_S, COOLDOWN_S before the first point of a process and at
# most that: the power limiter reacts within milliseconds (within a point the rate came back to 421
# after a few-ms gap between batches, 2026-12-01), so what must decay is the previous burst's state,
# not a fixed time. With points of 20+ samples a fixed 0.25 s was the pause (and most of the time).
COOLDOWN_S = 0.25
IDLE_PER_BUSY = 4.0
MIN_PAUSE_S = 0.05
# Inside a suite the pause was not always enough: points of the quick suite ran with the SM clock
# at 1590-1860 MHz instead of 1980, 7-20% slow, and made the TF32 CI ±22% (H200, 2026-11-29). The
# same points were the ones whose samples never settled (the stopping rule ran out of budget),
# also where NVML's two clock readings missed the drop. Such a point is measured again after a
# longer pause, and the fastest attempt is kept: the parameter is the unthrottled rate. Attempts
# set aside stay in the results store (role "set_aside"); a point that never settles stays marked.
# The retry's pause: the recorded first attempts after 0.25 s all started uncapped (1 s pauses were
# 0.1-0.3% faster still, not more often settled), so twice that.
RETRY_COOLDOWN_S = 0.5
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

    rule = point_rule(b.rule)
    too_slow, remember = capped_guard(b, dtype_name, m, n, k)
    kept = measure_unthrottled(b, launch, rule, {"library": "cuBLAS via cupy.matmul", "dtype": dtype_name},
                               too_slow=too_slow, timer=lambda launch, *, rule, perf_config:
                               time_back_to_back(b, launch, rule=rule, perf_config=perf_config))
    remember(kept)
    return kept


def point_rule(rule):
    """The stopping rule of one point: one batch of SAMPLES, settled when its median's CI (with 5
    samples, half its range) is within the suite's precision; otherwise its budget, the burst, is
    spent (``stop_reason`` "budget", as for a point of the suite's rule that never settled)."""
    from ..timing import StoppingRule

    return StoppingRule(min_samples=SAMPLES, max_samples=SAMPLES + 1, batch=SAMPLES,
                        rel_precision=rule.rel_precision, budget_s=0.0)


def time_back_to_back(b, launch, *, rule, perf_config=None):
    """One burst on ``b.stream``: WARMUP launches, then ``rule.batch`` launches each between CUDA
    events, all enqueued before the one synchronize (the host enqueues a product in tens of
    microseconds, a product takes 0.2 ms or more: the GPU never waits for the host between them).
    The clocks are read while the burst runs; ``rule.stop_reason`` says whether it settled."""
    from ..nvml import merge_readings
    from ..timing import Measurement

    cp = b.cp
    n = rule.batch
    starts = [cp.cuda.Event() for _ in range(n)]
    stops = [cp.cuda.Event() for _ in range(n)]
    for i in range(WARMUP):
        launch(i)
    for j in range(n):
        starts[j].record(b.stream)
        launch(WARMUP + j)
        stops[j].record(b.stream)
    reading = b.clocks.read()  # while the burst runs
    stops[-1].synchronize()
    samples = np.asarray([cp.cuda.get_elapsed_time(a, z) * 1e3 for a, z in zip(starts, stops)])
    protocol = {"timer": "cuda events per launch, one burst enqueued back to back", "warmup_launches": WARMUP,
                "rule": rule.to_dict(), "perf_config": perf_config or {}}
    return Measurement(samples, stop_reason=rule.stop_reason(samples), protocol=protocol,
                       clocks=merge_readings([reading]))


def capped_guard(b, dtype_name: str, m: int, n: int, k: int):
    """``too_slow(measurement)`` for a point of the line (type, M, N) at this K: a reason where it
    runs slower per flop than a point of smaller K measured before it on ``b`` by
    RETRY_SLOWER_FRACTION (the rate only rises with K within a regime), since it then ran capped;
    and ``remember(kept)``, which records the kept point's rate for the points after it. From
    FIT_K_MIN on only; per backend: one run, one GPU."""
    rates = b.__dict__.setdefault("_matmul_fastest", {}).setdefault((dtype_name, m, n), {})
    work = 2.0 * m * n * k
    below = [r for kk, r in rates.items() if kk < k]
    floor = max(below) if k >= FIT_K_MIN and below else None

    def too_slow(meas):
        rate = work / meas.median_us * 1e-6
        if floor and rate < (1 - RETRY_SLOWER_FRACTION) * floor:
            return f"{rate:.0f} TFLOP/s, {1 - rate / floor:.1%} below a point of smaller K: capped"
        return None

    def remember(kept):
        if k >= FIT_K_MIN and unsettled(kept) is None and too_slow(kept) is None:
            rates[k] = max(rates.get(k, 0.0), work / kept.median_us * 1e-6)

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


def pause_s(b) -> float:
    """The idle pause before a point's first attempt: IDLE_PER_BUSY times the GPU time of the burst
    before it on ``b`` (MIN_PAUSE_S to COOLDOWN_S), COOLDOWN_S where there was none."""
    busy = b.__dict__.get("_matmul_busy_s")
    return COOLDOWN_S if busy is None else min(COOLDOWN_S, max(MIN_PAUSE_S, IDLE_PER_BUSY * busy))


def busy_s(m) -> float:
    """The GPU time of one attempt: its timed launches and its warm-ups."""
    return (m.n + int(m.protocol.get("warmup_launches", 0))) * m.median_us * 1e-6


def measure_unthrottled(b, launch, rule, perf: dict, too_slow=None, timer=None):
    """Time ``launch`` (through ``timer``, by default ``b.time_launches``) after an idle pause
    (``pause_s``); while the point looks throttled (or ``too_slow(m)`` gives a reason), try again
    after RETRY_COOLDOWN_S, up to THROTTLE_RETRIES times, and keep the fastest attempt. The pause
    and the attempt are bookkeeping, kept in the protocol beside the perf-config, not in it."""
    def why(m):
        return unsettled(m) or (too_slow(m) if too_slow is not None else None)

    timer = timer or b.time_launches
    attempts = []
    for attempt in range(1 + THROTTLE_RETRIES):
        cooldown_s = pause_s(b) if attempt == 0 else RETRY_COOLDOWN_S
        b.stream.synchronize()
        time.sleep(cooldown_s)
        m = timer(launch, rule=rule, perf_config=dict(perf))
        m.protocol.update(cooldown_s=cooldown_s, attempt=attempt + 1)
        b._matmul_busy_s = busy_s(m)
        attempts.append(m)
        if why(m) is None:
            break
    kept = attempts[-1] if why(attempts[-1]) is None else min(attempts, key=lambda m: m.median_us)
    kept.candidates = [m for m in attempts if m is not kept]
    for m in kept.candidates:
        m.protocol.update(role="set_aside", set_aside_because=why(m))
    return kept
