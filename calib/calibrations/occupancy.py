"""Bytes in flight per SM that DRAM bandwidth needs (Little's law).

The DRAM read kernel runs with every combination of resident blocks per SM and unroll, with 16-byte
loads, so that the bytes each SM has in flight, ``x = blocks × 256 threads × unroll × 16``, range
from 4 KiB to 256 KiB. Narrower loads are left out: on an H200 4-byte loads stopped at 85% of the
ceiling with 64 KiB in flight (2026-11-29), limited by the load instructions issued, not by the
bytes in flight that Little's law counts.

By Little's law the achieved bandwidth is ``x · SMs / latency`` until
it reaches the DRAM ceiling; the time model is

    t = t0 + bytes · max(c_max, latency / (x · SMs))

fitted by weighted nonlinear least squares. ``memory.bytes_in_flight_per_sm`` is the x at which
the line reaches 90% of the ceiling, ``0.9 · latency / (c_max · SMs)``, with a Wald CI on its
logarithm (delta method). Real GPUs bend into the ceiling more gently than this hinge: the fit
flags it, and the number is then a lower bound of what a kernel needs.
"""

from __future__ import annotations

import itertools
import math

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import FitResult, make_record, weighted_r2
from . import memory_bandwidth as dram
from ._base import Param

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "Bytes in flight per SM for DRAM bandwidth"
INTRO = """Runs the DRAM read kernel at every combination of resident blocks per SM, unroll and access width,
so that each SM keeps from about 1 KiB to 256 KiB in flight, and fits Little's law, achieved
bandwidth = bytes in flight × SMs / latency up to the DRAM ceiling. `memory.bytes_in_flight_per_sm`
is what an SM must keep in flight for 90% of that ceiling."""
READING = """A kernel keeps `resident warps × 32 × bytes per load × independent loads` in flight per SM; below
`memory.bytes_in_flight_per_sm` it cannot reach 90% of DRAM bandwidth however it is scheduled.
The fitted latency (diagnostics) is the loaded DRAM latency that Little's law implies."""
IN_FLIGHT = "memory.bytes_in_flight_per_sm"
PARAMETERS = (Param(IN_FLIGHT, "bytes", "bytes in flight per SM for 90% of DRAM read bandwidth"),)
SIM_DEFAULTS = {"sim.occupancy.fixed_us": 4.0}
THREADS = 256
# unroll: the factors the DRAM read kernel is compiled for (memory_bandwidth.UNROLLS)
SUITES = {"quick": dict(blocks=(1, 2, 4, 8), unroll=(1, 4, 8), width=(16,)),
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


def default_truth(base: dict | None = None) -> dict:
    truth = {IN_FLIGHT: 22000.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def _cost_per_byte(x, sms, c_max, latency_us):
    return np.maximum(c_max, latency_us / (np.asarray(x, dtype=float) * sms))


def true_time_us(frame, truth: dict) -> np.ndarray:
    c_max = 1 / (truth[dram.param_name("read")] * 1e3)  # us per byte
    sms = np.asarray(frame["sm_count"], dtype=float)
    latency_us = truth[IN_FLIGHT] * sms / 0.9 * c_max  # from x90 = 0.9 · latency / (c_max · SMs)
    return truth["sim.occupancy.fixed_us"] + np.asarray(frame["size_bytes"], dtype=float) * _cost_per_byte(
        in_flight(frame), sms, c_max, latency_us)


def _model(xs, t0, c_max, latency_us):
    x, sms, b = xs
    return t0 + b * _cost_per_byte(x, sms, c_max, latency_us)


def fit(frame, *, robust: bool = False, source: str | None = None):
    from scipy import stats
    from scipy.optimize import curve_fit

    result = FitResult(ID)
    g = frame[frame["calibration"] == ID]
    if len(g) < 6:
        result.failures[IN_FLIGHT] = f"{len(g)} points measured; the Little's-law hinge needs at least 6"
        return result
    x, sms = in_flight(g), g["sm_count"].to_numpy(dtype=float)
    b, t = g["size_bytes"].to_numpy(dtype=float), g["time_us"].to_numpy(dtype=float)
    weights = g["n_samples"].to_numpy(dtype=float) / t**2
    per_byte = t / b
    c_max0 = float(np.min(per_byte))
    slow = per_byte > 1.5 * c_max0
    lat0 = float(np.median((per_byte * x * sms)[slow])) if slow.any() else c_max0 * float(np.median(x * sms))
    try:
        params, cov = curve_fit(_model, (x, sms, b), t, p0=[1.0, c_max0, lat0], sigma=1 / np.sqrt(weights),
                                absolute_sigma=False, maxfev=20000)
    except (RuntimeError, ValueError) as exc:
        result.failures[IN_FLIGHT] = f"the Little's-law hinge did not converge: {exc}"
        return result
    t0, c_max, lat = params
    s = float(np.median(sms))
    x90 = 0.9 * lat / (c_max * s)
    var_log = cov[2, 2] / lat**2 + cov[1, 1] / c_max**2 - 2 * cov[1, 2] / (lat * c_max)
    dof = len(t) - 3
    q = stats.t.ppf(0.975, dof)
    se_log = math.sqrt(max(var_log, 0.0))
    fitted = _model((x, sms, b), *params)
    resid = (t - fitted) * np.sqrt(weights)
    r2 = weighted_r2(t, weighted_residuals=resid, weights=weights)
    below = int(np.sum(x * s / lat < 1 / c_max))
    flags = []
    if below < 3 or len(t) - below < 3:
        flags.append(f"{below} points below the knee and {len(t) - below} above: the knee is poorly located")
    worst = float(np.max(np.abs(t - fitted) / fitted))
    if worst > 0.05:
        flags.append(f"the hinge misses by up to {worst:.0%}: the approach to the ceiling is gradual, so more "
                     "bytes in flight than this are needed for 90%")
    result.records[IN_FLIGHT] = make_record(
        x90, (x90 * math.exp(-q * se_log), x90 * math.exp(q * se_log)), "bytes", n=len(t),
        method="weighted NLS hinge (Little's law), delta-method CI on log x90", r2=r2, flags=flags,
        diagnostics={"latency_us": float(lat), "dram_ceiling_gbps": float(1e-3 / c_max), "t0_us": float(t0),
                     "points_below_knee": below, "max_rel_miss": float(worst)}, source=source)
    result.models["hinge"] = {"x": x, "t": t, "b": b, "fitted": fitted, "params": params}
    return result


def figures(frame, result, *, title) -> dict:
    return {ID: plot(result.models, title=title)}


def plot(fits: dict, *, title):
    """Achieved bandwidth against bytes in flight with the fitted hinge; beside it how far the hinge
    misses each point (the gradual approach to the ceiling shows here)."""
    import matplotlib.pyplot as plt

    from ..plotting import detach

    fig, (ax, ar) = plt.subplots(1, 2, figsize=(12, 3.8), constrained_layout=True)
    f = fits.get("hinge")
    if f is None:
        return detach(fig)
    order = np.argsort(f["x"])
    ax.plot(f["x"] / 1024, f["b"] / f["t"] * 1e-3, "o", ms=4, label="measured")
    ax.plot(f["x"][order] / 1024, (f["b"] / f["fitted"] * 1e-3)[order], "-", lw=1, label="Little's-law hinge")
    ax.set(xscale="log", xlabel="bytes in flight per SM (KiB)", ylabel="achieved GB/s",
           title=title("achieved bandwidth against bytes in flight"))
    ax.legend(fontsize=8)
    ar.plot(f["x"] / 1024, (f["t"] - f["fitted"]) / f["fitted"] * 100, "o", ms=4)
    ar.axhline(0, color="k", lw=0.8)
    ar.set(xscale="log", xlabel="bytes in flight per SM (KiB)", ylabel="time residual (% of fitted)",
           title="residuals of the hinge")
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
