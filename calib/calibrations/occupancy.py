"""Bytes in flight per SM that DRAM bandwidth needs (Little's law).

The DRAM read kernel runs with every combination of resident blocks per SM and unroll, with 16-byte
loads, so that the bytes each SM has in flight, ``x = blocks × 256 threads × unroll × 16``, range
from 4 KiB to 256 KiB. Narrower loads are left out: on an H200 4-byte loads stopped at 85% of the
ceiling with 64 KiB in flight (2026-11-29), limited by the load instructions issued, not by the
bytes in flight that Little's law counts.

Three things limit the achieved bandwidth, and the model has one term for each:

- the DRAM ceiling, a cost per byte ``c``;
- Little's law: ``x`` bytes in flight on each of ``S`` SMs move ``x · S`` bytes per latency ``L``;
- the warps: a warp issues its loads one after another, so ``w`` warps per SM move at most
  ``w · S · r`` bytes per microsecond, whatever the unroll.

The time is ``t = t0 + bytes · (c^p + (L / (x·S))^p + (1 / (w·S·r))^p)^(1/p)``: a smooth minimum
of the three rates whose sharpness ``p`` is fitted too (weighted nonlinear least squares, in the
logarithms of the positive parameters). ``memory.bytes_in_flight_per_sm`` is the x at which the
bandwidth reaches 90% of the ceiling with warps to spare, ``L / (S · c · (0.9^-p − 1)^(1/p))``,
with a delta-method CI on its logarithm.

The hinge in bytes in flight alone that this replaced missed the H200's points by up to 17–29%:
at 32 KiB in flight one block of 256 threads with unroll 8 read at 3.4 TB/s and eight blocks with
unroll 1 at 4.4. The warp term takes that up (one block per SM stops near 3.4 TB/s whatever its
unroll); the three-term model misses the same points by at most 2.7% (full suite) and 3.1%
(quick) (2026-12-01, recorded sweeps).
"""

from __future__ import annotations

import itertools
import math

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import FitResult, make_record, refuse_unusable_points, weighted_r2
from . import memory_bandwidth as dram
from ._base import Param

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "Bytes in flight per SM for DRAM bandwidth"
# fit, plot and write after measuring: 3.0 s (three quick suites on an H200, 2026-12-01); see _base.TAIL_S
TAIL_S = 3.0
INTRO = """Runs the DRAM read kernel at every combination of resident blocks per SM and unroll (16-byte loads), so
that each SM keeps from 4 KiB to 256 KiB in flight, and fits a model with three limits: the DRAM
ceiling; Little's law, bytes in flight × SMs / latency; and the warps, which issue their loads one
after another, so that few warps cannot reach the ceiling whatever their unroll. The time is
`t0 + bytes × (c^p + (L / (x·S))^p + (1 / (w·S·r))^p)^(1/p)`, a smooth minimum whose sharpness p
is fitted. `memory.bytes_in_flight_per_sm` is what an SM must keep in flight for 90% of the
ceiling when warps are not the limit."""
READING = """A kernel keeps `resident warps × 32 × bytes per load × independent loads` in flight per SM; below
`memory.bytes_in_flight_per_sm` it cannot reach 90% of DRAM bandwidth however it is scheduled, and
it also needs about `warps_per_sm_for_90` warps per SM (diagnostics). The fitted latency is the
loaded DRAM latency that Little's law implies; `warp_gbps` what one warp's loads can move."""
IN_FLIGHT = "memory.bytes_in_flight_per_sm"
PARAMETERS = (Param(IN_FLIGHT, "bytes", "bytes in flight per SM for 90% of DRAM read bandwidth"),)
# The simulated device's warp issue rate and sharpness: about what the H200 showed (2026-12-01).
SIM_DEFAULTS = {"sim.occupancy.fixed_us": 4.0, "sim.occupancy.warp_gbps": 4.2, "sim.occupancy.sharpness": 3.3}
THREADS = 256
# unroll: the factors the DRAM read kernel is compiled for (memory_bandwidth.UNROLLS)
SUITES = {"quick": dict(blocks=(1, 2, 3, 4, 8), unroll=(1, 4, 8), width=(16,)),
        "full": dict(blocks=(1, 2, 3, 4, 5, 6, 8), unroll=(1, 4, 8), width=(16,))}
