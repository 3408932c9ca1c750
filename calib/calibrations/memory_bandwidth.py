"""DRAM bandwidth: read, write and copy kernels over sizes well beyond L2, by access width.

Model: ``t_us = fixed_cost_us + bytes_moved / bandwidth``, one fit per (kind, access width).
Bytes moved count what the kernel must move through DRAM: the buffer once for read and write,
twice (read + written) for copy, as ``cudaMemcpy`` bandwidth is usually quoted by benchmarks that
count both directions.

The unqualified ``memory.dram.<kind>_bandwidth_gbps`` is the 16-byte-access fit: the widest load a
thread can issue and what a tuned kernel uses; ``.alignN`` give the cost of narrower accesses.
"""

from __future__ import annotations

import itertools

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import fit_rates
from ._base import Param

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "DRAM bandwidth"
# fit, plot and write after measuring: 6.3 s (three quick suites on an H200, 2026-12-01); see _base.TAIL_S
TAIL_S = 6.3
INTRO = """Sweeps read, write and copy kernels over buffer sizes well beyond the L2 cache, at access widths of
1, 2, 4, 8 and 16 bytes per thread, and fits `t = fixed_cost + bytes / bandwidth` to each
(kind, width). Writes `memory.dram.{read,write,copy}_bandwidth_gbps` (16-byte accesses), their
`.alignN` variants and `memory.dram.fixed_cost_us`, each with a 95% confidence interval from the fit.
Each kernel variant's launch shape is chosen by a short search before its first point."""
READING = """A heuristic that streams memory divides the bytes it moves by the bandwidth of its access width;
narrower accesses than 16 bytes cost what their `.alignN` ratio says."""
OPTIONS = {"sizes_mib": (None, "explicit buffer sizes in MiB, overriding the suite's grid"),
           "kinds": (["read", "write", "copy"], "which kernels"),
           "widths": ([1, 2, 4, 8, 16], "bytes per thread access")}
KINDS = ("read", "write", "copy")
WIDTHS = (1, 2, 4, 8, 16)
REFERENCE_WIDTH = 16
FIXED_COST = "memory.dram.fixed_cost_us"
BYTES_PER_GB = 1e9

# Sizes relative to the L2: large enough that the cache holds a negligible share of the data.
# The 16-byte access width, whose fits are the unqualified parameters, gets a denser grid in the
# quick suite: its points hold the narrower widths' as every other one, so that those are measured at
# sizes the 16-byte line also has. The quick grid stops at 29× L2 (the first 11 of the 15 sizes to
# 64× L2 it had, and 6 of the 8): refitted without the larger sizes, session 2's three quick H200
# suites (2026-12-01) give read, write and copy ±0.19-0.26%, ±0.12-0.17% and ±0.17-0.32% (to 64×:
# ±0.12-0.17%, ±0.08-0.14%, ±0.11-0.19%) with values within 0.13% of the whole grid's, and the
# 36 points left out took 1.5 s of the 4.9 s it measured (the 2.6-3.8 GB sizes are the slowest).
# (Before the outlier floor and the timing rule of 2026-12-01, 32× gave write ±0.58%, 2026-11-29.)
SUITES = {"quick": dict(points=6, reference_points=11, lo_l2=4, hi_l2=4 * 16 ** (10 / 14)),
          "full": dict(points=16, reference_points=16, lo_l2=4, hi_l2=64)}
MAX_MEMORY_FRACTION = 0.5


def param_name(kind: str, width: int | None = None) -> str:
    base = f"memory.dram.{kind}_bandwidth_gbps"
    return base if width is None else f"{base}.align{width}"


_MEANING = {"read": "sustained DRAM read", "write": "sustained DRAM write",
            "copy": "DRAM copy, bytes read + written over time"}
PARAMETERS = (
    *(Param(param_name(k), "GB/s", f"{_MEANING[k]}, 16-byte accesses") for k in KINDS),
    *(Param(param_name(k, w), "GB/s", f"{_MEANING[k]}, {w}-byte accesses") for k in KINDS for w in WIDTHS),
    Param(FIXED_COST, "us", "fixed cost of a DRAM read kernel: the intercept of the 16-byte read line"),
)


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


