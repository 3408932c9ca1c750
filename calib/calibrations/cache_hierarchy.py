"""The L2: its read bandwidth and its effective capacity, from one working-set sweep.

A kernel reads a buffer of W bytes over and over (``passes`` times, through L2 but not L1), for W
on a log-spaced grid from L2/4 to 8×L2, dense across the ramp. While W fits, every pass is served
by L2; well past it, by DRAM; on Hopper the change is a ramp, not a step. The time model is

    t = t0 + bytes * c(log2 W) + L(log2 W)

- ``c`` is the steady state's cost per byte: c_l2 below x1, c_dram above x2, linear in log2 W
  between. ``memory.l2.capacity_bytes`` is x1 (the largest working set fully served by L2),
  ``memory.l2.capacity_bytes.ramp_end`` is x2 (past it DRAM serves the reads).
- ``L`` is a cost per launch that a working set in the ramp pays on top: zero up to x1, rising to a
  peak ``transient_us`` at x1 + 3·``transient_width`` and fading past it,
  L = A·(u/3)³·e^(3-u) with u = (log2 W - x1)/width. The launches alternate between 4 GiB and
  1 GiB read, so that this cost per launch and the cost per byte are told apart.

Why the per-launch term (H200, 2026-12-01, calls 3 and 5 on two hosts: six quick and two full runs of
the 96/160-point grids with 2 GiB and 1 GiB launches alternating): the hinge alone left residuals
that alternated with the bytes per launch. In 48–90 MB the 1 GiB points sat 6.6–7.5% above the 2 GiB
points relative to the fitted line (single points up to 12%), about 50× their own noise. Pairs of
neighbours solve to a cost per launch of 20–55 µs (2–4 DRAM passes over W) and a steady state that
is linear in log W from about 44 to 190 MB; without the term the mixed launches bent the fitted line
near 121 MB, which is where ``ramp_end`` was reported (±5.3–8.3%). Fitted with the term, all eight
runs agree: start 43.3–44.2 MB, end 192.6–195.3 MB, a cost per launch of 30–31 µs peaking near
92 MB, width 0.35–0.37 octaves; the alternation left is 2.7–3.7%.

The residuals that remain are scatter between working sets a few hundred kB apart (reproducible:
r = 0.98 between runs on the two hosts), largest where the ramp is steep. The fit's weights come from
a variance function, var = se² + (a·t)² + (b·∂t/∂log2 W)²: a relative floor (1.2–2% on the H200)
and a jitter of the working set (0.08–0.09 octaves), fitted by maximum likelihood to the residuals
of a first fit with equal relative weights; the weighted fit is then refitted from there, twice, and
its Wald CIs (scale re-estimated) are the records'. The recorded grids ended at 4×L2 with two to five
points past 2.5×L2, where this model puts the ramp's end: refitted, they give the end ±8.3–10.1%.
The plan puts the end inside a dense grid and measures the DRAM plateau to 8×L2: with the recorded
full run's model and scatter planted, 128 and 192 working sets give the end ±4.5% and ±3.7% (median
of 30 draws; 90th percentile ±5.0% and ±3.9%) and the start ±3.3% and ±2.7%. Each working-set point
takes one batch of ten samples: their own noise (0.1–0.3%) is a small part of that scatter.

``memory.l2.read_bandwidth_gbps`` comes from a second, short series at one working set well inside
L2 (a quarter of the reported size) with the bytes per launch varied from 0.25 to 4 GiB: a straight
line t = t0 + bytes/BW whose slope CI is inverted, as for DRAM. The hinge's own plateau estimate
was ±5–10% wide on an H200 (2026-11-29): working sets a few MB apart differ by 1–2% in L2
bandwidth (address hashing over the two L2 halves), which the one-plateau model reads as noise.
"""

from __future__ import annotations

