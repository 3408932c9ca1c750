"""Shared-memory bandwidth of the whole device.

Every thread reads 16-byte words from its block's shared memory (conflict-free: a warp's 32 reads
fall in 32 different banks' rows), ``iters`` times; ``t = t0 + bytes / bandwidth`` over iteration
counts gives ``memory.shared.bandwidth_gbps``.
"""

from __future__ import annotations

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import fit_rates
from ._base import Param, line_figures, small_kernels

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "Shared-memory bandwidth"
INTRO = """Every thread of 2048 per SM reads 16-byte words from its block's shared memory, conflict-free,
over iteration counts; `t = t0 + bytes / bandwidth` gives `memory.shared.bandwidth_gbps` for the
whole device."""
READING = """Divide by the SM count and the SM clock for bytes per clock per SM (128 on Hopper by the
datasheet): a staging scheme that reads shared memory more than this allows is bound by it."""
BANDWIDTH = "memory.shared.bandwidth_gbps"
PARAMETERS = (Param(BANDWIDTH, "GB/s", "shared-memory reads, whole device"),)
SIM_DEFAULTS = {"sim.shared_memory.fixed_us": 4.0}
THREADS_PER_SM = 2048
BYTES_PER_ACCESS = 16
SUITES = {"quick": [1024, 2048, 4096, 6144, 8192, 12288, 16384],
          "full": [512, 1024, 2048, 3072, 4096, 6144, 8192, 10240, 12288, 16384, 20480, 24576]}


def plan(suite: str, *, sm_count: int = 132, **_) -> list[dict]:
    return [{"calibration": ID, "iters": n, "threads": sm_count * THREADS_PER_SM, "access_bytes": BYTES_PER_ACCESS}
            for n in SUITES[suite]]


def footprint_bytes(config: dict) -> int:
    return 4096


def bytes_read(c):
    return (np.asarray(c["iters"], dtype=float) * np.asarray(c["threads"], dtype=float)
            * np.asarray(c["access_bytes"], dtype=float))


def default_truth(base: dict | None = None) -> dict:
    truth = {BANDWIDTH: 32000.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    return truth["sim.shared_memory.fixed_us"] + bytes_read(frame) / (truth[BANDWIDTH] * 1e3)


def fit(frame, *, robust: bool = False, source: str | None = None):
    return fit_rates(frame, ID, work=bytes_read, name=BANDWIDTH, scale=1e9, unit="GB/s", robust=robust,
                     source=source)


def figures(frame, result, *, title) -> dict:
    return line_figures(result, title, {BANDWIDTH: ("GB read", 1e9)})


def measure(b, config: dict):
    if config.get("access_bytes") != 16:
        raise UnsupportedConfig("the shared-memory kernel reads 16-byte words")
    kernel = small_kernels(b).get_function("smem_read")
    threads = int(config["threads"])
    grid, block = ((threads + 255) // 256,), (256,)
    args = (b.sink(), np.int32(config["iters"]))
    return b.time_launches(lambda i: kernel(grid, block, args, stream=b.stream),
                           perf_config={"threads": 256, "blocks": grid[0], "smem_bytes_per_block": 16384})


def prepare(b, configs):
    small_kernels(b)