def plan(suite: str, *, l2_bytes: int, memory_bytes: int, sizes_mib=None, size_list=None, kinds=KINDS,
         widths=WIDTHS, **_) -> list[dict]:
    """The configs of one sweep, ordered so that a partial sweep already covers every group. A
    ``size_list`` (bytes) or ``sizes_mib`` given applies to every width."""
    if sizes_mib is not None:
        size_list = [int(s * 2**20) for s in sizes_mib]
    if size_list is not None:
        narrow = reference_sizes = list(size_list)
    else:
        narrow = sizes(suite, l2_bytes, memory_bytes)
        reference_sizes = sizes(suite, l2_bytes, memory_bytes, reference=True)
    bad = [s for s in sorted(set(narrow) | set(reference_sizes)) if not s > 0]
    if bad:
        raise ValueError(f"DRAM buffer sizes must be positive; got {bad} bytes")
    return [{"calibration": ID, "kind": k, "width_bytes": int(w), "size_bytes": int(s)}
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


def fit(frame, *, robust: bool = False, source: str | None = None):
    """Fit every (kind, width) group of a tidy sweep frame: a record per bandwidth, the
    LinearTimeFit behind each (for residual plots), the unqualified names as the 16-byte fits."""
    result = fit_rates(frame, ID, work=lambda g: bytes_moved(g["kind"], g["size_bytes"]),
                       name=lambda key: param_name(key[0], int(key[1])), by=["kind", "width_bytes"],
                       scale=BYTES_PER_GB, unit="GB/s", robust=robust, source=source)
    records, fits = result.records, result.models
    for kind in KINDS:
        reference = param_name(kind, REFERENCE_WIDTH)
        if reference in records:
            records[param_name(kind)], fits[param_name(kind)] = dict(records[reference]), fits[reference]
        elif reference in result.failures:
            result.failures[param_name(kind)] = result.failures[reference]
    read = fits.get(param_name("read", REFERENCE_WIDTH))
    if read is not None:
        records[FIXED_COST] = read.intercept_record("us", source=source)
    return result


def reading(result) -> str:
    read = result.records.get(param_name("read"))
    if not read:
        return ""
    lo, hi = read["ci95"]
    lines = [f"DRAM read with 16-byte accesses: {read['value']:.0f} GB/s (95% CI {lo:.0f} to {hi:.0f})."]
    for w in WIDTHS[:-1]:
        r = result.records.get(param_name("read", w))
        if r:
            lines.append(f"  {w}-byte accesses reach {r['value'] / read['value']:.0%} of that.")
    return "\n".join(lines)


def figures(frame, result, *, title) -> dict:
    figs = {ID: plot_bandwidth(frame, result.records, title=title)}
    for kind in KINDS:
        f = result.models.get(param_name(kind))
        if f is not None:
            figs["residuals-" + param_name(kind).replace(".", "_")] = f.plot_residuals(
                title=title(param_name(kind)), x_label="bytes moved (GB)", x_scale=BYTES_PER_GB,
                record=result.records.get(param_name(kind)))
    figs["residuals-by-width"] = plot_width_residuals(result.models, title=title)
    return figs


def plot_bandwidth(frame, records: dict, *, title):
    """Achieved bandwidth against size, one panel per kind, a line per access width, the fitted
    asymptote dashed: where people would rather look than read."""
    import matplotlib.pyplot as plt

    from ..plotting import detach

    frame = frame[frame["calibration"] == ID]
    kinds = [k for k in KINDS if k in set(frame["kind"])]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.6), squeeze=False, constrained_layout=True)
    for ax, kind in zip(axes[0], kinds):
        sub = frame[frame["kind"] == kind]
        for width, g in sub.groupby("width_bytes"):
            g = g.sort_values("size_bytes")
            achieved = bytes_moved(g["kind"], g["size_bytes"]) / (g["time_us"] * 1e3)
            line, = ax.plot(g["size_bytes"] / 2**20, achieved, "o-", ms=3, label=f"{int(width)} B")
            rec = records.get(param_name(kind, int(width)))
            if rec:  # the fitted bandwidth dashed, its 95% CI shaded
                ax.axhline(rec["value"], color=line.get_color(), ls="--", lw=0.8)
                if rec.get("ci95"):
                    ax.axhspan(*rec["ci95"], color=line.get_color(), alpha=0.15, lw=0)
        ax.set(xscale="log", xlabel="buffer size (MiB)", ylabel="achieved GB/s", title=f"DRAM {kind}")
        ax.legend(title="access width", fontsize=7)
    fig.suptitle(title("achieved DRAM bandwidth against buffer size (dashed: fit, shaded: its 95% CI)"))
    return detach(fig)


