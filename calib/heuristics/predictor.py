"""The predictor: a kernel's expected time from the machine profile, with a 95% interval.

A family's time model is a function ``model(descriptor, knobs, q) -> microseconds`` where ``q(name,
default)`` is the only way it reads machine parameters. The same model serves three purposes:

- the **prediction** (:func:`predict`): ``q`` reads the profile (``query``), so the built-in
  heuristics rank candidates with it;
- the **interval**: propagated from the CIs of exactly the parameters the model read, by the delta
  method with finite differences of one standard error per parameter (``se = CI half-width / 1.96``;
  the time moved by ``±se`` in each parameter, the contributions added in quadrature, as for
  independent estimates). Finite differences of one SE, not derivatives, because the models have
  kinks (``max`` of compute and memory, whole waves) where a derivative says nothing about a
  change of the size of the uncertainty. Deterministic: no random seed. Parameters without a CI
  (a hand-written profile, a default) contribute nothing and are listed in ``without_ci``;
- the **simulated device's truth** (``q`` reads the planted values), where each family adds the
  effects a profile cannot know (register allocation, block scheduling), so that the heuristics are
  tested against a device that is not their own model.

The building blocks here are the physics every family shares: fixed cost, bandwidth by memory
level (L2-resident working sets, the L2 ramp, DRAM) and access width, bytes in flight per SM
(Little's law), compute throughput, and waves over the SMs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

from .registry import read

Z95 = 1.959963984540054

# What an empty profile falls back to: datasheet-like numbers of a recent datacentre GPU, so
# that a heuristic still makes a sane choice (with a warning per name from the profile).
DEFAULTS = {
    "device.sm_count": 108,
    "memory.dram.fixed_cost_us": 5.0,
    "memory.l2.capacity_bytes": 40e6,
    "memory.l2.capacity_bytes.ramp_end": 60e6,
    "memory.l2.read_bandwidth_gbps": 6000.0,
    "memory.bytes_in_flight_per_sm": 32768.0,
    "compute.fp32.fma_tflops": 19.5,
    "compute.fp16.tensor_tflops": 312.0,
    "compute.bf16.tensor_tflops": 312.0,
    "compute.tf32.tensor_tflops": 156.0,
    "matmul.splitk.elements_reduced_per_second": 3e11,
    "normalization.additional_registers": 40.0,
    "normalization.max_persistent_elements_per_thread": 128.0,
}
DRAM_DEFAULT_GBPS = 1500.0  # 16-byte accesses; narrower ones derated below
WIDTH_DERATING = {16: 1.0, 8: 0.95, 4: 0.78, 2: 0.42, 1: 0.22}
WIDTHS = (1, 2, 4, 8, 16)


def q_of(profile) -> Callable:
    """``q(name, default)`` reading ``profile`` through :func:`calib.heuristics.registry.read`.
    ``q.device_name`` is the name in the profile's fingerprint (None without one) and ``q.device_arch``
    its compute capability (None without one, and on the simulated device): what a model whose data
    came from one GPU (normalization's corrections) checks before it applies them (:func:`measured_on`)."""
    def q(name, default=None):
        return read(profile, name, DEFAULTS.get(name, default) if default is None else default)

    device = getattr(profile, "device", None)
    name = device.get("name") if isinstance(device, dict) else None
    q.device_name = name if isinstance(name, str) else None
    q.device_arch = device_arch(device)
    software = getattr(profile, "software", None)
    q.software = dict(software) if isinstance(software, dict) else {}
    return q


# What picks the kernels a recorded correction learned, beside the GPU: the CUDA toolkit CuPy runs
# on (cuBLAS's kernel heuristics, NVRTC's register allocation) and CuPy (its batched-matmul and
# reduction paths). Compared at major.minor, the finest the profile records cuda_runtime at; the
# driver is left out, since it does not choose kernels.
KERNEL_SOFTWARE = ("cuda_runtime", "cupy")
_software_warned: set = set()
_declined_collectors: list = []  # declined_corrections() sets, innermost last


class _Declined(set):
    """The corrections declined for other software; ``borrowed``: those applied from another GPU
    model of the same architecture."""

    def __init__(self):
        super().__init__()
        self.borrowed: set = set()


class declined_corrections:
    """``with declined_corrections() as seen:`` ``seen`` collects "what: change; ..." for each
    correction :func:`measured_on` declined inside the block for other software (the warning is
    given once a process; an evaluation records every one it ran without), and ``seen.borrowed``
    each one it applied from another GPU model of the profile's architecture."""

    def __enter__(self) -> set:
        self.seen = _Declined()
        _declined_collectors.append(self.seen)
        return self.seen

    def __exit__(self, *exc):
        _declined_collectors.remove(self.seen)
        return False


def _major_minor(version: str) -> tuple:
    """"13.2" and "13.2.1" -> ("13", "2"); a missing minor is "0" ("14" is "14.0")."""
    parts = [v.strip() for v in version.strip().split(".")]
    return tuple((parts + ["0"])[:2])


def _differences(recorded: dict | None, current: dict | None, label: str = "") -> list[str]:
    out = []
    for name in KERNEL_SOFTWARE:
        was, now = (recorded or {}).get(name), (current or {}).get(name)
        if isinstance(was, str) and isinstance(now, str) and _major_minor(was) != _major_minor(now):
            out.append(f"{label}{name} {was} -> {now}")
    return out


def software_differences(q, software: dict | None) -> list[str]:
    """The KERNEL_SOFTWARE fields that ``software`` (what a correction was fitted under) and the
    profile behind ``q`` both record and that disagree at major.minor, as "field recorded -> profile"."""
    return _differences(software, getattr(q, "software", None))


def running_software() -> dict:
    """The CUDA runtime and CuPy of this process where CuPy is already imported here (a live
    heuristic's kernels are this process's, whatever its profile recorded), else {}: importing CuPy
    is not the predictor's to do. Spelled as the fingerprints spell them (fingerprint.cuda_version)."""
    import sys

    cupy = sys.modules.get("cupy")
    if cupy is None:
        return {}
    if _running.get("module") is not cupy:  # asked once per CuPy module: every model call checks it
        from ..fingerprint import cuda_version

        try:
            found = {"cuda_runtime": cuda_version(cupy.cuda.runtime.runtimeGetVersion()), "cupy": str(cupy.__version__)}
        except Exception:  # noqa: BLE001 - a CuPy without a runtime to ask: nothing known, as without CuPy
            found = {}
        _running.update(module=cupy, software=found)
    return _running["software"]


_running: dict = {}


def recorded_software(recordings) -> dict:
    """The KERNEL_SOFTWARE that every recording ran under: what a correction fitted on them records.
    ``recordings``: (evaluation, profile) path pairs; each evaluation's own "software" (where it
    records one: the older ones do not) and its profile's must agree, since the evaluation ran the
    kernels whose times are learned and may have read a profile measured elsewhere. Recordings under
    different software, or a profile that does not say, make no one correction: a HeuristicError
    names them."""
    import json
    from pathlib import Path

    from ..profile import load_profile
    from .registry import HeuristicError, read_text

    seen = {}
    for evaluation, profile in recordings:
        ran = tuple(load_profile(profile, device=None, software=None).software.get(n) for n in KERNEL_SOFTWARE)
        try:
            own = json.loads(read_text(Path(evaluation), "recorded evaluation", HeuristicError)).get("software")
        except ValueError as exc:
            raise HeuristicError(f"recorded evaluation {evaluation} is not JSON ({exc})") from None
        differ = _differences(dict(zip(KERNEL_SOFTWARE, ran)), own) if isinstance(own, dict) else []
        if differ:
            raise HeuristicError(f"recorded evaluation {evaluation} ran under other software than its profile "
                                 f"{profile}: {'; '.join(differ)}")
        seen[str(profile)] = ran
    kinds = set(seen.values())
    if len(kinds) != 1 or not all(isinstance(v, str) and v for v in next(iter(kinds))):
        raise HeuristicError(f"the recordings' profiles do not all record one {' / '.join(KERNEL_SOFTWARE)}: "
                             + "; ".join(f"{p}: {v}" for p, v in seen.items()))
    return dict(zip(KERNEL_SOFTWARE, kinds.pop()))


def device_arch(device) -> str | None:
    """The compute capability ("9.0") of a fingerprint, None where it records none or is the
    simulated device's (whose truth is the plain model: no GPU's correction applies to it)."""
    if not isinstance(device, dict) or device.get("simulated"):
        return None
    cc = device.get("compute_capability")
    return cc if isinstance(cc, str) and re.fullmatch(r"\d+\.\d+", cc) else None


def measured_on(q, device: str, software: dict | None = None, what: str = "a correction",
                arch: str | None = None) -> bool:
    """Whether data measured on ``device`` (a correction fitted on its recordings) applies to the
    profile behind ``q``: a profile of that GPU model, or, where the data records its GPU's compute
    capability ``arch``, of another GPU of that architecture; and, where both record it, under the
    ``software`` it was measured with, in the profile and, where CuPy is imported, in this process
    (:func:`running_software`). What the corrections learned is how the compiled kernels run against
    the plain model, which reads the profile's own bandwidths and throughputs: the compiler (NVRTC,
    cuBLAS's kernels) targets the architecture, not the model, and on an H100 the H200's corrections
    took normalization's worst case from 0.686 to 0.938 and split-K's from 0.827 to 0.950 (seed 64,
    2026-12-07; bench/results/2026-12-07-h100-own-profile/). A correction applied across GPU models is
    noted for an evaluation (:class:`declined_corrections`' ``borrowed``), not warned about.
    A profile of the GPU under other software, or a process running other software, warns once (a
    HeuristicWarning naming ``what``) and gets the plain model; a profile that records no software is
    given the benefit of the doubt, as before corrections recorded theirs."""
    name = getattr(q, "device_name", None)
    same_model = name == device
    if not same_model and (arch is None or getattr(q, "device_arch", None) != arch):
        return False
    changed = software_differences(q, software) + _differences(software, running_software(), "this process's ")
    if changed:
        key = (what, tuple(changed))
        for seen in _declined_collectors:
            seen.add(f"{what}: {'; '.join(changed)}")
        if key not in _software_warned:
            _software_warned.add(key)
            import warnings

            from .registry import HeuristicWarning

            warnings.warn(f"{what} was fitted on {device} under other software ({'; '.join(changed)}): it is not "
                          "applied, the plain model predicts (`calib heuristics evaluate` measures how well)",
                          HeuristicWarning, stacklevel=2)
        return False
    if not same_model:
        for seen in _declined_collectors:
            seen.borrowed.add(f"{what}: fitted on {device}, applied on {name} (compute capability {arch})")
    return True


def recorded_arch(profiles) -> str:
    """The compute capability of the GPU every one of ``profiles`` (paths) was measured on: what a
    correction fitted on their recordings records, so that it applies to that architecture
    (:func:`measured_on`). Profiles of different architectures, or one that records none, make no
    one correction: a HeuristicError names them."""
    from ..profile import load_profile
    from .registry import HeuristicError

    seen = {str(p): device_arch(load_profile(p, device=None, software=None).device) for p in profiles}
    kinds = set(seen.values())
    if len(kinds) != 1 or None in kinds:
        raise HeuristicError("the recordings' profiles do not all record one compute capability: "
                             + "; ".join(f"{p}: {v}" for p, v in seen.items()))
    return kinds.pop()


def q_of_values(values: dict, device: dict | None = None) -> Callable:
    """``q`` over a plain dict of values (the simulated device's truth, a perturbed profile)."""
    device = device or {}

    def q(name, default=None):
        if name.startswith("device."):
            v = device.get(name[7:])
        else:
            v = values.get(name)
        if v is None:
            return DEFAULTS.get(name, default) if default is None else default
        return v

    return q


# ----------------------------------------------------------------------------------------------
# shared physics

def width_of(nbytes: int) -> int:
    """The access width (bytes) a profile parameter exists for: the largest of 1..16 not above."""
    w = 1
    for cand in WIDTHS:
        if cand <= nbytes:
            w = cand
    return w


def dram_gbps(q, traffic: str, width_bytes: int) -> float:
    """DRAM bandwidth for ``traffic`` (read, write, copy) at an access width, from
    ``memory.dram.<traffic>_bandwidth_gbps.align<width>``, else the 16-byte value derated."""
    w = width_of(width_bytes)
    base = q(f"memory.dram.{traffic}_bandwidth_gbps", DRAM_DEFAULT_GBPS)
    return q(f"memory.dram.{traffic}_bandwidth_gbps.align{w}", base * WIDTH_DERATING[w])


def l2_fraction(q, working_set_bytes: float) -> float:
    """Share of the traffic L2 serves for a working set that is re-read (timed back to back):
    all of it up to ``memory.l2.capacity_bytes``, none past ``...ramp_end``, linear between."""
    cap = q("memory.l2.capacity_bytes", DEFAULTS["memory.l2.capacity_bytes"])
    end = q("memory.l2.capacity_bytes.ramp_end", max(cap * 1.5, DEFAULTS["memory.l2.capacity_bytes.ramp_end"]))
    if working_set_bytes <= cap:
        return 1.0
    if working_set_bytes >= end or end <= cap:
        return 0.0
    return (end - working_set_bytes) / (end - cap)


# The scale of a working-set threshold that is about the cache's size (pointwise's COVER_L2, STRIDE_L2
# and margin levels): the hardware L2 (the fingerprint's ``l2_bytes``, the same 62.9 MB on every H200
# host) times L2_SHARE, not the measured ``memory.l2.capacity_bytes``. Those thresholds were fitted
# in multiples of the capacity of the profiles the H200 recordings ran with, 41.4-47.1 MB on hosts 1,
# 2, 4 and 7 (mean 43.9 MB, 0.70 of the L2; bench/results/2026-12-0[12]-h200-*/profile*-full.json),
# but the measured capacity scatters by host and run more than its CI (+-3-10%) says: session 4's
# full runs on three more hosts (2026-12-02) measured 36.9-37.1 MB, and replaying the recordings A-P
# with them moved pointwise's choices on 43-48 MB sets (worst 0.745 on N, 0.914 with its own
# profile). Not fitted: pointwise's replays of A-P are the same for every share from 0.66 to 0.80
# (worst 0.852, geomean >= 0.986) and lose from 0.64 down (0.62: worst 0.819). Without a fingerprint
# (a hand-written profile, the simulated device's truth) the measured capacity stands in.
L2_SHARE = 0.70


def l2_scale_bytes(q) -> float:
    """L2_SHARE x the hardware L2 (``device.l2_bytes``), else ``memory.l2.capacity_bytes``. A value
    that is no size (infinite, a bool: ``read`` passes an infinite one, the simulated truth's dict
    either) counts as absent: an infinite scale put every working set in L2, ``True`` at 0.7 bytes."""
    hardware = q("device.l2_bytes", 0.0)
    if (isinstance(hardware, (int, float)) and not isinstance(hardware, bool) and math.isfinite(hardware)
            and hardware > 0):
        return L2_SHARE * float(hardware)
    return q("memory.l2.capacity_bytes", DEFAULTS["memory.l2.capacity_bytes"])


# A working set streamed once per launch (a library op called back to back) keeps its L2 hits only
# while it fits: on an H200 (2026-12-01) cupy.sum of 26 MB ran from L2 and of 72 MB (1.6x the
# capacity) wholly at DRAM speed, and pointwise kernels of 54 MB ran at the DRAM copy bandwidth,
# where the read sweep of ``cache_hierarchy`` (re-reading its set within one kernel) still hit L2
# at 121 MB. Served by L2 up to STREAMED_L2_START of the capacity, by DRAM from STREAMED_L2_END.
STREAMED_L2_START, STREAMED_L2_END = 0.9, 1.125


def streamed_l2_fraction(q, working_set_bytes: float, scale_bytes: float | None = None) -> float:
    """Share of the traffic L2 serves for a working set streamed once per launch: all of it up to
    STREAMED_L2_START x the scale, none from STREAMED_L2_END x, linear between. The scale is
    ``memory.l2.capacity_bytes`` unless ``scale_bytes`` is given (pointwise, normalization and the
    learned model pass :func:`l2_scale_bytes`, the hardware L2's share, so that they do not follow the
    measured capacity's scatter; split-K keeps the measured capacity)."""
    cap = scale_bytes
    if cap is None:
        cap = q("memory.l2.capacity_bytes", DEFAULTS["memory.l2.capacity_bytes"])
    lo, hi = STREAMED_L2_START * cap, STREAMED_L2_END * cap
    if working_set_bytes <= lo:
        return 1.0
    if working_set_bytes >= hi:
        return 0.0
    return (hi - working_set_bytes) / (hi - lo)


def stream_us(q, nbytes: float, working_set_bytes: float, width_bytes: int, traffic: str = "copy") -> float:
    """Time to move ``nbytes`` at full occupancy: L2 and DRAM shares at their bandwidths, both
    derated by the access width (narrow accesses cost instructions at either level)."""
    if nbytes <= 0:
        return 0.0
    f = l2_fraction(q, working_set_bytes)
    dram = dram_gbps(q, traffic, width_bytes)
    l2 = q("memory.l2.read_bandwidth_gbps", DEFAULTS["memory.l2.read_bandwidth_gbps"])
    l2 *= dram / dram_gbps(q, traffic, 16)
    return nbytes * (f / (l2 * 1e3) + (1.0 - f) / (dram * 1e3))


_C90 = (1 / 0.9) ** 3 - 1  # eff(1) = 0.9: "bytes in flight per SM for 90% of DRAM bandwidth"


def inflight_efficiency(q, bytes_in_flight_per_sm: float) -> float:
    """Fraction of the bandwidth reached with this many bytes in flight per SM: Little's law with a
    soft knee, 0.9 at ``memory.bytes_in_flight_per_sm`` (the parameter's definition)."""
    need = q("memory.bytes_in_flight_per_sm", DEFAULTS["memory.bytes_in_flight_per_sm"])
    x = max(bytes_in_flight_per_sm, 1e-9) / need
    return (1.0 + _C90 / x**3) ** (-1.0 / 3.0)


def sm_count(q) -> int:
    return int(q("device.sm_count", DEFAULTS["device.sm_count"]))


def fixed_us(q) -> float:
    """A kernel's fixed cost on the GPU's clock (event-timed): the DRAM read line's intercept."""
    return q("memory.dram.fixed_cost_us", DEFAULTS["memory.dram.fixed_cost_us"])


def imbalance(blocks: int, sms: int) -> float:
    """max over SMs / mean blocks per SM: how much longer the busiest SM works than the average."""
    if blocks <= 0:
        return 1.0
    return math.ceil(blocks / sms) / (blocks / sms)


# ----------------------------------------------------------------------------------------------
# predictions with intervals

@dataclass(frozen=True)
class Prediction:
    time_us: float
    ci95: tuple[float, float]
    parameters: dict = field(default_factory=dict)  # name -> value the model read
    contributions_us: dict = field(default_factory=dict)  # name -> SD of the time from its CI
    without_ci: tuple = ()
    # where the time itself is expected: the learned predictor's (ci95 plus the kernel's scatter between
    # sizes and the model's error of shape) or a family model's (ci95 widened by the model's error recorded
    # on the profile's GPU, calib.heuristics.model_error); None where only the parameters' CIs are known
    pi95: tuple | None = None

    @property
    def rel_halfwidth(self) -> float:
        return (self.ci95[1] - self.ci95[0]) / 2 / self.time_us if self.time_us > 0 else math.inf

    def to_dict(self) -> dict:
        out = {"time_us": self.time_us, "ci95": list(self.ci95), "parameters": dict(self.parameters),
               "contributions_us": dict(self.contributions_us), "without_ci": list(self.without_ci)}
        if self.pi95 is not None:
            out["pi95"] = list(self.pi95)
        return out


def _se_of(profile, name: str) -> float | None:
    """Standard error of a parameter from its record's CI, or None (no record, no CI)."""
    if name.startswith("device."):
        return None
    rec = getattr(profile, "record", None)
    if rec is None:
        return None
    try:
        r = rec(name)
    except Exception:  # noqa: BLE001 - a missing record: the default has no CI
        return None
    ci = getattr(r, "ci95", None)
    if not ci or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in ci):
        return None
    return (ci[1] - ci[0]) / 2 / Z95