import math

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import FitResult, fit_timed, make_record, weighted_r2
from ..timing import StoppingRule
from ._base import Param, small_kernels

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "The L2: capacity and read bandwidth"
INTRO = """Reads one working set W over and over through L2 (not L1), for W on a log grid from L2/4 to 8×L2,
most of the points between 0.7× and 6× the reported size, and fits the times with two parts: a steady
state whose cost per byte is the L2's below the ramp's start, DRAM's past its end and linear in log W
between, and a cost per launch that working sets inside the ramp pay on top (on an H200 about 31 µs
at its peak near 92 MB, 1.5× the L2 size: a launch of a few passes over such a set runs slower per
byte than a long one, which made the ramp look as if it ended at 121 MB when launches of 1 and 2 GiB
were fitted with one line). The launches alternate between 4 GiB and 1 GiB read, which tells the two
apart. `memory.l2.capacity_bytes` is where the ramp starts (the largest working set fully
served by L2) and `memory.l2.capacity_bytes.ramp_end` where the steady state reaches DRAM, with Wald
CIs from a weighted fit whose weights follow the scatter between neighbouring working sets (working
sets a few hundred kB apart differ by several % inside the ramp, reproducibly: a jitter of the working
set of about 0.09 octaves on an H200, fitted with the rest). A second series at one working set well
inside L2 varies the bytes per launch; its line `t = t0 + bytes / bandwidth` gives
`memory.l2.read_bandwidth_gbps`."""
READING = """A heuristic that tiles for L2 keeps its reused working set under `memory.l2.capacity_bytes`, not
under the L2 size the device reports: past the ramp's start some of the data comes from DRAM
again, a share that grows linearly in log W up to `memory.l2.capacity_bytes.ramp_end` in a kernel
that re-reads its set many times. A launch that re-reads a set inside the ramp only a few times pays
the cost per launch on top (`transient_us` at `transient_peak_bytes` in the diagnostics). The DRAM
plateau the fit finds is in the diagnostics too (`dram_plateau_gbps`), a cross-check on
`memory.dram.read_bandwidth_gbps`."""
THREADS = 256
CAPACITY = "memory.l2.capacity_bytes"
RAMP_END = "memory.l2.capacity_bytes.ramp_end"
READ_BW = "memory.l2.read_bandwidth_gbps"
DRAM_READ = "memory.dram.read_bandwidth_gbps"
PARAMETERS = (Param("memory.l2.read_bandwidth_gbps", "GB/s", "L2-resident read, whole device"),
              Param("memory.l2.capacity_bytes", "bytes", "largest working set fully served by L2 (the ramp's start)"),
              Param("memory.l2.capacity_bytes.ramp_end", "bytes", "working set past which DRAM serves the reads"))
TRANSIENT_PASSES = "sim.cache_hierarchy.transient_passes"
TRANSIENT_WIDTH = "sim.cache_hierarchy.transient_width"
# The simulated device's cost per launch: at its peak, this many DRAM passes over a capacity-sized set
# (3.3 on the H200, 2026-12-01: 31 us at 44 MB and 4.7 TB/s), over this width in octaves (0.36).
SIM_DEFAULTS = {"sim.cache_hierarchy.fixed_us": 5.0, TRANSIENT_PASSES: 3.3, TRANSIENT_WIDTH: 0.36}
# Bytes read per launch, alternating: a long launch keeps the cost per launch a small share of the time,
# and a ratio of four between the two tells it from the cost per byte (2 and 1 GiB: ±6.1% on the ramp's
# end where 4 and 1 GiB give ±5.3%, 96 working sets with the H200's scatter planted).
BYTES_PER_LAUNCH = (4 * 2**30, 2**30)
# Working sets per suite (H200, 2026-12-01: the recorded scatter and model planted over these grids give
# the ramp's end ±4.5% and ±3.7%, its start ±3.3% and ±2.7%). About 6 ms of GPU time each.
SUITES = {"quick": 128, "full": 192}
GRID = (0.25, 8.0)       # the grid's ends, in units of the reported L2 size
DENSE = (0.7, 6.0)       # the dense part of the grid: the ramp (44 to 190 MB on an H200) and both sides
DENSE_SHARE = 0.85       # the share of the points there
# Samples per working-set point: their own noise (0.1-0.3%) is a small part of the scatter between
# neighbouring working sets (1-8%), so one batch of ten does; the rest of the time buys working sets.
WORKING_SET_SAMPLES = 10
# Bytes per launch of the bandwidth series (GiB), at working set L2/4.
BANDWIDTH_GIB = {"quick": (0.25, 0.5, 1, 1.5, 2, 3, 4), "full": (0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4)}
TRANSIENT_SHAPE = 3.0    # the cost per launch rises as u³ from the ramp's start, then fades as e^-u