def plot_width_residuals(fits: dict, *, title):
    """Standardized residuals against size for every access width, one panel per kind: the
    narrower widths' fits at a glance (the 16-byte fits get the full three-panel view)."""
    import matplotlib.pyplot as plt

    from ..plotting import detach

    kinds = [k for k in KINDS if any(param_name(k, w) in fits for w in WIDTHS)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.2), squeeze=False, constrained_layout=True)
    for ax, kind in zip(axes[0], kinds):
        for w in WIDTHS:
            f = fits.get(param_name(kind, w))
            if f is None:
                continue
            # markers only: lines joining five widths' residuals drew a pattern that is in no fit
            ax.plot(f.x / BYTES_PER_GB, f.std_resid, "o", ms=4, alpha=0.8,
                    label=f"{w} B{' (flagged)' if f.flags else ''}")
        ax.axhline(0, color="k", lw=0.8)
        ax.set(xscale="log", xlabel="bytes moved (GB)", ylabel="standardized residual", title=f"DRAM {kind}")
        ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
    fig.suptitle(title("standardized residuals by access width"))
    return detach(fig)


# ----------------------------------------------------------------------------------------------
# the CuPy measurement: kernels of kernels/dram.cu, a launch-shape search per (kind, width)
#
# The search is calib.tuning's: the candidates are perf_configs(kind), all timed on one problem per
# (kind, width), tuning_problem(), which the device alone decides, and ranked by the tuner's
# estimator; then checked fastest first (check_shape: every element written, and right) until one
# passes, so a fast shape that skips elements never wins (the tuner's lazy_check). The winner's knobs alone are the
# measurement's perf_config, with tuned_on naming that problem; the candidates' measurements go to
# the results store (role "tuning", filed under the tuned-on problem) with the point that tuned.

CTYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}
THREADS = 256
BLOCKS_PER_SM = (1, 2, 4, 8, 16)
UNROLLS = (1, 4, 8)
LAYOUTS = ("strided", "tiled", "chunked")  # the kernel's LAYOUT 0, 1, 2
COPY_ONLY_LAYOUTS = ("pipelined",)  # dram_copy_pipelined
# Grids sized to the data rather than to the GPU: one strided step per thread, blocks retiring as
# new ones start. With 128 threads a block this copy matched cudaMemcpyAsync at 1 GiB on an H200
# (1.006 of it) where every persistent grid-stride shape stopped at 0.956 (2026-11-29; see
# bench/results/2026-11-29-h200-explorations.md); the tuner weighs them against the persistent
# shapes for every kind and width.
DATA_GRID_THREADS = (128, 256, 512)
MAX_GRID_BLOCKS = 2**31 - 1
ROTATION = 2
LAUNCH_SHAPE_FAMILY = "memory_bandwidth.launch_shape"  # the autotune cache's family of the DRAM shapes
TUNE_SAMPLES = 8  # a search among configs 1% or more apart: 8 samples' trimmed mean separates them
VERIFY_BYTES = 3 * 2**20 + 48  # no launch shape divides it evenly: every tail path runs
CHECK_POISON = 0xA5  # the byte the destination of a copy holds before the copy is checked


