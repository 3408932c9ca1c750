"""Launch costs: host submit per launch, launch + completion latency, per-node cost in a graph.

Three sweeps, three linear models:
- ``overhead``: host wall time to submit N empty kernels back to back (no synchronization in
  between), ``t = t0 + N * launch.overhead_us``. This is the cost of a launch *from Python through
  CuPy*; a C++ runtime pays less, and the profile says which path was measured (method).
- ``latency``: host wall time of one launch + synchronize of a kernel spinning W dependent FMAs,
  ``t = launch.latency_us + W * c``: the intercept is the round trip of an empty kernel.
- ``graph``: event-timed replay of a CUDA graph of N empty kernels, ``t = t0 + N * launch.graph_node_us``.

The host-timed points of a sweep are taken in interleaved rounds of one sample each
(``measure_group``, ``calib.timing.interleave``): measured one after another, each point saw a
different state of the host's launch path, and three quick suites on one H200 host gave the
overhead to ±2.5%, ±9.6% and ±4.5% with the line missing by up to 3% (2026-12-01). Every point
takes every round, and rounds in which the host ran slow (another process on its CPU) are set
aside as a whole (``calib.timing.set_aside_unsteady_rounds``): the fits hold the steady host's
launch cost, and each set-aside round stays in the results with a warning.
"""

from __future__ import annotations

import time

from .._lazy import lazy
from ..backends.base import DeviceOutOfMemory, UnsupportedConfig
from ..fit import FitResult, fit_timed
from ..timing import set_aside_unsteady_rounds
from ._base import Param, line_figures, small_kernels

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
TITLE = "Launch costs"
INTRO = """Host cost to submit a kernel (N back-to-back launches from Python through CuPy, host clock), the
round trip of an empty kernel (intercept of launch + synchronize against the kernel's own work),
and the cost of one kernel node in a CUDA-graph replay (event-timed replays of graphs of N nodes)."""
READING = """`launch.overhead_us` is what a Python heuristic pays per launch through CuPy; a C++ runtime pays
less. When `launch.graph_node_us` is well under `launch.overhead_us`, many small kernels are worth a graph."""
# Times the host: measures while the other notebooks of a run wait (calib.runner.Turns).
HOST_TIMED = True
OVERHEAD, LATENCY, GRAPH_NODE = "launch.overhead_us", "launch.latency_us", "launch.graph_node_us"
PARAMETERS = (Param(OVERHEAD, "us", "host cost to submit one kernel from Python through CuPy"),
              Param(LATENCY, "us", "launch + completion round trip of an empty kernel"),
              Param(GRAPH_NODE, "us", "per-kernel cost inside a CUDA-graph replay"))
# Nuisance parameters of the simulated device (not profile parameters).
SIM_DEFAULTS = {"sim.launch_latency.submit_base_us": 3.0, "sim.launch_latency.spin_ns_per_iter": 4.0,
                "sim.launch_latency.graph_base_us": 2.5}

# Back-to-back launches stay well below the launch queue's depth: on an H200 host the submit
# started to block on a full queue past 192 queued empty kernels, and on another lent host already
# at 128 (bimodal samples, 5.9 instead of 4.7 us per launch; 2026-11-29). Hence at most 64. With
# this grid (six calls the same day) the full suite's CI was ±0.7-7% and the quick suite's ±4-23%,
# flagged; launch_latency run alone three times in a row on one lent host gave ±7.6%, ±14% and
# ±4.4%, with sample IQRs of 10-42%: the host's own noise, not the neighbouring notebooks'.
#
# Graphs start at 48 nodes: a smaller one's replay times the host's graph submit, not the GPU (H200,
# six quick and two full suites, 2026-12-01/02: sample IQR 8-20% of the median at 4 and 8 nodes,
# 2% at 16 and 32, under 0.5% from 48), and the noisy point ran to 400 samples, so the n/t² weights
# made it the line: in quick #3 8 nodes read 7.53 us against 6.62-6.80 in the other runs, and the
# node cost came out ±5.5%; fitted from 48 nodes up the same runs give ±0.16-1.5%.
SUITES = {
    "quick": {"overhead": [4, 8, 16, 24, 32, 48, 64], "latency": [0, 2000, 5000, 10000, 20000, 40000],
              "graph": [48, 64, 96, 128, 160, 192, 256]},
    "full": {"overhead": [4, 8, 12, 16, 20, 24, 32, 40, 48, 56, 64],
             "latency": [0, 1000, 2000, 5000, 10000, 15000, 20000, 30000, 40000, 60000],
             "graph": [48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]},
}


def plan(suite: str, **_) -> list[dict]:
    grid = SUITES[suite]
    return ([{"calibration": ID, "kind": "overhead", "count": n} for n in grid["overhead"]]
            + [{"calibration": ID, "kind": "latency", "spin_iters": w} for w in grid["latency"]]
            + [{"calibration": ID, "kind": "graph", "count": n} for n in grid["graph"]])


def footprint_bytes(config: dict) -> int:
    return 4096


def work(config: dict) -> float:
    return float(config["spin_iters"] if config["kind"] == "latency" else config["count"])