def plan(suite: str, *, l2_bytes: int, **_) -> list[dict]:
    """Working sets from L2/4 to 8×L2, most of them between 0.7× and 6× the reported size, where the
    ramp and the DRAM plateau past it lie (an H200 reporting 60 MiB ramped from about 44 to 190 MB,
    2026-12-01); the bytes per launch alternate between 4 GiB and 1 GiB."""
    n = SUITES[suite]
    lo, hi = math.log2(GRID[0] * l2_bytes), math.log2(GRID[1] * l2_bytes)
    dense_lo, dense_hi = math.log2(DENSE[0] * l2_bytes), math.log2(DENSE[1] * l2_bytes)
    n_dense = int(n * DENSE_SHARE)
    grid = np.concatenate([np.linspace(lo, hi, n - n_dense), np.linspace(dense_lo, dense_hi, n_dense)])
    sizes = sorted({int(round(2**x / 4096)) * 4096 for x in grid})
    sweep = [{"calibration": ID, "series": "working_set", "working_set_bytes": w,
              "passes": max(1, int(round(BYTES_PER_LAUNCH[i % 2] / w)))}
             for i, w in enumerate(sizes)]
    w_bw = bandwidth_working_set(l2_bytes)
    line = [{"calibration": ID, "series": "bandwidth", "working_set_bytes": w_bw,
             "passes": max(1, int(round(gib * 2**30 / w_bw)))} for gib in BANDWIDTH_GIB[suite]]
    return sweep + line