def kernel_name(kind: str, width: int, perf: dict) -> str:
    if perf["layout"] == "pipelined":
        return f"dram_copy_pipelined<{CTYPES[width]},{perf['unroll']}>"
    return f"dram_{kind}<{CTYPES[width]},{perf['unroll']},{LAYOUTS.index(perf['layout'])}>"


def perf_configs(kind: str):
    """Persistent grids (``blocks_per_sm`` blocks on every SM walking the whole buffer), then
    grids sized to the data (``blocks_per_sm`` None: as many blocks as the data needs)."""
    layouts = LAYOUTS + COPY_ONLY_LAYOUTS if kind == "copy" else LAYOUTS
    for bps, unroll, layout in itertools.product(BLOCKS_PER_SM, UNROLLS, layouts):
        yield {"threads": THREADS, "blocks_per_sm": bps, "unroll": unroll, "layout": layout}
    for threads in DATA_GRID_THREADS:
        yield {"threads": threads, "blocks_per_sm": None, "unroll": 1, "layout": "strided"}


def module_spec(kind: str, width: int) -> tuple:
    """The backend's module of (kind, width): every perf-config variant, one module."""
    return f"dram-{kind}-{width}", "dram.cu", sorted({kernel_name(kind, width, p) for p in perf_configs(kind)})


def kernel(b, kind: str, width: int, perf: dict):
    """Compiled on first use (prepare compiles them all ahead)."""
    return b.module(*module_spec(kind, width)).get_function(kernel_name(kind, width, perf))


