"""The simulated GPU: a test instrument and a demo, never a measurement.

Its ground truth is a JSON spec whose ``params`` keys are profile parameter names (the true values)
plus a noise model; it turns each sweep point into sample times through the same physical models
that the fits assume, so a calibration on it must recover the planted values inside their CIs.
A whole sweep is simulated at once (one matrix of samples), so a coverage test over hundreds of
seeds takes seconds.

Spec (every key optional; defaults are H200-like)::

    {"name": "H200-like",
     "device": {"sm_count": 132, "l2_bytes": 62914560, "memory_bytes": 150000000000},
     "params": {"memory.dram.read_bandwidth_gbps": 4300.0, ...},
     "noise": {"rel_sd": 0.01, "outlier_rate": 0.01, "outlier_scale": 1.0, "seed": 0},
     "pace_s": 0.0}

``pace_s`` makes each measured point take that much wall time, as a slow GPU would: for
exercising progress bars, workers that die mid-job and sweeps killed half way.

Noise: each sample is ``t * (1 + rel_sd * N(0,1))``; with probability ``outlier_rate`` a sample is
also slowed by a factor ``1 + outlier_scale * Exp(1)`` (a context switch, a neighbour's kernel).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from .. import calibrations, strict_json
from ..errors import CalibError
from ..fingerprint import software_fingerprint
from ..timing import Measurement, StoppingRule
from .base import Backend, DeviceOutOfMemory, UnsupportedConfig

DEFAULT_DEVICE = {"sm_count": 132, "l2_bytes": 60 * 2**20, "memory_bytes": 143771 * 2**20,
                  # what calib.limits computes the theoretical limits from (an H200's: 4814 GB/s DRAM,
                  # 66.9 TFLOP/s FP32); a spec may add "fp32_lanes_per_sm" (default 128)
                  "memory_bus_width_bits": 6016, "memory_clock_mhz": 3201, "max_sm_mhz": 1980}
# Fingerprint fields a spec's "device" may set besides the sizes
_DEVICE_PROPERTIES = ("memory_bus_width_bits", "memory_clock_mhz", "max_sm_mhz", "fp32_lanes_per_sm", "power_limit_w")
DEFAULT_NOISE = {"rel_sd": 0.01, "outlier_rate": 0.01, "outlier_scale": 1.0, "seed": 0}

# Bounds that no GPU a spec could describe falls outside: a spec past them made a run fail with a
# ZeroDivisionError (an L2 of 1 byte), a NaN profile (a relative SD of 50) or an empty one (a device
# of 1 kB, every buffer dropped), or plant numbers that overflow the models (a bandwidth of 1e300).
MIN_MEMORY_BYTES = 2**26  # 64 MiB: room for the smallest sweeps (a test device of 256 MiB checks out-of-memory points)
MIN_L2_BYTES = 2**20
MAX_REL_SD = 1.0  # noise as large as the time itself; past it a run ended in NaN (rel_sd 50)
PARAM_RANGE = (1e-9, 1e15)
# The largest value of each "device" field: far past any GPU (an H200 has 132 SMs, 141 GB, 60 MiB of
# L2, a 6016-bit bus at 3201 MHz, SMs at 1980 MHz, 700 W), small enough that every count fits the
# databases' 64-bit integers and the limits calib.limits multiplies out of them stay finite. Past
# them, sm_count 10**40 failed every notebook (an OverflowError storing it, one generic line at the
# end), and max_sm_mhz 1e300 lost a finished run's profile in a ValueError traceback.
DEVICE_MAX = {"sm_count": 2**16, "l2_bytes": 2**50, "memory_bytes": 2**50, "memory_bus_width_bits": 2**16,
              "memory_clock_mhz": 1e6, "max_sm_mhz": 1e6, "fp32_lanes_per_sm": 2**16, "power_limit_w": 1e6}
# pace_s is the wall time of one point (a slow GPU's is seconds); time.sleep raised OverflowError
# on 1e300, and a pace of hours is a typo, not a slow GPU.
MAX_PACE_S = 60.0
# An outlier slowed by more than a thousand times its time is lost either way; 1e308 made every
# sample infinite (overflow warnings, every sentinel "busy").
MAX_OUTLIER_SCALE = 1000.0
# The device is named "calib simulated GPU (NAME)" in the results database's 128-character column:
# a longer or non-UTF-8 name failed every notebook's session, said only once at the end.
MAX_NAME_CHARS = 128 - len("calib simulated GPU ()")
L2_PARAMS = ("memory.l2.capacity_bytes", "memory.l2.capacity_bytes.ramp_end")


class SimSpecError(CalibError, ValueError):
    pass


def _scale_l2_truth(truth: dict, given: dict, l2_bytes: int):
    """The planted L2 capacity and ramp end follow the spec's L2 where the spec plants neither: the
    H200-like 40 MB capacity on a device of 4 MB of L2 sat far outside the sweep (which scales with
    ``l2_bytes``), and the fit was biased. A capacity above the L2 itself is refused."""
    cap, end = L2_PARAMS
    if l2_bytes != DEFAULT_DEVICE["l2_bytes"]:
        scale = l2_bytes / DEFAULT_DEVICE["l2_bytes"]
        for name in L2_PARAMS:
            if name not in given:
                truth[name] = truth[name] * scale
    if truth[cap] > l2_bytes:
        raise SimSpecError(f"spec parameter {cap!r} is {truth[cap]:g}: more than the device's L2 "
                           f"(device.l2_bytes {l2_bytes})")
    if truth[end] <= truth[cap]:
        raise SimSpecError(f"spec parameter {end!r} ({truth[end]:g}) must exceed {cap!r} ({truth[cap]:g})")


def load_spec(spec: str | Path | dict | None) -> dict:
    """Read a spec (path, dict or None for the defaults), check it and fill in every default.

    Every key is checked: a misspelt parameter name used to be ignored in silence (the device then
    kept its default, and the calibration "recovered" a value nobody planted), and ``true`` passed
    for a bandwidth of 1 GB/s. An unknown key is refused with the nearest known one."""
    source = "built-in H200-like defaults"
    if spec is None:
        raw = {}
    elif isinstance(spec, dict):
        raw, source = spec, "given as a dict"
    else:
        raw, source = _read_spec_file(Path(spec)), str(spec)
    if not isinstance(raw, dict):
        raise SimSpecError(f"a simulated-device spec must be a JSON object, not {type(raw).__name__}")
    _known_keys("simulated-device spec", raw, ("name", "device", "params", "noise", "pace_s"))
    _check_name(raw.get("name", ""))
    params = _section(raw, "params")
    _known_keys("spec 'params'", params, _parameter_names())
    for name, value in params.items():
        _number(f"spec parameter {name!r}", value, positive=True)
        if not PARAM_RANGE[0] <= value <= PARAM_RANGE[1]:
            raise SimSpecError(f"spec parameter {name!r} is {value:g}: outside what any GPU's profile holds "
                               f"({PARAM_RANGE[0]:g} to {PARAM_RANGE[1]:g} in its unit)")
    truth = {}
    try:
        for module in calibrations.all_calibrations():  # each calibration's model and H200-like defaults
            truth.update(module.default_truth(params))
    except ValueError as exc:  # the models' own consistency checks
        raise SimSpecError(str(exc)) from None
    device = _section(raw, "device")
    _known_keys("spec 'device'", device, tuple(DEFAULT_DEVICE) + _DEVICE_PROPERTIES)
    for key, value in device.items():
        _number(f"spec device.{key}", value, positive=True, integer=key.endswith(("_bytes", "_count", "_bits", "_sm")))
        if value > DEVICE_MAX[key]:
            raise SimSpecError(f"spec device.{key} is {_shown(value)}: more than any GPU has (at most "
                               f"{DEVICE_MAX[key]:g})")
    full = {**DEFAULT_DEVICE, **device}
    if full["memory_bytes"] < MIN_MEMORY_BYTES:
        raise SimSpecError(f"spec device.memory_bytes is {full['memory_bytes']}: the calibrations' buffers need at "
                           f"least {MIN_MEMORY_BYTES // 2**20} MiB of device memory")
    if not MIN_L2_BYTES <= full["l2_bytes"] < full["memory_bytes"]:
        raise SimSpecError(f"spec device.l2_bytes is {full['l2_bytes']}: an L2 of at least {MIN_L2_BYTES // 2**20} "
                           "MiB and smaller than the device's memory")
    _scale_l2_truth(truth, params, full["l2_bytes"])
    noise = _section(raw, "noise")
    _known_keys("spec 'noise'", noise, tuple(DEFAULT_NOISE))
    noise = {**DEFAULT_NOISE, **noise}
    for key in ("rel_sd", "outlier_rate", "outlier_scale"):
        _number(f"spec noise.{key}", noise[key])
    _number("spec noise.seed", noise["seed"], integer=True)
    if not 0 <= noise["outlier_rate"] < 0.5:
        raise SimSpecError(f"noise.outlier_rate must be in [0, 0.5), got {noise['outlier_rate']}")
    if noise["outlier_scale"] > MAX_OUTLIER_SCALE:
        raise SimSpecError(f"noise.outlier_scale must be at most {MAX_OUTLIER_SCALE:g}, got {noise['outlier_scale']:g}")
    if noise["rel_sd"] > MAX_REL_SD:
        raise SimSpecError(f"noise.rel_sd must be at most {MAX_REL_SD} (noise larger than the time itself draws "
                           f"most samples below zero), got {noise['rel_sd']}")
    pace_s = raw.get("pace_s", 0.0)
    _number("spec pace_s (seconds)", pace_s)
    if pace_s > MAX_PACE_S:
        raise SimSpecError(f"spec pace_s is {_shown(pace_s)}: at most {MAX_PACE_S:g} seconds a point")
    return {"name": raw.get("name", "H200-like"), "device": full,
            "params": truth, "noise": noise, "pace_s": float(pace_s), "source": source}


# A spec is a few hundred bytes; a FIFO or /dev/zero given as one must not hang or fill memory.
_MAX_SPEC_BYTES = 1 << 20


def _read_spec_file(path: Path):
    import stat as _stat

    try:
        mode = path.stat().st_mode
        if not _stat.S_ISREG(mode):
            raise SimSpecError(f"simulated-device spec {path} is not a regular file")
        with open(path, "rb") as f:
            data = f.read(_MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SimSpecError(f"cannot read simulated-device spec {path}: {exc.strerror or exc}") from None
    if len(data) > _MAX_SPEC_BYTES:
        raise SimSpecError(f"simulated-device spec {path} is over {_MAX_SPEC_BYTES} bytes: not a spec")
    try:  # utf-8-sig: a byte-order mark (Windows editors) is not part of the JSON
        return strict_json.loads(data.decode("utf-8-sig"), object_pairs_hook=strict_json.unique_keys)
    except UnicodeDecodeError as exc:
        raise SimSpecError(f"simulated-device spec {path} is not UTF-8 text ({exc.reason} at byte {exc.start})"
                           ) from None
    except (ValueError, RecursionError) as exc:
        # ValueError besides bad JSON: an integer of over 4300 digits (it was a traceback), NaN or
        # 1e400, and a key written twice ({"sm_count": 10, "sm_count": 132} planted the second in silence)
        raise SimSpecError(f"simulated-device spec {path} is not valid JSON: {str(exc).split(';')[0][:200]}") from None


def _check_name(name):
    """The spec's name: text the results database can store in the device's name."""
    if not isinstance(name, str):
        raise SimSpecError(f"spec 'name' must be a string, got {name!r:.80}")
    if len(name) > MAX_NAME_CHARS:
        raise SimSpecError(f"spec 'name' is {len(name)} characters long; at most {MAX_NAME_CHARS}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate escaped in the JSON, "\ud800"
        raise SimSpecError(f"spec 'name' {name!r:.80} is not UTF-8 text (character {exc.start + 1} is "
                           f"{name[exc.start]!r})") from None


def _shown(value) -> str:
    """A number in a message: an integer of hundreds of digits by its digit count."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else f"an integer of {len(text)} digits"


