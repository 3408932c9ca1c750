"""Split-K reduction: summing S partial M×N fp32 tiles into one.

``t = t0 + S*M*N / rate`` at fixed M×N over split factors S; the intercept absorbs writing the
output tile once. ``matmul.splitk.elements_reduced_per_second`` is the rate.
"""

from __future__ import annotations

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import fit_rates
from ._base import Param, line_figures, small_kernels

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]

TITLE = "Split-K reduction rate"
INTRO = """Sums S partial M×N fp32 tiles into one, over split factors S at a fixed tile, and fits
`t = t0 + S·M·N / rate`: `matmul.splitk.elements_reduced_per_second`."""
READING = """A split-K heuristic weighs the extra reduction, `(S−1)·M·N / rate`, against the parallelism S
buys; the reduction is memory-bound, so the rate is close to DRAM read bandwidth over 4 bytes."""
RATE = "matmul.splitk.elements_reduced_per_second"
PARAMETERS = (Param(RATE, "elements/s", "split-K partial-tile reduction rate"),)
SIM_DEFAULTS = {"sim.matmul_splitk.fixed_us": 6.0}
THREADS = 256
# An 8192×8192 tile (256 MiB per split) keeps every point far beyond L2: with a 4096×4096 tile the
# small split factors ran partly from an H200's 60 MiB L2 and bent the line (2026-11-29).
SUITES = {"quick": {"mn": 8192 * 8192, "splits": [4, 5, 6, 8, 10, 12, 16]},
          "full": {"mn": 8192 * 8192, "splits": [4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24]}}


def plan(suite: str, *, memory_bytes: int, **_) -> list[dict]:
    s = SUITES[suite]
    return [{"calibration": ID, "mn": s["mn"], "splits": k} for k in s["splits"]
            if footprint_bytes({"mn": s["mn"], "splits": k}) < memory_bytes / 2]


def footprint_bytes(config: dict) -> int:
    return 4 * config["mn"] * (config["splits"] + 1)


def elements(config_or_frame):
    return np.asarray(config_or_frame["splits"], dtype=float) * np.asarray(config_or_frame["mn"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {RATE: 1.05e12, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    return truth["sim.matmul_splitk.fixed_us"] + elements(frame) / truth[RATE] * 1e6


def fit(frame, *, robust: bool = False, source: str | None = None):
    return fit_rates(frame, ID, work=elements, name=RATE, scale=1.0, unit="elements/s", robust=robust,
                     source=source)


def figures(frame, result, *, title) -> dict:
    return line_figures(result, title, {RATE: ("elements reduced (millions)", 1e6)})


def measure(b, config: dict):
    mn, splits = int(config["mn"]), int(config["splits"])
    if mn % 4:
        raise UnsupportedConfig(f"splitk_reduce reads 16-byte vectors: M*N = {mn} is not a multiple of 4")
    cp = b.cp
    kernel = small_kernels(b).get_function("splitk_reduce")

    def make():
        b.check_free(2 * 4 * mn * (splits + 1))
        return {"src": [cp.random.random(splits * mn, dtype=cp.float32) for _ in range(2)],
                "dst": [cp.empty(mn, dtype=cp.float32) for _ in range(2)]}

    held = b.buffers(("splitk", mn, splits), make)
    src, dst = held["src"], held["dst"]
    grid, block = (b.sm_count * 8,), (THREADS,)
    kernel(grid, block, (src[0], dst[0], np.uint64(mn // 4), np.int32(splits)), stream=b.stream)
    b.stream.synchronize()
    ref = src[0].reshape(splits, mn).sum(axis=0)
    err = float(cp.linalg.norm(dst[0] - ref) / cp.linalg.norm(ref))
    if not err < 1e-5:
        raise RuntimeError(f"splitk_reduce is wrong at S={splits}: relative error {err:.2e}")
    return b.time_launches(lambda i: kernel(grid, block, (src[i % 2], dst[i % 2], np.uint64(mn // 4),
                                                          np.int32(splits)), stream=b.stream),
                           perf_config={"threads": THREADS, "blocks_per_sm": 8, "load": "16 B, 4 splits in flight"})


def prepare(b, configs):
    small_kernels(b)
