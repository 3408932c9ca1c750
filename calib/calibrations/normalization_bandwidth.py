"""Achieved bandwidth of a persistent normalization kernel by access width.

A persistent softmax (each 256-thread block holds one row of 4096 fp32 values in registers, 16 per
thread) runs over row counts far beyond L2, loading and storing 4, 8 or 16 bytes per access.
``t = t0 + bytes / bandwidth``, bytes read plus bytes written (as for the copy bandwidth), gives
``normalization.load_bandwidth_gbps.align{4,8,16}``: what a normalization scheduler gets for the
vector width it picks, reductions and exponentials included.
"""

from __future__ import annotations

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import fit_rates
from ._base import Param, line_figures

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]

TITLE = "Normalization load bandwidth by access width"
# fit, plot and write after measuring: 5.7 s (three quick suites on an H200, 2026-12-01); see _base.TAIL_S
TAIL_S = 5.7
INTRO = """A persistent softmax (rows of 4096 fp32 values held in registers, 16 per thread of a 256-thread
block) over row counts far beyond L2, loading and storing 4, 8 or 16 bytes per access;
`t = t0 + bytes / bandwidth` (bytes read plus written) gives `normalization.load_bandwidth_gbps.alignN`."""
READING = """The ratio between the widths is what a normalization heuristic weighs when the row length or
alignment forbids the widest vector loads."""
WIDTHS = (4, 8, 16)
COLS = 4096
THREADS = 256
ELEMENTS_PER_THREAD = 16
SIM_DEFAULTS = {"sim.normalization_bandwidth.fixed_us": 5.0}
SUITES = {"quick": [16384, 24576, 32768, 49152, 65536, 98304, 131072],
          "full": [16384, 20480, 24576, 32768, 40960, 49152, 65536, 81920, 98304, 131072, 163840]}


def param_name(width: int) -> str:
    return f"normalization.load_bandwidth_gbps.align{width}"


PARAMETERS = tuple(Param(param_name(w), "GB/s", f"persistent softmax, {w}-byte accesses, bytes read + written")
                   for w in WIDTHS)


def plan(suite: str, *, memory_bytes: int = 2**34, **_) -> list[dict]:
    return [{"calibration": ID, "width_bytes": w, "rows": r, "cols": COLS} for r in SUITES[suite] for w in WIDTHS
            if footprint_bytes({"rows": r, "cols": COLS}) < memory_bytes / 2]


def footprint_bytes(config: dict) -> int:
    return 2 * 2 * 4 * config["rows"] * config["cols"]  # input and output, two sets


def bytes_moved(c):
    return 2.0 * 4.0 * np.asarray(c["rows"], dtype=float) * np.asarray(c["cols"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {param_name(4): 3500.0, param_name(8): 3900.0, param_name(16): 4000.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    bw = np.array([truth[param_name(int(w))] for w in frame["width_bytes"]])
    return truth["sim.normalization_bandwidth.fixed_us"] + bytes_moved(frame) / (bw * 1e3)


def fit(frame, *, robust: bool = False, source: str | None = None):
    return fit_rates(frame, ID, work=bytes_moved, name=lambda w: param_name(int(w)), by="width_bytes",
                     scale=1e9, unit="GB/s", robust=robust, source=source)


def figures(frame, result, *, title) -> dict:
    return line_figures(result, title, {param_name(w): ("GB moved", 1e9) for w in WIDTHS})


def softmax_module(b):
    return b.module("softmax", "persistent.cu",
                    [f"softmax_rows<{ELEMENTS_PER_THREAD},{w // 4}>" for w in WIDTHS])


def prepare(b, configs):
    softmax_module(b)


def measure(b, config: dict):
    """Persistent softmax rows at an access width, checked against CuPy before timing."""
    cp = b.cp
    width, rows, cols = int(config["width_bytes"]), int(config["rows"]), int(config["cols"])
    if cols != ELEMENTS_PER_THREAD * THREADS or width not in WIDTHS:
        raise UnsupportedConfig(f"the softmax kernel is compiled for rows of {ELEMENTS_PER_THREAD * THREADS} floats "
                                f"and {', '.join(map(str, WIDTHS))}-byte access")
    name = f"softmax_rows<{ELEMENTS_PER_THREAD},{width // 4}>"
    kernel = softmax_module(b).get_function(name)

    def make():
        b.check_free(2 * 2 * 4 * rows * cols)
        return {"src": [cp.random.standard_normal((rows, cols), dtype=cp.float32) for _ in range(2)],
                "dst": [cp.empty((rows, cols), dtype=cp.float32) for _ in range(2)]}

    held = b.buffers(("normalization", rows, cols), make)
    src, dst = held["src"], held["dst"]
    grid, block = (rows,), (THREADS,)
    dst[0].fill(cp.nan)
    kernel(grid, block, (src[0], dst[0]), stream=b.stream)
    b.stream.synchronize()
    x = src[0][:256].astype(cp.float64)
    ref = cp.exp(x - x.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    err = float(cp.linalg.norm(dst[0][:256] - ref) / cp.linalg.norm(ref))
    if not err < 1e-4:
        raise RuntimeError(f"{name} is wrong: relative error {err:.2e}")
    return b.time_launches(lambda i: kernel(grid, block, (src[i % 2], dst[i % 2]), stream=b.stream),
                           perf_config={"threads": THREADS, "elements_per_thread": ELEMENTS_PER_THREAD,
                                        "access_bytes": width})