# Two buffer sizes separate the per-launch cost from the per-byte one; the CuPy backend reads both
# from one allocation of the larger (see measure, below, for why).
SIZES = (1000 * 2**20, 2000 * 2**20)


def plan(suite: str, *, sm_count: int = 132, **_) -> list[dict]:
    g = SUITES[suite]
    combos = itertools.product(g["blocks"], g["unroll"], g["width"])
    return [{"calibration": ID, "blocks_per_sm": b, "unroll": u, "width_bytes": w, "threads": THREADS,
             "sm_count": sm_count, "size_bytes": SIZES[i % 2]} for i, (b, u, w) in enumerate(combos)]


def footprint_bytes(config: dict) -> int:
    return 2 * int(config["size_bytes"])


def in_flight(c):
    return (np.asarray(c["blocks_per_sm"], dtype=float) * np.asarray(c["threads"], dtype=float)
            * np.asarray(c["unroll"], dtype=float) * np.asarray(c["width_bytes"], dtype=float))


def warps(c):
    return np.asarray(c["blocks_per_sm"], dtype=float) * np.asarray(c["threads"], dtype=float) / 32.0


def default_truth(base: dict | None = None) -> dict:
    truth = {IN_FLIGHT: 22000.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def _k(p):
    """x90 = L / (S · c · k(p)): where the Little's-law term brings the rate to 90% of the ceiling."""
    return (0.9 ** -p - 1.0) ** (1.0 / p)


def _cost_per_byte(x, w, sms, c, latency_us, warp_rate, p):
    """us per byte: the smooth minimum of the three rates (module docstring)."""
    x, w = np.asarray(x, dtype=float), np.asarray(w, dtype=float)
    return (c ** p + (latency_us / (x * sms)) ** p + (1.0 / (w * sms * warp_rate)) ** p) ** (1.0 / p)


def true_time_us(frame, truth: dict) -> np.ndarray:
    c = 1 / (truth[dram.param_name("read")] * 1e3)  # us per byte
    sms = np.asarray(frame["sm_count"], dtype=float)
    p = truth["sim.occupancy.sharpness"]
    latency_us = truth[IN_FLIGHT] * sms * c * _k(p)
    warp_rate = truth["sim.occupancy.warp_gbps"] * 1e3  # bytes per us per warp
    return truth["sim.occupancy.fixed_us"] + np.asarray(frame["size_bytes"], dtype=float) * _cost_per_byte(
        in_flight(frame), warps(frame), sms, c, latency_us, warp_rate, p)


def _model(xs, t0, log_c, log_latency, log_warp_rate, log_p):
    x, w, sms, b = xs
    return t0 + b * _cost_per_byte(x, w, sms, np.exp(log_c), np.exp(log_latency), np.exp(log_warp_rate),
                                   np.exp(log_p))


def _log_x90(params, sms):
    _, log_c, log_latency, _, log_p = params
    return log_latency - math.log(sms) - log_c - math.log(_k(math.exp(log_p)))


def _start(x, w, sms, b, t):
    """A starting point from the data alone: the ceiling from the fastest point, the latency from
    the slowest ones (Little's law), the warp rate from the points with the fewest warps."""
    per_byte = t / b
    c0 = float(np.min(per_byte))
    slow = per_byte > 1.5 * c0
    lat0 = float(np.median((per_byte * x * sms)[slow])) if slow.any() else c0 * float(np.median(x * sms))
    few = w == np.min(w)
    warp0 = float(np.max(1.0 / (per_byte[few] * w[few] * sms[few])))
    return [float(np.min(t)) * 0.01, math.log(c0), math.log(lat0), math.log(warp0), math.log(3.0)]


def fit(frame, *, robust: bool = False, source: str | None = None):
    from scipy import stats
    from scipy.optimize import curve_fit

    result = FitResult(ID)
    g = frame[frame["calibration"] == ID]
    if len(g) < 8:
        result.failures[IN_FLIGHT] = f"{len(g)} points measured; the three-limit model needs at least 8"
        return result
    x, w, sms = in_flight(g), warps(g), g["sm_count"].to_numpy(dtype=float)
    b, t = g["size_bytes"].to_numpy(dtype=float), g["time_us"].to_numpy(dtype=float)
    n = g["n_samples"].to_numpy(dtype=float)
    # every input positive: the model divides by bytes in flight, warps and SMs, the start by bytes; a
    # NaN time had failed as scipy's "array must not contain infs or NaNs", naming no point
    points = {"bytes_in_flight": x, "warps_per_sm": w, "sm_count": sms, "size_bytes": b, "time_us": t, "n_samples": n}
    try:
        refuse_unusable_points(points, positive=tuple(points), fitting=IN_FLIGHT)
    except ValueError as exc:
        result.failures[IN_FLIGHT] = str(exc)
        return result
    weights = n / t**2
    start = _start(x, w, sms, b, t)
    lower = [-np.inf, -np.inf, -np.inf, -np.inf, 0.0]  # sharpness p >= 1: no rate above any of the three
    upper = [np.inf, np.inf, np.inf, np.inf, math.log(16.0)]
    try:
        params, cov = curve_fit(_model, (x, w, sms, b), t, p0=start, sigma=1 / np.sqrt(weights),
                                absolute_sigma=False, bounds=(lower, upper), maxfev=20000)
    except (RuntimeError, ValueError) as exc:
        result.failures[IN_FLIGHT] = f"the three-limit model did not converge: {exc}"
        return result
    s = float(np.median(sms))
    log_x90 = _log_x90(params, s)
    grad = np.zeros(5)
    grad[1], grad[2] = -1.0, 1.0
    h = 1e-6
    up, down = params.copy(), params.copy()
    up[4] += h
    down[4] -= h
    grad[4] = (_log_x90(up, s) - _log_x90(down, s)) / (2 * h)
    se_log = math.sqrt(max(float(grad @ cov @ grad), 0.0)) if np.all(np.isfinite(cov)) else math.inf
    q = stats.t.ppf(0.975, len(t) - 5)
    x90 = math.exp(log_x90)
    fitted = _model((x, w, sms, b), *params)
    resid = (t - fitted) * np.sqrt(weights)
    r2 = weighted_r2(t, weighted_residuals=resid, weights=weights)
    t0, c, lat, warp_rate, p = params[0], *np.exp(params[1:])
    little = lat / (x * s)
    below = int(np.sum(little > c))  # points where Little's law, not the ceiling, is the larger cost
    flags = []
    if below < 3 or len(t) - below < 3:
        flags.append(f"{below} of {len(t)} points limited by bytes in flight (fewer than 3 on one side): the "
                     "knee is poorly located")
    worst = float(np.max(np.abs(t - fitted) / fitted))
    if worst > 0.05:
        flags.append(f"the three-limit model misses by up to {worst:.0%}: something else limits these points")
    result.records[IN_FLIGHT] = make_record(
        x90, (x90 * math.exp(-q * se_log), x90 * math.exp(q * se_log)), "bytes", n=len(t),
        method="weighted NLS, smooth minimum of ceiling, Little's law and warp issue; delta-method CI on log x90",
        r2=r2, flags=flags,
        diagnostics={"latency_us": float(lat), "dram_ceiling_gbps": float(1e-3 / c),
                     "warp_gbps": float(warp_rate * 1e-3), "sharpness": float(p), "t0_us": float(t0),
                     "warps_per_sm_for_90": float(1.0 / (s * warp_rate * c * _k(p))),
                     "points_limited_by_bytes_in_flight": below, "max_rel_miss": worst}, source=source)
    result.models["three_limit"] = {"x": x, "w": w, "t": t, "b": b, "fitted": fitted, "params": params, "sms": s}
    return result


def figures(frame, result, *, title) -> dict:
    return {ID: plot(result.models, title=title, record=result.records.get(IN_FLIGHT))}


def plot(fits: dict, *, title, record: dict | None = None):
    """Achieved bandwidth against bytes in flight, a colour per warps per SM, with the model's
    value at each point and its curve with warps to spare, and the estimate of the bytes in flight
    for 90% with its CI shaded; beside it how far the model misses."""
    import matplotlib.pyplot as plt

    from ..plotting import detach

    fig, (ax, ar) = plt.subplots(1, 2, figsize=(12, 3.8), constrained_layout=True)
    f = fits.get("three_limit")
    if f is None:
        return detach(fig)
    for wi in np.unique(f["w"]):
        m = f["w"] == wi
        line, = ax.plot(f["x"][m] / 1024, f["b"][m] / f["t"][m] * 1e-3, "o", ms=4, label=f"{wi:.0f} warps/SM")
        ax.plot(f["x"][m] / 1024, f["b"][m] / f["fitted"][m] * 1e-3, "x", ms=5, color=line.get_color())
        ar.plot(f["x"][m] / 1024, (f["t"][m] - f["fitted"][m]) / f["fitted"][m] * 100, "o", ms=4,
                color=line.get_color())
    grid = np.geomspace(np.min(f["x"]), np.max(f["x"]), 200)
    t0, log_c, log_lat, _, log_p = f["params"]
    c, lat, p = np.exp(log_c), np.exp(log_lat), np.exp(log_p)
    ax.plot(grid / 1024, 1e-3 / (c ** p + (lat / (grid * f["sms"])) ** p) ** (1 / p), "-", lw=1, color="k",
            label="model, warps to spare")
    if record and record.get("ci95"):
        lo, hi = record["ci95"]
        ax.axvspan(lo / 1024, hi / 1024, color="0.85", zorder=0)
        ax.axvline(record["value"] / 1024, color="0.4", lw=1, ls="--",
                   label=f"90% at {record['value'] / 1024:.3g} KiB (95% CI {lo / 1024:.3g} to {hi / 1024:.3g})")
    ax.set(xscale="log", xlabel="bytes in flight per SM (KiB)", ylabel="achieved GB/s",
           title=title("achieved bandwidth against bytes in flight (x: the model)"))
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    ar.axhline(0, color="k", lw=0.8)
    ar.set(xscale="log", xlabel="bytes in flight per SM (KiB)", ylabel="time residual (% of fitted)",
           title="residuals of the three-limit model")
    return detach(fig)


def prepare(b, configs):
    dram.prepare(b, [{"kind": "read", "width_bytes": c["width_bytes"]} for c in configs])


def measure(b, config: dict):
    """The DRAM read kernel at a given residency and unroll: bytes in flight per SM are the knob."""
    size, width = int(config["size_bytes"]), int(config["width_bytes"])
    if int(config["sm_count"]) != b.sm_count:
        raise UnsupportedConfig(f"planned for {config['sm_count']} SMs; this GPU has {b.sm_count}")
    if int(config["unroll"]) not in dram.UNROLLS:
        raise UnsupportedConfig(f"the DRAM read kernel is compiled for unroll {dram.UNROLLS}, not {config['unroll']}")
    # Both sizes read the start of one allocation of the larger: the sweep alternates sizes, and
    # allocating afresh at each point put the smaller size's points 13% below the larger's in every
    # suite run on an H200 (2026-11-29), while the DRAM sweep near the same size did not show it.
    src, dst = dram.buffers(b, max(size, *SIZES))
    perf = {"threads": int(config["threads"]), "blocks_per_sm": int(config["blocks_per_sm"]),
            "unroll": int(config["unroll"]), "layout": "strided"}
    return b.time_launches(dram.launcher(b, "read", width, perf, size, src, dst), perf_config=perf)