def default_truth(base: dict | None = None) -> dict:
    truth = {OVERHEAD: 6.0, LATENCY: 9.0, GRAPH_NODE: 1.1, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    out = []
    for kind, count, spin in zip(frame["kind"], frame.get("count", [None] * len(frame["kind"])),
                                 frame.get("spin_iters", [None] * len(frame["kind"]))):
        if kind == "overhead":
            out.append(truth["sim.launch_latency.submit_base_us"] + count * truth[OVERHEAD])
        elif kind == "latency":
            out.append(truth[LATENCY] + spin * truth["sim.launch_latency.spin_ns_per_iter"] * 1e-3)
        else:
            out.append(truth["sim.launch_latency.graph_base_us"] + count * truth[GRAPH_NODE])
    return np.asarray(out, dtype=float)


def fit(frame, *, robust: bool = False, source: str | None = None):
    frame = frame[frame["calibration"] == ID]
    result = FitResult(ID)
    for kind, name, part in (("overhead", OVERHEAD, "slope"), ("latency", LATENCY, "intercept"),
                             ("graph", GRAPH_NODE, "slope")):
        g = frame[frame["kind"] == kind]
        if len(g) < 3:
            result.failures[name] = f"{len(g)} measured point(s) of kind {kind!r}; a line needs at least 3"
            continue
        try:
            f = fit_timed(g, g["spin_iters" if kind == "latency" else "count"], robust=robust, fitting=name)
        except ValueError as exc:  # a point refused, named: this kind's parameter fails, not all three
            result.failures[name] = str(exc)
            continue
        result.models[name] = f
        rec = f.slope_record("us", source=source) if part == "slope" else f.intercept_record("us", source=source)
        if kind != "graph":  # what a C++ runtime pays is less: say which path was measured
            rec["method"] += "; host clock around launches from Python through CuPy"
            _say_set_aside(rec, g)
        result.records[name] = rec
    return result


def _say_set_aside(rec: dict, g) -> None:
    """A line fitted on the steady rounds says so, with how many rounds it left out: the value is
    the steady host's, and a run whose host was slow for most of it is not hidden."""
    if "n_set_aside" not in g:
        return
    aside = g["n_set_aside"].fillna(0)
    if (aside > 0).any():
        worst = int((aside / g["n_samples"]).to_numpy().argmax())
        n_aside, n_rounds = int(aside.iloc[worst]), int(g["n_samples"].iloc[worst])
        share = n_aside / n_rounds
        rec["method"] += "; steady rounds only"
        rec.setdefault("diagnostics", {})["set_aside_round_share"] = share
        # counted, not only a percentage: 2 rounds of 600 printed as "0%" (H200, 2026-12-02, session 5)
        rec.setdefault("flags", []).append(f"host unsteady: {n_aside} of {n_rounds} interleaved rounds "
                                           f"({share:.1%}) set aside (the host ran slow in them); "
                                           "fitted on the steady rounds")


def figures(frame, result, *, title) -> dict:
    return line_figures(result, title, {OVERHEAD: ("launches", 1), LATENCY: ("spin iterations", 1),
                                        GRAPH_NODE: ("graph nodes", 1)})


HOST_KINDS = ("overhead", "latency")


def measure_group(b, configs: list[dict]) -> list:
    """The host-timed points (overhead, latency) in interleaved rounds, then the graph points one by
    one (event-timed): a host's launch path changes speed between points measured one after another
    (``calib.timing.interleave``); rounds give every point of a line the same host. Every point
    takes every round, so that the rounds the host ran slow in can be set aside for all points at
    once (``calib.timing.set_aside_unsteady_rounds``); that costs the points which would have
    stopped early at most (400 - 50) x 160 us (quick grid, H200 2026-12-02)."""
    out: list = [None] * len(configs)
    host = [i for i, c in enumerate(configs) if c.get("kind") in HOST_KINDS]
    samplers, perf = [], []
    for i in host:
        sample, perf_config = _host_sampler(b, configs[i])
        samplers.append(sample)
        perf.append(perf_config)
    if samplers:
        taken = b.time_host_interleaved(samplers, perf_configs=perf, together=True)
        for i, m in zip(host, set_aside_unsteady_rounds(taken)):
            out[i] = m
    for i, c in enumerate(configs):
        if out[i] is None:
            try:
                out[i] = measure(b, c)
            except (DeviceOutOfMemory, UnsupportedConfig) as exc:  # that point fails, the others stand
                out[i] = exc
    return out


def _host_sampler(b, config: dict):
    stream = b.stream
    mod = small_kernels(b)
    empty, spin = mod.get_function("empty_kernel"), mod.get_function("spin_kernel")
    if config["kind"] == "overhead":
        n = int(config["count"])

        def sample():
            t0 = time.perf_counter()
            for _ in range(n):
                empty((1,), (32,), (), stream=stream)
            t1 = time.perf_counter()
            stream.synchronize()
            return (t1 - t0) * 1e6

        return sample, {"timer": "host perf_counter around N launches from Python/CuPy"}
    sink, iters = b.sink(), np.int32(config["spin_iters"])

    def sample():
        t0 = time.perf_counter()
        spin((1,), (32,), (sink, iters), stream=stream)
        stream.synchronize()
        return (time.perf_counter() - t0) * 1e6

    return sample, {"timer": "host perf_counter around launch + synchronize"}


def measure(b, config: dict):
    stream = b.stream
    mod = small_kernels(b)
    empty = mod.get_function("empty_kernel")
    kind = config["kind"]
    if kind in HOST_KINDS:
        sample, perf_config = _host_sampler(b, config)
        return b.time_host(sample, perf_config=perf_config)
    if kind == "graph":
        n = int(config["count"])
        try:
            stream.begin_capture()
            for _ in range(n):
                empty((1,), (32,), (), stream=stream)
            graph = stream.end_capture()
        except Exception as exc:  # a CuPy or driver without stream capture
            try:
                stream.end_capture()  # leave the stream usable for the points after this one
            except Exception:
                pass
            raise UnsupportedConfig(f"CUDA graph capture failed: {exc}") from None
        return b.time_launches(lambda i: graph.launch(stream), perf_config={"timer": "cuda events around graph replay"})
    raise UnsupportedConfig(f"no launch measurement {kind!r}")


def prepare(b, configs):
    small_kernels(b)
