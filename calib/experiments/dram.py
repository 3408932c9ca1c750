"""DRAM bandwidth: read, write and copy kernels over sizes well beyond L2, by access width.

Model: ``t_us = fixed_cost_us + bytes_moved / bandwidth``, one fit per (kind, access width).
Bytes moved count what the kernel must move through DRAM: the buffer once for read and write,
twice (read + written) for copy, as ``cudaMemcpy`` bandwidth is usually quoted by benchmarks that
count both directions.

The unqualified ``memory.dram.<kind>_bandwidth_gbps`` is the 16-byte-access fit: the widest load a
thread can issue and what a tuned kernel uses; ``.alignN`` give the cost of narrower accesses.
"""

from __future__ import annotations

import numpy as np

from ..fit import fit_rates

EXPERIMENT = "dram"
KINDS = ("read", "write", "copy")
WIDTHS = (1, 2, 4, 8, 16)
REFERENCE_WIDTH = 16
FIXED_COST = "memory.dram.fixed_cost_us"
BYTES_PER_GB = 1e9

# Sizes relative to the L2: large enough that the cache holds a negligible share of the data.
# The quick grid spans as far as the full one: ending at 32× L2, write's CI was ±0.58% (2026-11-29).
# The 16-byte access width, whose fits are the unqualified parameters, gets a denser grid in the
# quick suite too: with 8 sizes, write's CI was ±0.76% (2026-11-29). 15 points hold the 8 as every
# other one, so the narrower widths are measured at sizes the 16-byte line also has.
SUITES = {"quick": dict(points=8, reference_points=15, lo_l2=4, hi_l2=64),
          "full": dict(points=16, reference_points=16, lo_l2=4, hi_l2=64)}
MAX_MEMORY_FRACTION = 0.5


def param_name(kind: str, width: int | None = None) -> str:
    base = f"memory.dram.{kind}_bandwidth_gbps"
    return base if width is None else f"{base}.align{width}"


def bytes_moved(kind, size_bytes):
    return np.where(np.asarray(kind) == "copy", 2, 1) * np.asarray(size_bytes, dtype=float)


def footprint_bytes(config: dict, rotation: int = 2) -> int:
    """Device memory a point needs: ``rotation`` buffer sets so that consecutive samples never
    start with their input in L2; copy needs a source and a destination per set."""
    per_set = config["size_bytes"] * (2 if config["kind"] == "copy" else 1)
    return int(per_set * rotation)