def bandwidth_working_set(l2_bytes: int) -> int:
    return max(4096, int(l2_bytes / 4) // 4096 * 4096)


def footprint_bytes(config: dict) -> int:
    return int(config["working_set_bytes"])


def bytes_read(config_or_frame):
    return np.asarray(config_or_frame["working_set_bytes"], dtype=float) * np.asarray(config_or_frame["passes"],
                                                                                       dtype=float)


def dram_share(log2_w, x1, x2):
    """The steady state's share of the reads that DRAM serves: 0 up to x1, 1 from x2, linear in log2 W."""
    return np.clip((np.asarray(log2_w, dtype=float) - x1) / max(x2 - x1, 1e-9), 0.0, 1.0)


def cost_per_byte_us(log2_w, c_l2, c_dram, x1, x2):
    return c_l2 + (c_dram - c_l2) * dram_share(log2_w, x1, x2)


def transient_us(log2_w, x1, peak_us, width):
    """The cost per launch: 0 up to x1, ``peak_us`` at x1 + 3·width (octaves), fading past it."""
    u = np.maximum(np.asarray(log2_w, dtype=float) - x1, 0.0) / max(width, 1e-6)
    k = TRANSIENT_SHAPE
    return peak_us * (u / k) ** k * np.exp(k - u)


def default_truth(base: dict | None = None) -> dict:
    truth = {READ_BW: 9800.0, CAPACITY: 44e6, RAMP_END: 190e6, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    if truth[RAMP_END] <= truth[CAPACITY]:
        raise ValueError(f"{RAMP_END} must exceed {CAPACITY}")
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    x = np.log2(np.asarray(frame["working_set_bytes"], dtype=float))
    c_dram = 1 / (truth[DRAM_READ] * 1e3)
    x1 = math.log2(truth[CAPACITY])
    c = cost_per_byte_us(x, 1 / (truth[READ_BW] * 1e3), c_dram, x1, math.log2(truth[RAMP_END]))
    peak_us = truth[TRANSIENT_PASSES] * truth[CAPACITY] * c_dram
    return truth["sim.cache_hierarchy.fixed_us"] + bytes_read(frame) * c + transient_us(x, x1, peak_us,
                                                                                          truth[TRANSIENT_WIDTH])


class HingeFit:
    """The fitted ramp (the steady-state hinge and the cost per launch), its covariance, the variance
    function behind its weights, and what the plots and flags need."""

    names = ("t0_us", "c_l2", "c_dram", "x1", "span", "transient_us", "transient_width")

    def __init__(self, w, b, t, params, cov, dof, var, scatter, working_set):
        self.w, self.bytes, self.t_us = w, b, t
        self.params, self.cov, self.dof, self.var, self.scatter = params, cov, dof, var, scatter
        self.working_set = working_set
        self.se = np.sqrt(np.clip(np.diag(cov), 0, np.inf))
        self.fitted_us = _model((np.log2(w), b), *params)
        self.weights = 1.0 / var
        self.resid = (t - self.fitted_us) * np.sqrt(self.weights)
        self.flags: list[str] = []

    @property
    def x1(self) -> float:
        return float(self.params[3])

    @property
    def x2(self) -> float:
        return float(self.params[3] + self.params[4])

    def ci_log2(self, which: str):
        """95% CI of x1 or x2 (log2 bytes): x2 = x1 + span, its variance from both and their covariance."""
        from scipy import stats

        q = stats.t.ppf(0.975, self.dof)
        if which == "x1":
            v, var = self.x1, self.cov[3, 3]
        else:
            v, var = self.x2, self.cov[3, 3] + self.cov[4, 4] + 2 * self.cov[3, 4]
        s = math.sqrt(var) if np.isfinite(var) and var >= 0 else float("nan")
        return v - q * s, v + q * s

    def ci(self, i):
        from scipy import stats

        q = stats.t.ppf(0.975, self.dof)
        return self.params[i] - q * self.se[i], self.params[i] + q * self.se[i]

    def steady_us(self, w, b):
        """The time without the cost per launch (a launch long enough that it does not show)."""
        t0, c_l2, c_dram, x1, span = self.params[:5]
        return t0 + np.asarray(b, float) * cost_per_byte_us(np.log2(np.asarray(w, float)), c_l2, c_dram, x1, x1 + span)


def _model(xb, t0, c_l2, c_dram, x1, span, peak_us, width):
    x, b = xb
    return t0 + b * cost_per_byte_us(x, c_l2, c_dram, x1, x1 + span) + transient_us(x, x1, peak_us, width)


def _jacobian(xb, t0, c_l2, c_dram, x1, span, peak_us, width):
    """∂t/∂(t0, c_l2, c_dram, x1, span, peak_us, width) of :func:`_model`."""
    x, b = xb
    x, b = np.asarray(x, dtype=float), np.asarray(b, dtype=float)
    span, width, k = max(span, 1e-9), max(width, 1e-6), TRANSIENT_SHAPE
    m = dram_share(x, x1, x1 + span)
    inside = (m > 0) & (m < 1)
    u = np.maximum(x - x1, 0.0) / width
    g = (u / k) ** k * np.exp(k - u)
    dg = u ** (k - 1) / k**k * np.exp(k - u) * (k - u)  # dg/du
    gap = b * (c_dram - c_l2)
    return np.column_stack([np.ones_like(x), b * (1 - m), b * m,
                            np.where(inside, -gap / span, 0.0) - peak_us * dg / width,
                            np.where(inside, -gap * m / span, 0.0),
                            g, -peak_us * dg * u / width])


def _weighted_fits(xb, t, var, starts, bounds):
    """Weighted NLS fits from several starts, best first (smallest weighted residual sum of squares)."""
    from scipy.optimize import curve_fit

    lo, hi = (np.asarray(v, dtype=float) for v in bounds)
    margin = 1e-9 * np.maximum(1, np.abs(np.where(np.isfinite(lo), lo, 0)))
    found = []
    for p0 in starts:
        p0 = np.clip(np.asarray(p0, dtype=float), lo + margin, hi - margin)
        p0 = np.where(np.isfinite(p0), p0, 0.0)
        try:
            params, cov = curve_fit(_model, xb, t, p0=p0, sigma=np.sqrt(var), absolute_sigma=False,
                                    bounds=(lo, hi), jac=_jacobian, max_nfev=2000)
        except (RuntimeError, ValueError):
            continue
        ssr = float(np.sum((t - _model(xb, *params)) ** 2 / var))
        if np.isfinite(ssr):
            found.append((ssr, params, cov))
    return sorted(found, key=lambda f: f[0])


def _scatter_ml(rows, base, r2):
    """Maximum-likelihood (a², b²) of var = base + a²·rows[:, 0] + b²·rows[:, 1] given squared residuals."""
    from scipy.optimize import minimize

    def nll(z):
        v = base + rows @ np.exp(z)
        return 0.5 * float(np.sum(np.log(v) + r2 / v))

    z0 = math.log(max(float(np.mean(r2 / np.maximum(rows[:, 0], 1e-300))), 1e-300))
    z1 = math.log(max(float(np.mean(r2)) / max(float(np.mean(rows[:, 1])), 1e-300), 1e-300))
    best = None
    for start in ([z0, z1], [z0 - 2.3, z1], [z0, z1 - 3]):
        r = minimize(nll, start, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 2000})
        if best is None or r.fun < best.fun:
            best = r
    return np.exp(best.x)


def fit(frame, *, robust: bool = False, source: str | None = None):
    result = FitResult(ID)
    g = frame[frame["calibration"] == ID].sort_values("working_set_bytes", kind="stable")
    ws_points = g[g["series"] == "working_set"] if "series" in g else g
    if len(ws_points) < 12:
        why = f"{len(ws_points)} working sets measured; the ramp's model needs at least 12"
        result.failures.update({CAPACITY: why, RAMP_END: why})
        return _bandwidth_line(g, result, robust=robust, source=source)
    try:
        hinge = _fit_ramp(g)
    except (RuntimeError, ValueError, np.linalg.LinAlgError) as exc:
        result.failures.update({CAPACITY: f"the ramp's fit did not converge: {exc}",
                                RAMP_END: f"the ramp's fit did not converge: {exc}"})
        return _bandwidth_line(g, result, robust=robust, source=source)
    result.models["hinge"] = hinge
    for name, rec in _records(hinge, source, robust).items():
        result.records[name] = rec
    return _bandwidth_line(g, result, robust=robust, source=source)


def _fit_ramp(g) -> HingeFit:
    """Two steps: equal relative weights (the points' own noise under a 2% floor) to find the model, then
    the variance function fitted to that fit's residuals by maximum likelihood, then the weighted fit."""
    w = g["working_set_bytes"].to_numpy(dtype=float)
    b = bytes_read(g)
    t = g["time_us"].to_numpy(dtype=float)
    n = g["n_samples"].to_numpy(dtype=float)
    se = g["se_us"].to_numpy(dtype=float) if "se_us" in g else t / np.sqrt(n) * 0.01
    se = np.where(np.isfinite(se) & (se > 0), se, t * 1e-3)
    ws = (g["series"] == "working_set").to_numpy() if "series" in g else np.ones(len(t), dtype=bool)
    x = np.log2(w)
    xb = (x, b)
    per_byte = t / b
    c_l2, c_dram = np.median(per_byte[:3]), np.median(per_byte[-3:])
    gap = c_dram - c_l2
    above = np.flatnonzero(per_byte > c_l2 + 0.1 * gap)
    x1 = x[above[0]] if above.size else x[len(x) // 3]
    span_max = float(x.max() - x.min())
    bounds = ([-np.inf, 0, 0, x.min(), 0.2, 0, 0.1], [np.inf, np.inf, np.inf, x.max(), span_max, np.inf, 1.5])
    t0 = max(0.01 * float(t.min()), 1.0)
    starts = [[t0, c_l2, c_dram, x1, span, peak, width] for span in (1.0, 2.0) for peak in (0.0, 0.1 * np.median(t))
              for width in (0.25, 0.5)]
    var = (0.02 * t) ** 2 * ws + se**2
    found = _weighted_fits(xb, t, var, starts, bounds)
    if not found:
        raise RuntimeError("no start converged")
    # The best first fit, and the best whose ramp ends elsewhere (the ramp's end can have two optima
    # when the grid's top is close to it): each refitted with its own variance function, the one of
    # the higher likelihood kept.
    end = found[0][1][3] + found[0][1][4]
    firsts = [found[0][1]] + [f[1] for f in found[1:] if abs(f[1][3] + f[1][4] - end) > 0.2][:1]
    best = None
    for first in firsts:
        fitted = _reweighted(xb, t, se, ws, first, bounds)
        if fitted is not None and (best is None or fitted[0] > best[0]):
            best = fitted
    if best is None:
        raise RuntimeError("the weighted fit did not converge")
    _, params, cov, var, scatter = best
    return HingeFit(w, b, t, params, cov, len(t) - len(params), var, np.sqrt(scatter), ws)


def _reweighted(xb, t, se, ws, params, bounds):
    """From a first fit: the variance function fitted to its residuals, the weighted fit, twice; returns
    (log-likelihood, params, cov, var, scatter) or None."""
    x, b = xb
    first, out = params, None
    for _ in range(2):
        f = _model(xb, *params)
        h = 1e-4
        slope = (_model((x + h, b), *params) - _model((x - h, b), *params)) / (2 * h)
        rows = np.c_[f**2 * ws, slope**2]
        scatter = _scatter_ml(rows[ws], se[ws] ** 2, (t - f)[ws] ** 2)
        var = se**2 + rows @ scatter
        found = _weighted_fits(xb, t, var, [params, first], bounds)
        if not found:
            return out
        _, params, cov = found[0]
        ll = -0.5 * float(np.sum(np.log(var) + (t - _model(xb, *params)) ** 2 / var))
        out = (ll, params, cov, var, scatter)
    return out


def _bandwidth_line(g, result, *, robust, source):
    """The L2 read bandwidth from its own line; where that series is missing the hinge's plateau
    (wider, and flagged as such by its CI) stands."""
    line = g[g["series"] == "bandwidth"] if "series" in g else g.iloc[:0]
    if len(line) >= 3:
        result.models[READ_BW] = f = fit_timed(line, bytes_read(line), robust=robust)
        w_bw = int(line["working_set_bytes"].iloc[0])
        rec = f.rate_record(1e9, "GB/s", source=source)
        rec["method"] += f"; working set {w_bw / 2**20:.1f} MiB, bytes per launch varied"
        result.records[READ_BW] = rec
    elif READ_BW not in result.records:
        result.failures[READ_BW] = f"{len(line)} points of the bandwidth series; a line needs at least 3"
    return result


def _records(h: HingeFit, source, robust) -> dict:
    method = ("weighted NLS t = t0 + bytes·c(log2 W) + L(log2 W) (steady-state hinge and a cost per launch), "
              "weights from a fitted variance function, Wald CI") + (" (robust option ignored)" if robust else "")
    ws = h.working_set  # R² over the working sets: the bandwidth series' tiny variances would make it 1
    r2 = weighted_r2(h.t_us[ws], weighted_residuals=h.resid[ws], weights=h.weights[ws])
    flags = []
    if not np.all(np.isfinite(h.se)):
        flags.append("covariance not estimable: the ramp is not resolved by the grid")
    x = np.log2(h.w[h.working_set])
    inside = int(np.sum((x > h.x1) & (x < h.x2)))
    if inside < 2:
        flags.append(f"only {inside} working sets inside the ramp: its ends are poorly located")
    past = int(np.sum(x > h.x2))
    end_flags = [] if past >= 3 else [f"{past} working sets past the ramp's end: the DRAM plateau is not measured"]
    t0, c_l2, c_dram, x1, span, peak_us, width = (float(v) for v in h.params)
    diag = {"r2": r2, "points_in_ramp": inside, "dram_plateau_gbps": 1e-3 / c_dram, "t0_us": t0,
            "transient_us": peak_us, "transient_peak_bytes": 2 ** (x1 + TRANSIENT_SHAPE * width),
            "transient_width_octaves": width, "scatter_rel": float(h.scatter[0]),
            "scatter_octaves": float(h.scatter[1])}

    def rec(value, ci, unit, extra=()):
        rel = (ci[1] - ci[0]) / 2 / abs(value)
        wide = [f"wide CI: ±{rel:.1%}"] if rel > 0.05 else []  # false for a CI that is not finite
        return make_record(value, ci, unit, n=int(h.w.size), method=method, r2=r2, flags=flags + list(extra) + wide,
                           diagnostics=diag, source=source)

    lo, hi = h.ci(1)
    bw = 1e-3 / c_l2
    records = {READ_BW: rec(bw, (1e-3 / hi, 1e-3 / lo) if lo > 0 else (float("nan"), float("nan")), "GB/s")}
    lo, hi = h.ci_log2("x1")
    records[CAPACITY] = rec(2**h.x1, (2**lo, 2**hi), "bytes")
    lo, hi = h.ci_log2("x2")
    records[RAMP_END] = rec(2**h.x2, (2**lo, 2**hi), "bytes", end_flags)
    return records  # a CI that is not finite is flagged by make_record, not dropped


def figures(frame, result, *, title) -> dict:
    figs = {ID: plot(frame, result.models, title=title, records=result.records)}
    line = result.models.get(READ_BW)
    if line is not None:
        figs["line-memory_l2_read_bandwidth_gbps"] = line.plot_line(
            title=title(READ_BW), x_label="GB read", x_scale=1e9, record=result.records.get(READ_BW))
        figs["residuals-memory_l2_read_bandwidth_gbps"] = line.plot_residuals(
            title=title(READ_BW), x_label="GB read", x_scale=1e9)
    return figs


def plot(frame, fits: dict, *, title, records: dict | None = None):
    """Achieved bandwidth against working set for each launch length, the fitted model of each and the
    steady state (no cost per launch), the ramp's ends with their estimates and 95% CIs (shaded) where
    the records give them, and the residuals in units of the fit's own scatter."""
    import matplotlib.pyplot as plt

    from ..plotting import detach

    h = fits.get("hinge")
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12, 3.8), constrained_layout=True)
    if h is None:
        return detach(fig)
    ws = h.working_set
    mib = h.w / 2**20
    # the long and the short launches (passes rounded to whole numbers move their bytes a little)
    split = math.sqrt(float(h.bytes[ws].min()) * float(h.bytes[ws].max()))
    for long in (True, False):
        s = ws & ((h.bytes > split) if long else (h.bytes <= split))
        if not s.any():
            continue
        gib = float(np.median(h.bytes[s])) / 2**30
        (dots,) = a0.plot(mib[s], h.bytes[s] / h.t_us[s] * 1e-3, "o", ms=3,
                          label=f"measured, ≈{gib:.3g} GiB per launch")
        a0.plot(mib[s], h.bytes[s] / h.fitted_us[s] * 1e-3, "-", lw=1, color=dots.get_color())
    grid_w = np.geomspace(h.w[ws].min(), h.w[ws].max(), 400)
    big = float(np.max(h.bytes))
    a0.plot(grid_w / 2**20, big / h.steady_us(grid_w, big) * 1e-3, "k-", lw=1.2,
            label="steady state (no cost per launch)")
    for x, name, what, style in ((h.x1, CAPACITY, "ramp starts", "--"), (h.x2, RAMP_END, "ramp ends", ":")):
        rec = (records or {}).get(name)
        label = None
        if rec and rec.get("ci95"):
            lo, hi = rec["ci95"]
            a0.axvspan(lo / 2**20, hi / 2**20, color="0.88", zorder=0)
            label = f"{what}: {rec['value'] / 2**20:.4g} MiB (95% CI {lo / 2**20:.4g} to {hi / 2**20:.4g})"
        a0.axvline(2**x / 2**20, color="k", ls=style, lw=0.8, label=label)
    a0.set(xscale="log", xlabel="working set (MiB)", ylabel="achieved GB/s",
           title=title("achieved bandwidth against working set"))
    a0.legend(fontsize=7)
    a1.plot(mib[ws], h.resid[ws], "o", ms=3, label="working sets")
    a1.plot(mib[~ws], h.resid[~ws], "s", ms=3, label="bandwidth series")
    a1.axhline(0, color="k", lw=0.8)
    a1.set(xscale="log", xlabel="working set (MiB)", ylabel="residual / fitted scatter",
           title="residuals (weighted by the variance function)")
    a1.legend(fontsize=7)
    return detach(fig)