def grid_blocks(sm_count: int, perf: dict, n_elements: int) -> int:
    if perf["blocks_per_sm"] is not None:
        return sm_count * int(perf["blocks_per_sm"])
    step = int(perf["threads"]) * int(perf["unroll"])
    blocks = -(-n_elements // step)
    if blocks > MAX_GRID_BLOCKS:
        raise UnsupportedConfig(f"{n_elements} elements need {blocks} blocks of {perf['threads']} threads; "
                                f"a grid holds at most {MAX_GRID_BLOCKS}")
    return blocks


def launcher(b, kind: str, width: int, perf: dict, size_bytes: int, src, dst):
    """A function of the sample index that launches one kernel on buffer set ``i % ROTATION``."""
    fn = kernel(b, kind, width, perf)
    n = np.uint64(size_bytes // width)
    grid, block = (grid_blocks(b.sm_count, perf, int(n)),), (perf["threads"],)
    stream, sink = b.stream, b.sink()
    if kind == "read":
        return lambda i: fn(grid, block, (src[i % ROTATION], n, sink), stream=stream)
    if kind == "write":
        return lambda i: fn(grid, block, (dst[i % ROTATION], n, np.uint32(0x2545F491 + i)), stream=stream)
    return lambda i: fn(grid, block, (src[i % ROTATION], dst[i % ROTATION], n), stream=stream)


def buffers(b, size_bytes: int):
    """Sources filled with random data (never zeros), destinations uninitialized, ROTATION sets;
    kept for consecutive points of the same size, the sweep's order."""
    def make():
        cp = b.cp
        b.check_free(2 * ROTATION * size_bytes)
        return {"src": [cp.random.random(size_bytes // 4, dtype=cp.float32).view(cp.uint8) for _ in range(ROTATION)],
                "dst": [cp.empty(size_bytes, dtype=cp.uint8) for _ in range(ROTATION)]}

    held = b.buffers(("dram", size_bytes), make)
    return held["src"], held["dst"]


def check_shape(b, kind: str, width: int, perf: dict, n_bytes: int = VERIFY_BYTES):
    """Raise unless this launch shape writes every element, right, on a size no launch divides
    evenly: a copy must equal its source in a poisoned destination, a write must leave no element
    zero. A read has no output to compare; its shape is checked through the copy kernel of the
    same shape, which walks the buffer the same way (``walk`` in kernels/dram.cu), so a read shape
    that skips elements fails here too. Each (kernel, width, shape) is checked once per backend.

    Poisoned by a memset on the kernel's stream and compared on the host, so that the check runs
    no kernel but the shape's own: CuPy compiles its own kernels (``dst == src``, ``cp.all``, a
    non-zero ``fill``) on first call, inside the GPU turn, and prepare cannot compile them ahead
    (a CuPy reduction is compiled in the call that launches it: ``_launch`` in
    cupy/_core/_reduction.pyx). On a fresh H200 (session 4, 2026-12-02) the first tuning job,
    which compiled them, took 5.76 s, against 0.60 s where CuPy's disk cache held them. The host
    compare costs a 3 MiB copy to the host and a compare per shape checked."""
    state = b.scratch(ID)
    kernel_kind = "write" if kind == "write" else "copy"
    done = state.setdefault("checked", set())
    key = (kernel_kind, int(width), tuple(sorted(perf.items())))
    if key in done:
        return
    cp = b.cp
    if "check_buffers" not in state:
        src = cp.random.random(n_bytes // 4, dtype=cp.float32).view(cp.uint8)
        state["check_buffers"] = (src, cp.empty(n_bytes, dtype=cp.uint8), src.get(), np.empty(n_bytes, np.uint8))
    src, dst, src_host, dst_host = state["check_buffers"]
    if kernel_kind == "copy":
        dst.data.memset_async(CHECK_POISON, n_bytes, b.stream)
        launcher(b, "copy", width, perf, n_bytes, [src] * ROTATION, [dst] * ROTATION)(0)
        b.stream.synchronize()
        if not np.array_equal(dst.get(out=dst_host), src_host):
            raise RuntimeError(f"{kernel_name('copy', width, perf)} did not copy every byte")
    else:
        dst.data.memset_async(0, n_bytes, b.stream)
        launcher(b, "write", width, perf, n_bytes, None, [dst] * ROTATION)(0)
        b.stream.synchronize()
        if not every_word_written(dst.get(out=dst_host), width):
            raise RuntimeError(f"{kernel_name('write', width, perf)} left elements unwritten")
    done.add(key)


def every_word_written(host_bytes, width: int) -> bool:
    """Whether no ``width``-byte word of ``host_bytes`` (a trailing partial word aside) is zero."""
    words = np.asarray(host_bytes, dtype=np.uint8)[: len(host_bytes) - len(host_bytes) % width]
    if width <= 8:
        return bool(np.all(words.view(f"u{width}")))
    halves = words.view("u8").reshape(-1, 2)  # a 16-byte word: two 8-byte halves, not both zero
    return bool(np.all(halves[:, 0] | halves[:, 1]))


def verify_kernels(b):
    """Check every copy and write shape of every width at once (check_shape), outside a sweep;
    a sweep checks the shapes it tunes fastest first until one passes (tune)."""
    for width, perf in itertools.product(WIDTHS, perf_configs("copy")):
        check_shape(b, "copy", width, perf)
        if perf["layout"] in LAYOUTS:
            check_shape(b, "write", width, perf)


def prepare(b, configs: list[dict]):
    """Compile every module the configs' kernels and their shape checks use, at once
    (``compile_modules``: NVRTC in parallel threads; one after another, the 15 modules took
    4.8-6.1 s on a fresh H200, session 4, 2026-12-02)."""
    tunes = any(c.get("calibration") == ID for c in configs)  # occupancy borrows the read kernel untuned
    specs = []
    for kind, width in sorted({(c["kind"], int(c["width_bytes"])) for c in configs}):
        specs.append(module_spec(kind, width))
        if kind == "read" and tunes:  # check_shape checks read shapes through the copy kernel
            specs.append(module_spec("copy", width))
    b.compile_modules(specs)


def tuning_problem(kind: str, width: int, *, l2_bytes: int, memory_bytes: int) -> dict:
    """The problem the launch shapes of (kind, width) are tuned on, the same for every point of
    it: the smallest size of the sweep's span (4x L2 in both suites), from the device alone, so that
    every process, worker and resumed sweep tunes on the same problem, whichever point it measures
    first.

    Why the smallest: it is where the shapes differ most in fixed cost, and the shape it picks
    keeps the line straight over the span. Tuned at the span's geometric middle (16x L2) instead,
    read and write picked grids sized to the data, whose achieved bandwidth grew with size (DRAM
    read 4361 to 4611 GB/s from 5 to 64x L2): the read line's residuals were 50x its measurement
    noise and its CI ±4.5%, against ±0.09% with shapes tuned at 4x L2 (H200, 2026-12-01,
    bench/results/2026-12-01-h200-ceilings.md)."""
    size = sizes("full", l2_bytes, memory_bytes, reference=True)[0]
    return {"calibration": ID, "kind": kind, "width_bytes": int(width), "size_bytes": size}


def tune(b, kind: str, width: int):
    """The launch shape of (kind, width): calib.tuning over perf_configs(kind) on
    tuning_problem(), every shape timed with TUNE_SAMPLES samples, then checked (check_shape)
    fastest first until one passes: the tuner's ``lazy_check``. Checked before timing, every shape
    was checked, 555 over the 15 (kind, width): at an estimated 2.5 ms a check (memset, launch,
    3 MiB to the host, compare), 1.4 s of a fresh H200's GPU turn (a least-squares fit of the 15
    tuning jobs' wall less their GPU time on shapes timed and shapes checked, three fresh quick
    suites of session 4, 2026-12-02). Remembered for the backend's life, and across processes in the autotune cache
    (family LAUNCH_SHAPE_FAMILY, keyed by the problem and the device's hard fields): a second
    ``calib run`` on the same machine skips the search. A backend without a fingerprint, or
    ``CALIB_AUTOTUNE=off``, keeps it in memory only."""
    from ..timing import StoppingRule
    from ..tuning import Tuner

    problem = tuning_problem(kind, width, l2_bytes=b.l2_bytes, memory_bytes=b.memory_bytes)
    size = problem["size_bytes"]
    state = b.scratch(ID)
    if "tuner" not in state:
        from ..autotune.tuning_cache import persistent_tuning_cache

        protocol = {"timer": "cuda events per launch", "tune_samples": TUNE_SAMPLES}
        state["tuner"] = Tuner(persistent_tuning_cache(LAUNCH_SHAPE_FAMILY, b, protocol=protocol))
    tuner = state["tuner"]
    quick = StoppingRule(min_samples=TUNE_SAMPLES, max_samples=TUNE_SAMPLES, batch=TUNE_SAMPLES)

    def time(perf):
        src, dst = buffers(b, size)
        return b.time_launches(launcher(b, kind, width, perf, size, src, dst), rule=quick, perf_config=perf)

    return tuner.tune(problem, perf_configs(kind), time, check=lambda perf: check_shape(b, kind, width, perf),
                      lazy_check=True)


def measure(b, config: dict):
    kind, width, size = config["kind"], int(config["width_bytes"]), int(config["size_bytes"])
    if width not in CTYPES or kind not in KINDS:
        raise UnsupportedConfig(f"no DRAM kernel for kind={kind!r}, width={width}")
    tuning = tune(b, kind, width)
    src, dst = buffers(b, size)
    measurement = b.time_launches(launcher(b, kind, width, tuning.winner, size, src, dst),
                                  perf_config=tuning.winner)
    return tuning.annotate(measurement)  # knobs alone, tuned_on, and the candidates timed now


def measure_memcpy(b, size_bytes: int):
    """``cudaMemcpyAsync`` device to device, timed like the kernels: the copy ceiling."""
    rt = b.cp.cuda.runtime
    src, dst = buffers(b, size_bytes)

    def launch(i):
        rt.memcpyAsync(dst[i % ROTATION].data.ptr, src[i % ROTATION].data.ptr, size_bytes,
                       rt.memcpyDeviceToDevice, b.stream.ptr)

    return b.time_launches(launch, perf_config={"api": "cudaMemcpyAsync D2D"})