def _section(raw: dict, key: str) -> dict:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SimSpecError(f"spec {key!r} must be an object, not {type(value).__name__}")
    return dict(value)


def _parameter_names() -> tuple[str, ...]:
    names = []
    for module in calibrations.all_calibrations():
        names += module.default_truth({})
    return tuple(names)


def _known_keys(where: str, given: dict, known):
    import difflib

    for key in given:
        if key not in known:
            near = difflib.get_close_matches(str(key), [str(k) for k in known], n=1, cutoff=0.6)
            names = sorted(set(map(str, known)))
            listed = ", ".join(names) if len(names) <= 12 else f"{len(names)} names, e.g. {', '.join(names[:8])}"
            hint = f"; did you mean {near[0]!r}?" if near else f"; known: {listed}"
            raise SimSpecError(f"unknown keys in {where}: {key!r}{hint}")


def _bad_size(config: dict) -> str | None:
    """Why a point's sizes and counts (``*_bytes``, ``n``, ``iters``, ...) are none a kernel could run:
    each must be a whole number of at least 1 (not ``true``), or None."""
    for key, value in config.items():
        if key.endswith(("_bytes", "_count")) or key in ("n", "iters", "threads", "rows", "cols", "m", "k"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return f"{key} is {value!r}: a size or count is a whole number of at least 1"
    return None


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer of hundreds of digits
        return False


def _number(where: str, value, *, positive: bool = False, integer: bool = False):
    """A finite number (never a boolean: ``true`` is not 1 GB/s), >= 0, or > 0 with ``positive``."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not _finite(value):
        raise SimSpecError(f"{where} must be a {'whole ' if integer else ''}number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise SimSpecError(f"{where} must be a {'positive' if positive else 'non-negative'} number, got {value!r}")


class SimBackend(Backend):
    name = "sim"
    simulated = True

    def __init__(self, spec=None, rule: StoppingRule | None = None, seed: int | None = None):
        super().__init__(rule)
        self.spec = load_spec(spec)
        if seed is not None:
            self.spec["noise"]["seed"] = int(seed)
        self.rng = np.random.default_rng(self.spec["noise"]["seed"])

    @property
    def spec_sha256(self) -> str:
        import hashlib

        planted = {k: self.spec[k] for k in ("device", "params", "noise", "pace_s")}
        planted["noise"] = {k: v for k, v in planted["noise"].items() if k != "seed"}  # a seed is a run's
        return hashlib.sha256(json.dumps(planted, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def truth(self) -> dict:
        return self.spec["params"]

    @property
    def l2_bytes(self) -> int:
        return int(self.spec["device"]["l2_bytes"])

    @property
    def memory_bytes(self) -> int:
        return int(self.spec["device"]["memory_bytes"])

    def fingerprint(self) -> tuple[dict, dict]:
        d = self.spec["device"]
        device = {"name": f"calib simulated GPU ({self.spec['name']})", "simulated": True,
                  "compute_capability": "sim", "sm_count": d["sm_count"], "memory_bytes": d["memory_bytes"],
                  "l2_bytes": d["l2_bytes"], "sim_spec": self.spec["source"],
                  # what the spec plants, not its path: an edited spec is another simulated device
                  "sim_spec_sha256": self.spec_sha256}
        device.update({k: d[k] for k in _DEVICE_PROPERTIES if k in d})
        return device, software_fingerprint(backend="sim")

    def sample_matrix(self, true_us: np.ndarray, n: int) -> np.ndarray:
        """(points x n) noisy samples around ``true_us``."""
        noise = self.spec["noise"]
        shape = (true_us.size, n)
        samples = true_us[:, None] * (1.0 + noise["rel_sd"] * self.rng.standard_normal(shape))
        if noise["outlier_rate"] > 0:
            hit = self.rng.random(shape) < noise["outlier_rate"]
            slowed = samples * (1.0 + noise["outlier_scale"] * self.rng.exponential(1.0, shape))
            samples = np.where(hit, slowed, samples)
        return np.maximum(samples, 1e-3)

    def true_time_us(self, configs: list[dict]) -> np.ndarray:
        out = np.empty(len(configs))
        by_calibration: dict[str, list[int]] = {}
        for i, c in enumerate(configs):
            by_calibration.setdefault(c.get("calibration"), []).append(i)
        for calibration_id, idx in by_calibration.items():
            module = calibrations.get(calibration_id)
            keys = {k for i in idx for k in configs[i]}
            frame = {k: [configs[i].get(k) for i in idx] for k in keys}
            out[idx] = module.true_time_us(frame, self.truth)
        return out

    def compile_report(self, buffered: list[int]) -> list[dict]:
        """Registers and spills of the persistent kernel at each N, as a compiler would report."""
        return calibrations.get("registers").simulate(buffered, self.truth, self.rng)

    def measure(self, configs: list[dict]) -> list[Measurement | Exception]:
        results: list[Measurement | Exception] = [None] * len(configs)  # type: ignore[list-item]
        ok = []
        for i, c in enumerate(configs):
            calibration_id = c.get("calibration")
            module = calibrations.get(calibration_id) if calibration_id in calibrations.IDS else None
            bad = _bad_size(c)
            if module is None or module.KIND != "timed":
                results[i] = UnsupportedConfig(f"the simulated device has no model for calibration {calibration_id!r}")
            elif bad:  # a GPU could not run it either; timed, it recorded a result for a size of -5 bytes
                results[i] = UnsupportedConfig(bad)
            elif module.footprint_bytes(c) > self.memory_bytes:
                results[i] = DeviceOutOfMemory(
                    f"needs {module.footprint_bytes(c) / 2**30:.1f} GiB of device memory; the simulated device "
                    f"has {self.memory_bytes / 2**30:.1f} GiB")
            else:
                ok.append(i)
        if ok and self.spec["pace_s"]:
            time.sleep(self.spec["pace_s"] * len(ok))
        if ok:
            true_us = self.true_time_us([configs[i] for i in ok])
            samples = self.sample_matrix(true_us, self.rule.max_samples)
            taken, reasons = self.rule.samples_needed(samples)
            protocol = {"timer": "simulated", "rule": self.rule.to_dict(), "perf_config": {"simulated": True},
                        "noise": self.spec["noise"]}
            for row, i in enumerate(ok):
                results[i] = Measurement(samples[row, : taken[row]], stop_reason=str(reasons[row]),
                                         protocol=protocol, simulated=True)
        return results