def prepare(b, configs):
    small_kernels(b)


def measure(b, config: dict):
    """Repeated reads of one working set; no rotation on purpose: the repeats are what L2 serves."""
    cp = b.cp
    w, passes = int(config["working_set_bytes"]), int(config["passes"])
    words, total = w // 16, (w // 16) * passes
    if w % 16 or total >= 2**32:
        raise UnsupportedConfig(f"l2_read takes whole 16-byte words and fewer than 2**32 of them per launch "
                                f"(working set {w} B x {passes} passes)")

    def make():
        b.check_free(w)
        return {"src": cp.random.random(w // 4, dtype=cp.float32)}

    src = b.buffers(("l2", w), make)["src"]
    kernel = small_kernels(b).get_function("l2_read")
    grid, block = (b.sm_count * 8,), (THREADS,)
    args = (src, np.uint32(words), np.uint32(total), b.sink())
    rule = None
    if config.get("series") == "working_set":
        rule = StoppingRule(min_samples=WORKING_SET_SAMPLES, max_samples=WORKING_SET_SAMPLES,
                            batch=WORKING_SET_SAMPLES, rel_precision=b.rule.rel_precision, budget_s=b.rule.budget_s)
    return b.time_launches(lambda i: kernel(grid, block, args, stream=b.stream), rule=rule,
                           perf_config={"threads": THREADS, "blocks_per_sm": 8, "load": "ld.global.cg, 16 B",
                                        "loop": "flat over passes x words"})
