"""The L2: its read bandwidth and its effective capacity, from one working-set sweep.

A kernel reads a buffer of W bytes over and over (``passes`` times, through L2 but not L1), for W
on a log-spaced grid dense around the reported L2 size. While W fits, every pass after the first
is served by L2; well past it, by DRAM; on Hopper the change is a ramp (roughly 44 to 70 MB on an
H200, partly because the L2 is split in two halves), not a step. The time model is

    t = t0 + bytes * c(log2 W),   c = c_l2 below x1, c_dram above x2, linear in log2 W between,

a continuous hinge fitted by weighted nonlinear least squares; the CIs are Wald intervals from the
fit's covariance, mapped through the monotone transforms (2**x for capacities, 1/c for bandwidth).
``memory.l2.capacity_bytes`` is where the ramp starts (the largest working set still fully served
by L2) and ``memory.l2.capacity_bytes.ramp_end`` where DRAM takes over.

Why the grid is dense, and not a new model (H200, 2026-12-01, both suites recorded): the ramp is
not linear in log W (it falls steeply from about 46 to 70 MB, then slowly to about 110 MB), but the
CIs of its ends (full ±4.3% and ±11.9%, quick ±7.2% and ±20.9%) come from the scatter between
neighbouring working sets, not from the hinge's shape: working sets 0.4 MB apart differ by up to 9%
in time (49.3 MB read almost all from L2, 48.9 MB 10% from DRAM: address hashing over the two L2
halves), 45× the points' own noise. Every smooth ramp fitted to the recorded full sweep leaves the
same scatter (residuals 43–53× the noise) and locates its end no better: the hinge ±14%, a
two-segment ramp (steep, then slow) ±43%, a logistic in log W ±13% at 90% DRAM, a Gompertz ±19%.
What narrows the CI is more working sets across the ramp and its tail, each cheap (about 14 ms of
GPU time): with the recorded scatter (3.4% of the time) planted around the recorded hinge, 96
working sets (three quarters between 0.7× and 2.5× the reported size) give the ramp's end ±4.4%
(median of 20 draws; ±4.9% at the 90th percentile) and 160 give ±3.3%, against ±15.5% and ±11.8%
with the recorded 20 and 36 — which is how the recorded sweeps came out. The next H200 run must
show ±5% on both suites with these grids.

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
from ._base import Param, small_kernels

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "The L2: capacity and read bandwidth"
INTRO = """Reads one working set W over and over through L2 (not L1), for W on a log grid from L2/8 to 4×L2,
three quarters of the points between 0.7× and 2.5× the reported size (the ramp and its slow tail: on an
H200 working sets a few hundred kB apart differ by up to 9% in time, address hashing over the two L2
halves, so the ramp's ends are located by many points, not by a better curve), and fits a hinge to
the times: the L2 cost per byte below the ramp's start, the DRAM cost above its end, linear in log W
between: `memory.l2.capacity_bytes` (where the ramp starts: the largest working set fully served by L2) and
`memory.l2.capacity_bytes.ramp_end`, with Wald CIs from the fit. A second series at one working set
well inside L2 varies the bytes per launch; its line `t = t0 + bytes / bandwidth` gives
`memory.l2.read_bandwidth_gbps`."""
READING = """A heuristic that tiles for L2 keeps its reused working set under `memory.l2.capacity_bytes`, not
under the L2 size the device reports: past the ramp's start some of the data comes from DRAM
again. The DRAM plateau the fit finds is in the diagnostics (`dram_plateau_gbps`), a cross-check
on `memory.dram.read_bandwidth_gbps`."""
THREADS = 256
CAPACITY = "memory.l2.capacity_bytes"
RAMP_END = "memory.l2.capacity_bytes.ramp_end"
READ_BW = "memory.l2.read_bandwidth_gbps"
DRAM_READ = "memory.dram.read_bandwidth_gbps"
PARAMETERS = (Param("memory.l2.read_bandwidth_gbps", "GB/s", "L2-resident read, whole device"),
              Param("memory.l2.capacity_bytes", "bytes", "largest working set fully served by L2 (the ramp's start)"),
              Param("memory.l2.capacity_bytes.ramp_end", "bytes", "working set past which DRAM serves the reads"))
SIM_DEFAULTS = {"sim.cache_hierarchy.fixed_us": 5.0}
# Bytes read per launch: long enough that the fixed cost is small, short enough for many points.
BYTES_PER_LAUNCH = 2 * 2**30
# Working sets per suite: 20 and 36 gave the ramp's end ±21% and ±12% on an H200 (2026-12-01); 96 and
# 160 should give ±4.4% and ±3.3% (the recorded scatter planted around the recorded hinge). About 14 ms
# of GPU time each.
SUITES = {"quick": 96, "full": 160}
DENSE = (0.7, 2.5)       # the dense part of the grid, in units of the reported L2 size
DENSE_SHARE = 0.75       # the share of the points there
# Bytes per launch of the bandwidth series (GiB), at working set L2/4.
BANDWIDTH_GIB = {"quick": (0.25, 0.5, 1, 1.5, 2, 3, 4), "full": (0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4)}


def plan(suite: str, *, l2_bytes: int, **_) -> list[dict]:
    """Working sets from L2/8 to 4×L2, three quarters of the points between 0.7× and 2.5× the
    reported size, where the ramp and its tail lie (an H200 reporting 60 MiB ramped from about 46
    to 110 MB, 2026-12-01)."""
    n = SUITES[suite]
    lo, hi = math.log2(l2_bytes / 8), math.log2(4 * l2_bytes)
    dense_lo, dense_hi = math.log2(DENSE[0] * l2_bytes), math.log2(DENSE[1] * l2_bytes)
    n_dense = int(n * DENSE_SHARE)
    grid = np.concatenate([np.linspace(lo, hi, n - n_dense), np.linspace(dense_lo, dense_hi, n_dense)])
    sizes = sorted({int(round(2**x / 4096)) * 4096 for x in grid})
    # Alternate the bytes per launch (2 GiB, 1 GiB): with a constant amount the fixed cost and the
    # cost per byte could not be told apart on either plateau.
    sweep = [{"calibration": ID, "series": "working_set", "working_set_bytes": w,
              "passes": max(1, int(round(BYTES_PER_LAUNCH * (1.0 if i % 2 == 0 else 0.5) / w)))}
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


def cost_per_byte_us(log2_w, c_l2, c_dram, x1, x2):
    ramp = np.clip((np.asarray(log2_w, dtype=float) - x1) / max(x2 - x1, 1e-9), 0.0, 1.0)
    return c_l2 + (c_dram - c_l2) * ramp


def default_truth(base: dict | None = None) -> dict:
    truth = {READ_BW: 9800.0, CAPACITY: 44e6, RAMP_END: 70e6, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    if truth[RAMP_END] <= truth[CAPACITY]:
        raise ValueError(f"{RAMP_END} must exceed {CAPACITY}")
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    c = cost_per_byte_us(np.log2(np.asarray(frame["working_set_bytes"], dtype=float)), 1 / (truth[READ_BW] * 1e3),
                         1 / (truth[DRAM_READ] * 1e3), math.log2(truth[CAPACITY]), math.log2(truth[RAMP_END]))
    return truth["sim.cache_hierarchy.fixed_us"] + bytes_read(frame) * c


class HingeFit:
    """The fitted hinge, its covariance and what the plots and flags need."""

    names = ("t0_us", "c_l2", "c_dram", "x1", "x2")

    def __init__(self, w, b, t, params, cov, dof, weights):
        self.w, self.bytes, self.t_us = w, b, t
        self.params, self.cov, self.dof, self.weights = params, cov, dof, weights
        self.se = np.sqrt(np.clip(np.diag(cov), 0, np.inf))
        self.fitted_us = _model((np.log2(w), b), *params)
        self.resid = (t - self.fitted_us) * np.sqrt(weights)
        self.flags: list[str] = []

    def ci(self, i):
        from scipy import stats

        q = stats.t.ppf(0.975, self.dof)
        return self.params[i] - q * self.se[i], self.params[i] + q * self.se[i]


def _model(xb, t0, c_l2, c_dram, x1, x2):
    x, b = xb
    return t0 + b * cost_per_byte_us(x, c_l2, c_dram, x1, x2)


def fit(frame, *, robust: bool = False, source: str | None = None):
    from scipy.optimize import curve_fit

    result = FitResult(ID)
    g = frame[frame["calibration"] == ID].sort_values("working_set_bytes")
    if len(g) < 8:
        result.failures.update({CAPACITY: f"{len(g)} working sets measured; the hinge needs at least 8",
                                RAMP_END: f"{len(g)} working sets measured; the hinge needs at least 8"})
        return _bandwidth_line(g, result, robust=robust, source=source)
    w = g["working_set_bytes"].to_numpy(dtype=float)
    b = bytes_read(g)
    t = g["time_us"].to_numpy(dtype=float)
    n = g["n_samples"].to_numpy(dtype=float)
    per_byte = t / b
    x = np.log2(w)
    # Start: plateaus from the smallest and largest working sets, the ramp around the steepest rise.
    c_l2, c_dram = np.median(per_byte[:3]), np.median(per_byte[-3:])
    mid = x[np.argmin(np.abs(per_byte - (c_l2 + c_dram) / 2))]
    p0 = [1.0, c_l2, c_dram, mid - 0.3, mid + 0.3]
    weights = n / t**2
    try:
        params, cov = curve_fit(_model, (x, b), t, p0=p0, sigma=1 / np.sqrt(weights), absolute_sigma=False,
                                maxfev=20000)
    except (RuntimeError, ValueError) as exc:
        result.failures.update({CAPACITY: f"the hinge fit did not converge: {exc}",
                                RAMP_END: f"the hinge fit did not converge: {exc}"})
        return _bandwidth_line(g, result, robust=robust, source=source)
    hinge = HingeFit(w, b, t, params, cov, len(t) - len(params), weights)
    result.models["hinge"] = hinge
    for name, rec in _records(hinge, source, robust).items():
        result.records[name] = rec
    return _bandwidth_line(g, result, robust=robust, source=source)


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
    method = "weighted NLS hinge t = t0 + bytes·c(log2 W), Wald CI" + (" (robust option ignored)" if robust else "")
    r2 = weighted_r2(h.t_us, weighted_residuals=h.resid, weights=h.weights)
    flags = []
    if not np.all(np.isfinite(h.se)):
        flags.append("covariance not estimable: the ramp is not resolved by the grid")
    x1, x2 = h.params[3], h.params[4]
    inside = int(np.sum((np.log2(h.w) > x1) & (np.log2(h.w) < x2)))
    if inside < 2:
        flags.append(f"only {inside} working sets inside the ramp: its ends are poorly located")
    diag = {"r2": r2, "points_in_ramp": inside, "dram_plateau_gbps": 1e-3 / h.params[2], "t0_us": h.params[0]}

    def rec(value, ci, unit):
        rel = (ci[1] - ci[0]) / 2 / abs(value)
        wide = [f"wide CI: ±{rel:.1%}"] if rel > 0.05 else []  # false for a CI that is not finite
        return make_record(value, ci, unit, n=int(h.w.size), method=method, r2=r2, flags=flags + wide,
                           diagnostics=diag, source=source)

    lo, hi = h.ci(1)
    bw = 1e-3 / h.params[1]
    records = {READ_BW: rec(bw, (1e-3 / hi, 1e-3 / lo) if lo > 0 else (float("nan"), float("nan")), "GB/s")}
    for name, i in ((CAPACITY, 3), (RAMP_END, 4)):
        lo, hi = h.ci(i)
        records[name] = rec(2 ** h.params[i], (2**lo, 2**hi), "bytes")
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
    """Achieved bandwidth against working set, the fitted hinge, and the ramp's ends with their
    estimates and 95% CIs (shaded) where the records give them."""
    import matplotlib.pyplot as plt

    from ..plotting import detach

    h = fits.get("hinge")
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12, 3.8), constrained_layout=True)
    if h is None:
        return detach(fig)
    mib = h.w / 2**20
    a0.plot(mib, h.bytes / h.t_us * 1e-3, "o", ms=4, label="measured")
    a0.plot(mib, h.bytes / h.fitted_us * 1e-3, "-", lw=1, label="hinge fit")
    for i, name, what, style in ((3, CAPACITY, "ramp starts", "--"), (4, RAMP_END, "ramp ends", ":")):
        rec = (records or {}).get(name)
        label = None
        if rec and rec.get("ci95"):
            lo, hi = rec["ci95"]
            a0.axvspan(lo / 2**20, hi / 2**20, color="0.88", zorder=0)
            label = f"{what}: {rec['value'] / 2**20:.4g} MiB (95% CI {lo / 2**20:.4g} to {hi / 2**20:.4g})"
        a0.axvline(2 ** h.params[i] / 2**20, color="k", ls=style, lw=0.8, label=label)
    a0.set(xscale="log", xlabel="working set (MiB)", ylabel="achieved GB/s",
           title=title("achieved bandwidth against working set"))
    a0.legend(fontsize=8)
    a1.plot(mib, h.resid / np.sqrt(np.mean(h.resid**2)), "o", ms=4)
    a1.axhline(0, color="k", lw=0.8)
    a1.set(xscale="log", xlabel="working set (MiB)", ylabel="standardized residual", title="residuals")
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
    return b.time_launches(lambda i: kernel(grid, block, args, stream=b.stream),
                           perf_config={"threads": THREADS, "blocks_per_sm": 8, "load": "ld.global.cg, 16 B",
                                        "loop": "flat over passes x words"})