def predict_model(model: Callable, descriptor, knobs, profile, *, ses: dict | None = None) -> Prediction:
    """``model(descriptor, knobs, q)`` evaluated on ``profile`` with its delta-method interval.

    ``ses``: standard errors by name, in place of the profile's CIs (tests, a profile in memory)."""
    seen: dict = {}
    base_q = q_of(profile)

    def q(name, default=None):
        v = base_q(name, default)
        seen.setdefault(name, v)
        return v

    q.device_name = base_q.device_name  # a model with data of one GPU model checks it (q_of)
    q.device_arch, q.software = base_q.device_arch, base_q.software
    t = float(model(descriptor, knobs, q))
    contrib, without = {}, []
    for name, value in list(seen.items()):
        se = (ses or {}).get(name) if ses is not None else _se_of(profile, name)
        if not se or not isinstance(value, (int, float)):
            without.append(name)
            continue

        def shifted(delta, name=name, value=value):
            def qq(n, d=None):
                return value + delta if n == name else q(n, d)

            qq.device_name, qq.device_arch, qq.software = q.device_name, q.device_arch, q.software
            return float(model(descriptor, knobs, qq))

        lo_v = value - se
        if lo_v <= 0:  # a positive parameter: a one-sided difference stands in
            contrib[name] = abs(shifted(se) - t)
        else:
            contrib[name] = abs(shifted(se) - shifted(-se)) / 2
    sd = math.sqrt(sum(c * c for c in contrib.values()))
    return Prediction(t, (max(t - Z95 * sd, 0.0), t + Z95 * sd), dict(seen), contrib, tuple(without))


def rank(model: Callable, descriptor, candidates, profile) -> list[tuple[float, object]]:
    """(predicted us, candidate) for every candidate, fastest first (ties: the order given)."""
    q = q_of(profile)
    scored = [(float(model(descriptor, c, q)), i, c) for i, c in enumerate(candidates)]
    scored.sort(key=lambda x: (x[0], x[1]))
    return [(t, c) for t, _, c in scored]