def sizes(suite: str, l2_bytes: int, memory_bytes: int, *, reference: bool = False) -> list[int]:
    """The suite's buffer sizes; ``reference``: those of the 16-byte access width."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}: choose one of {sorted(SUITES)}")
    s = SUITES[suite]
    hi = min(s["hi_l2"] * l2_bytes, MAX_MEMORY_FRACTION * memory_bytes / 4)
    grid = np.geomspace(s["lo_l2"] * l2_bytes, hi, s["reference_points" if reference else "points"])
    mib = 1 << 20
    return sorted({int(round(v / mib)) * mib for v in grid})


def plan(suite: str, *, l2_bytes: int, memory_bytes: int, size_list=None, kinds=KINDS, widths=WIDTHS,
         **_) -> list[dict]:
    """The configs of one sweep, ordered so that a partial sweep already covers every group. A
    ``size_list`` given applies to every width."""
    if size_list is not None:
        narrow = reference_sizes = list(size_list)
    else:
        narrow = sizes(suite, l2_bytes, memory_bytes)
        reference_sizes = sizes(suite, l2_bytes, memory_bytes, reference=True)
    bad = [s for s in sorted(set(narrow) | set(reference_sizes)) if not s > 0]
    if bad:
        raise ValueError(f"DRAM buffer sizes must be positive; got {bad} bytes")
    return [{"experiment": EXPERIMENT, "kind": k, "width_bytes": int(w), "size_bytes": int(s)}
            for s in sorted(set(narrow) | set(reference_sizes)) for k in kinds for w in widths
            if s in (reference_sizes if w == REFERENCE_WIDTH else narrow)]


# ----------------------------------------------------------------------------------------------
# the physical model, shared by the simulated device and (as a linear fit) by the fit


def default_truth(base: dict | None = None) -> dict:
    """H200-like true values; narrower accesses derated by a fixed factor unless given."""
    truth = {param_name("read"): 4300.0, param_name("write"): 4150.0, param_name("copy"): 4250.0,
             FIXED_COST: 4.0}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    derate = {1: 0.22, 2: 0.42, 4: 0.78, 8: 0.95, 16: 1.0}
    for kind in KINDS:
        for w in WIDTHS:
            truth[param_name(kind, w)] = truth[param_name(kind)] * derate[w]
    truth.update({k: v for k, v in (base or {}).items() if k.startswith("memory.dram.")})
    for kind in KINDS:
        if truth[param_name(kind, REFERENCE_WIDTH)] != truth[param_name(kind)]:
            raise ValueError(f"{param_name(kind, REFERENCE_WIDTH)} must equal {param_name(kind)}: "
                             "the unqualified bandwidth is the 16-byte-access one")
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    bw_gbps = np.array([truth[param_name(k, w)] for k, w in zip(frame["kind"], frame["width_bytes"])])
    return truth[FIXED_COST] + bytes_moved(frame["kind"], frame["size_bytes"]) / (bw_gbps * 1e3)


# ----------------------------------------------------------------------------------------------
# fitting


def fit(frame, *, robust: bool = False, source: str | None = None) -> tuple[dict, dict]:
    """Fit every (kind, width) group of a tidy sweep frame.

    Returns ``(records, fits)``: profile records by parameter name, and the LinearTimeFit behind
    each bandwidth record (for residual plots)."""
    records, fits = fit_rates(frame, EXPERIMENT, work=lambda g: bytes_moved(g["kind"], g["size_bytes"]),
                              name=lambda key: param_name(key[0], int(key[1])), by=["kind", "width_bytes"],
                              scale=BYTES_PER_GB, unit="GB/s", robust=robust, source=source)
    for kind in KINDS:
        reference = param_name(kind, REFERENCE_WIDTH)
        if reference in records:
            records[param_name(kind)], fits[param_name(kind)] = dict(records[reference]), fits[reference]
    read = fits.get(param_name("read", REFERENCE_WIDTH))
    if read is not None:
        records[FIXED_COST] = read.intercept_record("us", source=source)
    return records, fits


def plot_bandwidth(frame, records: dict, *, simulated: bool):
    """Achieved bandwidth against size, one panel per kind, a line per access width, the fitted
    asymptote dashed: where people would rather look than read."""
    import matplotlib.pyplot as plt

    frame = frame[frame["experiment"] == EXPERIMENT]
    kinds = [k for k in KINDS if k in set(frame["kind"])]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.6), squeeze=False, constrained_layout=True)
    for ax, kind in zip(axes[0], kinds):
        sub = frame[frame["kind"] == kind]
        for width, g in sub.groupby("width_bytes"):
            g = g.sort_values("size_bytes")
            achieved = bytes_moved(g["kind"], g["size_bytes"]) / (g["time_us"] * 1e3)
            line, = ax.plot(g["size_bytes"] / 2**20, achieved, "o-", ms=3, label=f"{width} B")
            rec = records.get(param_name(kind, int(width)))
            if rec:
                ax.axhline(rec["value"], color=line.get_color(), ls="--", lw=0.8)
        ax.set(xscale="log", xlabel="buffer size (MiB)", ylabel="achieved GB/s", title=f"DRAM {kind}")
        ax.legend(title="access width", fontsize=7)
    if simulated:
        fig.suptitle("SIMULATED DEVICE: not a measurement of real hardware", color="crimson")
    return fig


def plot_width_residuals(fits: dict, *, simulated: bool):
    """Standardized residuals against size for every access width, one panel per kind: the
    narrower widths' fits at a glance (the 16-byte fits get the full three-panel view)."""
    import matplotlib.pyplot as plt

    kinds = [k for k in KINDS if any(param_name(k, w) in fits for w in WIDTHS)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.2), squeeze=False, constrained_layout=True)
    for ax, kind in zip(axes[0], kinds):
        for w in WIDTHS:
            f = fits.get(param_name(kind, w))
            if f is None:
                continue
            order = np.argsort(f.x)
            ax.plot(f.x[order] / 2**20, f.std_resid[order], "o-", ms=3, label=f"{w} B{' (flagged)' if f.flags else ''}")
        ax.axhline(0, color="k", lw=0.8)
        ax.set(xscale="log", xlabel="bytes moved (MiB)", ylabel="standardized residual", title=f"DRAM {kind}")
        ax.legend(fontsize=7)
    if simulated:
        fig.suptitle("SIMULATED DEVICE: not a measurement of real hardware", color="crimson")
    return fig
