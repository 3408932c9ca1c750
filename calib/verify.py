"""``calib verify``: does the profile still describe this machine? Re-measure a few sentinels, fast.

Four sentinel parameters, one per kind of bottleneck, are measured again with small sweeps of
their calibrations (the registry's ``plan``, the backend's ``measure``, the calibration's own
``fit``, as ``calib run`` does), within a time budget:

- ``memory.dram.read_bandwidth_gbps``: the 16-byte read line over 6 sizes from 4× to 29× L2 (every
  other size of the quick grid);
- ``compute.fp32.fma_tflops``: the FMA sweep of the quick suite;
- ``compute.bf16.tensor_tflops``: the bf16 cuBLAS sweep of the quick suite (fp16 where the
  profile has no bf16 value);
- ``launch.latency_us``: the launch + synchronize sweep of the quick suite (host-timed).

Each is **drifted** when the new estimate differs from the profile's both *significantly* (the
z-test of ``calib.diff.compare_estimates``: both standard errors from the CIs, on the log scale;
at a family-wise 5%, Bonferroni: each sentinel at 0.05 / the number tested) and *materially*
(beyond ``threshold``, default 2%, asv's factor). It is **unsettled** when the new estimate's CI
is wider than the threshold (the check cannot tell a change of that size), and **busy** when more
than a quarter of its samples' time was lost to interference: the estimates drop interfering
samples, so a GPU time-sliced with another process still gives its undisturbed rates while every
caller gets less (an H200 beside a process running matmuls, 2026-12-01: DRAM and FP32 estimates
unchanged). A host-timed sentinel (the launch latency) that drifted from a *shipped* profile,
measured on another host, is **host differs**: reported, not counted. A GPU-timed sentinel that
drifted from a shipped profile but lies within the values other machines of the model gave (the
``<slug>.machines.json`` beside it, ``calib.machines``) is **machine differs**: a shipped profile is
one machine's, and lent H200s differ by 4% in bf16 and 3% in DRAM read among themselves (2026-12-01). Otherwise
it is **consistent**. A check in which no GPU-timed sentinel could be compared verifies nothing (exit
1). On a GPU, two runs' CIs (±0.1%) are narrower than run-to-run variation, so significance
alone would flag every check; the material threshold is what keeps a quiet machine consistent.

The clocks, power and throttle reasons NVML read while the sentinels ran are reported with the
power limit, with the other processes NVML sees on the GPU; on the simulated device the report
says SIMULATED. Exit status: 0 consistent, 1 drifted, unsettled or busy, 2 bad input (no profile,
a profile of another device, an unreadable file).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

from . import fingerprint as fp
from .diff import compare_estimates
from .errors import CalibError

DEFAULT_BUDGET_S = 10.0
DEFAULT_THRESHOLD = 0.02
FAMILY_ALPHA = 0.05
# Share of the budget the sweeps' stopping rules may spend timing samples; the rest is for
# compiling, allocating, fitting and the matmul points' idle pauses.
MEASURING_SHARE = 0.5
MIN_POINT_BUDGET_S = 0.02
# Share of a sentinel's sample time lost to interference (the samples' total over what their
# undisturbed estimates account for) beyond which the GPU is busy with other work. Estimates drop
# interfering samples (``Measurement.center_us``), so a GPU time-sliced with another process can
# give undisturbed rates while a caller gets a fraction of them: this is what says so. Reference
# points: 1% on the H200-like simulated device (1% of samples slowed by 1 + Exp(1)), about 10% on
# the small, slow, noisy spec (5% slowed by 1 + 3 Exp(1)).
BUSY_LOST_SHARE = 0.25
# A re-measurement whose CI is wider than the threshold cannot tell a change of that size; it is
# "unsettled" unless the profile's own CI was nearly as wide (a noisy device measured as noisily as
# before: on the small, slow, noisy simulated spec the five-point bf16 line is ±1-4% either way).
UNSETTLED_FACTOR = 3.0
# ... and wider than this many thresholds: a CI of a few percent is still evidence (a change of 5x
# the threshold would show); under a competing process an H200 gave ±66% (FP32) and ±1000% (bf16).
UNSETTLED_THRESHOLDS = 5.0

READ = "memory.dram.read_bandwidth_gbps"
FP32 = "compute.fp32.fma_tflops"
BF16 = "compute.bf16.tensor_tflops"
FP16 = "compute.fp16.tensor_tflops"
LATENCY = "launch.latency_us"


class VerifyError(CalibError, ValueError):
    """verify cannot compare: no profile, an unreadable one, or one of another device."""


@dataclass(frozen=True)
class Sentinel:
    name: str
    calibration: str
    what: str

    def plan(self, backend, device: dict) -> list[dict]:
        from . import calibrations

        module = calibrations.get(self.calibration)
        sizes = dict(l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes,
                     sm_count=int(device.get("sm_count") or 132))
        if self.calibration == "memory_bandwidth":
            grid = module.sizes("quick", backend.l2_bytes, backend.memory_bytes, reference=True)[::2]
            return module.plan("quick", size_list=grid, kinds=("read",), widths=(module.REFERENCE_WIDTH,), **sizes)
        if self.calibration == "matmul_throughput":
            return module.plan("quick", dtypes=(self.name.split(".")[1],), **sizes)
        if self.calibration == "launch_latency":
            return [c for c in module.plan("quick", **sizes) if c["kind"] == "latency"]
        return module.plan("quick", **sizes)


# In the order measured: DRAM first (its launch-shape search at startup has brought the GPU out of its
# idle clock: an H200 idles at 345 MHz), the tensor-core matmul last (it heats the GPU towards its
# power cap, and its idle pauses take the most time).
SENTINELS = (
    Sentinel(READ, "memory_bandwidth", "DRAM read, 16-byte accesses"),
    Sentinel(LATENCY, "launch_latency", "launch + synchronize of an empty kernel"),
    Sentinel(FP32, "compute_throughput", "FP32 FMA throughput"),
    Sentinel(BF16, "matmul_throughput", "bf16 cuBLAS matmul"),
)
ALTERNATIVES = {BF16: Sentinel(FP16, "matmul_throughput", "fp16 cuBLAS matmul")}


@dataclass
class VerifyReport:
    profile: str
    device: str
    backend: str
    simulated: bool
    budget_s: float
    threshold: float
    alpha: float
    sentinels: list[dict] = field(default_factory=list)
    conditions: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    startup_s: float = 0.0

    @property
    def drifted(self) -> list[str]:
        return [s["name"] for s in self.sentinels if s["status"] == "drifted"]

    @property
    def not_consistent(self) -> list[str]:
        """Sentinels that drifted, or could not be confirmed (unsettled, busy): exit status 1."""
        return [s["name"] for s in self.sentinels if s["status"] in NOT_CONSISTENT]

    @property
    def compared(self) -> list[str]:
        """Sentinels re-measured and compared with the profile, with a verdict on the GPU (a
        "host differs" says nothing of the GPU)."""
        return [s["name"] for s in self.sentinels if s["status"] in COMPARED]

    @property
    def host_differs(self) -> list[str]:
        return [s["name"] for s in self.sentinels if s["status"] == "host differs"]

    @property
    def machine_differs(self) -> list[str]:
        return [s["name"] for s in self.sentinels if s["status"] == "machine differs"]

    @property
    def exit_code(self) -> int:
        # nothing compared (no sentinel in the profile, every one unmeasured) confirms nothing
        return 1 if self.not_consistent or not self.compared else 0

    def to_dict(self) -> dict:
        from .diff import _finite

        return _finite({"profile": self.profile, "device": self.device, "backend": self.backend,
                        "simulated": self.simulated, "budget_s": self.budget_s, "wall_s": self.wall_s,
                        "startup_s": self.startup_s, "threshold": self.threshold, "alpha": self.alpha,
                        "sentinels": self.sentinels, "conditions": self.conditions, "notes": self.notes,
                        "drifted": self.drifted, "not_consistent": self.not_consistent,
                        "result": _result(self)})


# ----------------------------------------------------------------------------------------------


def _reference(profile, device, software, notes: list[str]):
    """The profile to verify: a Profile, a path, or None for this machine's by the lookup order."""
    from .profile import Profile, ProfileError, ProfileWarning, load_profile, read_profile

    if isinstance(profile, Profile):
        return profile
    if profile is None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = load_profile(device=device, software=software, allow_foreign=True)
        if found.unusable:  # CALIB_PROFILE names a broken file: say so, not what an empty profile's fingerprint says
            raise VerifyError(found.unusable)
        if found.origin == "empty" or found.path is None:
            why = f" (looked for: {'; '.join(map(str, found.looked))})" if found.looked else ""
            broken = [str(w.message) for w in caught if issubclass(w.category, ProfileWarning)]  # why not used
            raise VerifyError("no profile for this machine to verify" + why + "".join(f"; {b}" for b in broken) +
                              ": give --profile PATH, or run `calib run`")
        notes.extend(str(w.message) for w in caught
                     if "another device" not in str(w.message) and "theoretical" not in str(w.message))
        return found
    try:
        return read_profile(profile)
    except ProfileError as exc:
        raise VerifyError(str(exc)) from None


NOT_CONSISTENT = ("drifted", "unsettled", "busy")
COMPARED = NOT_CONSISTENT + ("consistent", "machine differs")


def _result(r) -> str:
    if r.drifted:
        return "drift"
    if r.not_consistent:
        return "not confirmed"
    if not r.compared:
        return "nothing verified"
    if any(s["status"] == "skipped" for s in r.sentinels):
        return "consistent so far (incomplete)"
    return "consistent"


def _lost_share(measurements) -> float:
    """Share of the samples' total time beyond what their estimates account for: the time lost to
    interference (a time-sliced neighbour, a context switch)."""
    total = undisturbed = 0.0
    for m in measurements:
        samples = getattr(m, "samples_us", None)
        if samples is None or not len(samples):
            continue
        total += float(samples.sum())
        undisturbed += float(m.center_us) * len(samples)
    return max(0.0, 1.0 - undisturbed / total) if total > 0 else 0.0


def _relative_halfwidth(value, ci) -> float | None:
    if not ci or not value:
        return None
    return max(value - ci[0], ci[1] - value) / abs(value)


def _other_processes(b) -> list[dict]:
    """Compute processes on this GPU other than this one, as NVML lists them (a container may
    see none of them)."""
    clocks = getattr(b, "clocks", None)
    if clocks is None or not getattr(clocks, "available", False):
        return []
    import os

    try:
        procs = clocks.nvml.nvmlDeviceGetComputeRunningProcesses(clocks.handle)
    except Exception:  # noqa: BLE001 - NVML's errors, old bindings
        return []
    out = []
    for proc in procs:
        pid = getattr(proc, "pid", None)
        if pid is None or pid == os.getpid():
            continue
        used = getattr(proc, "usedGpuMemory", None)
        out.append({"pid": int(pid), "memory_bytes": int(used) if isinstance(used, int) else None})
    return out


def _shipped(ref) -> bool:
    """Whether ``ref`` is a profile calib ships (measured on another machine, another host)."""
    if ref.origin == "shipped":
        return True
    try:
        from .resources import shipped_profiles_dir

        return ref.path is not None and ref.path.resolve().parent == shipped_profiles_dir().resolve()
    except Exception:  # noqa: BLE001 - only a note depends on it
        return False


def _conditions(measurements, device: dict, simulated: bool) -> dict:
    if simulated:
        return {"simulated": True}
    readings = []
    for m in measurements:
        c = getattr(m, "clocks", None) or {}
        if c:
            readings.append(c)
    out = {"simulated": False}
    if readings:
        for key in ("sm_mhz", "mem_mhz", "temperature_c", "power_w"):
            lows = [r[f"{key}_min"] for r in readings if f"{key}_min" in r]
            highs = [r[f"{key}_max"] for r in readings if f"{key}_max" in r]
            if lows:
                out[f"{key}_min"], out[f"{key}_max"] = min(lows), max(highs)
        out["throttle_reasons"] = sorted({x for r in readings for x in r.get("throttle_reasons", [])})
        out["readings"] = sum(r.get("readings", 1) for r in readings)
    else:
        out["readings"] = 0
    for key in ("max_sm_mhz", "memory_clock_mhz", "power_limit_w"):
        if device.get(key) is not None:
            out[key] = device[key]
    return out


def _record_side(p) -> dict:
    return {"value": p.value, "ci95": list(p.ci95) if p.ci95 else None, "unit": p.unit}


def verify(profile=None, *, backend="auto", sim_spec=None, budget_s: float = DEFAULT_BUDGET_S,
           threshold: float = DEFAULT_THRESHOLD, thresholds: dict | None = None, family_alpha: float = FAMILY_ALPHA,
           device_index: int = 0, seed: int | None = None, sentinels=None, progress=None,
           machines=None) -> VerifyReport:
    """Re-measure the sentinels on ``backend`` (a name or a Backend) and compare with ``profile``
    (a Profile, a path, or None for this machine's). ``thresholds``: per-sentinel material
    thresholds that override ``threshold`` (``{"launch.latency_us": 0.3}``). ``progress``: a callable
    given one line per step (the CLI prints them). ``machines``: for a shipped profile, the other
    machines' values (a ``calib.machines`` path or ``{name: Spread}``); None reads the file beside
    the shipped profile where there is one."""
    t0 = time.perf_counter()
    if not (isinstance(budget_s, (int, float)) and budget_s > 0 and math.isfinite(budget_s)):
        raise VerifyError(f"--budget-s must be a positive number of seconds, not {budget_s!r}")
    thresholds = dict(thresholds or {})
    for value in (threshold, *thresholds.values()):
        if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
            raise VerifyError(f"--threshold must be a non-negative fraction (0.02 is 2%), not {value!r}")
    known = {x.name for x in (*SENTINELS, *ALTERNATIVES.values())}
    unknown = sorted(set(thresholds) - known)
    if unknown:
        raise VerifyError(f"no sentinel {', '.join(unknown)}: the sentinels are {', '.join(sorted(known))}")
    say = progress or (lambda line: None)
    from .backends import Backend, get_backend
    from .timing import StoppingRule

    wanted = list(sentinels or SENTINELS)
    point_budget = max(MIN_POINT_BUDGET_S, MEASURING_SHARE * budget_s / 30)  # about 30 points in all
    rule = StoppingRule(budget_s=point_budget)
    if isinstance(backend, Backend):
        b, owned = backend, False
    else:
        try:
            b = get_backend(backend, sim_spec=sim_spec, device=device_index, rule=rule, seed=seed)
        except ValueError as exc:  # a bad spec (SimSpecError is a CalibError too), an unknown backend name
            raise VerifyError(str(exc)) from None
        owned = True
    try:
        return _verify(b, profile, wanted, budget_s, threshold, thresholds, family_alpha, t0, say, machines)
    finally:
        if owned:
            b.close()


def _spreads(ref, machines, shipped: bool, notes: list[str]) -> dict:
    """The machines' spreads that apply: only against a shipped profile (a user's own profile
    describes the machine it was measured on, where any material change is drift)."""
    from .machines import MachinesError, path_beside, read_machines

    if not shipped:
        return {}
    if machines is None:
        if ref.path is None or not path_beside(ref.path).is_file():
            return {}
        machines = path_beside(ref.path)
    if not isinstance(machines, dict):
        try:
            machines = read_machines(machines)
        except MachinesError as exc:
            raise VerifyError(str(exc)) from None
    if machines:
        notes.append("a shipped profile is one machine's: a GPU-timed sentinel that differs from it but lies within "
                     "the values other machines of the model gave is reported as 'machine differs', not drift")
    return machines


def _verify(b, profile, wanted, budget_s, threshold, thresholds, family_alpha, t0, say, machines=None) -> VerifyReport:
    from . import calibrations
    from .profile import ProfileError

    device, software = b.fingerprint()
    notes: list[str] = []
    ref = _reference(profile, device, software, notes)
    hard = fp.hard_differences(ref.device, device)
    where = ref.path or "the profile"
    if hard:
        raise VerifyError(f"{where} was measured on another device ({'; '.join(hard)}): verify compares a profile "
                          "with the machine it describes; `calib run` calibrates this one")
    soft = fp.soft_differences(ref.software, software) + fp.condition_differences(ref.device, device)
    if soft:
        notes.append("measured under other software or settings: " + "; ".join(soft))
    shipped = _shipped(ref)
    if shipped:
        notes.append("the launch latency is the host's as much as the GPU's: against a profile measured on "
                     "another host (a shipped one) a difference there is reported, not counted as drift")
    spreads = _spreads(ref, machines, shipped, notes)

    chosen = []
    for s in wanted:
        if s.name not in ref and s.name in ALTERNATIVES and ALTERNATIVES[s.name].name in ref:
            s = ALTERNATIVES[s.name]
        chosen.append(s)
    tested = [s for s in chosen if s.name in ref]
    alpha = family_alpha / max(1, len(tested))
    report = VerifyReport(profile=str(where), device=str(device.get("name")), backend=b.name,
                          simulated=bool(b.simulated), budget_s=float(budget_s), threshold=threshold, alpha=alpha,
                          notes=notes)
    plans = {s.name: s.plan(b, device) for s in tested}
    b.prepare([c for configs in plans.values() for c in configs])  # compile before timing anything
    if not b.simulated and READ in plans:
        # the DRAM launch-shape search: once per machine (the autotune cache keeps it), startup, not measuring
        calibrations.get("memory_bandwidth").tune(b, "read", calibrations.get("memory_bandwidth").REFERENCE_WIDTH)
    report.startup_s = time.perf_counter() - t0
    t_measure = time.perf_counter()
    measured = []
    from .sweep import frame_from

    for s in chosen:
        row = {"name": s.name, "calibration": s.calibration, "what": s.what}
        report.sentinels.append(row)
        if s.name not in ref:
            row.update(status="not in profile", reason=f"{where} has no {s.name}")
            continue
        try:
            old = ref.record(s.name)
        except ProfileError as exc:
            row.update(status="not in profile", reason=str(exc))
            continue
        row["profile"] = _record_side(old)
        elapsed = time.perf_counter() - t_measure
        if elapsed > budget_s:
            row.update(status="skipped", reason=f"the budget of {budget_s:g} s was spent ({elapsed:.1f} s measuring)")
            continue
        say(f"measuring {s.name} ({len(plans[s.name])} points)")
        configs = plans[s.name]
        results = b.measure(configs)
        ok = [(c, m) for c, m in zip(configs, results) if not isinstance(m, Exception)]
        failed = [m for m in results if isinstance(m, Exception)]
        measured.extend(m for _, m in ok)
        row["lost_share"] = _lost_share([m for _, m in ok])
        row["budget_stopped"] = sum(getattr(m, "stop_reason", "") in ("budget", "max_samples") for _, m in ok)
        if len(ok) < 3:
            why = f"{len(ok)} of {len(configs)} points measured"
            row.update(status="unmeasured", reason=why + (f" (first failure: {failed[0]})" if failed else ""))
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = calibrations.fit(s.calibration, frame_from([c for c, _ in ok], [m for _, m in ok]))
        new = fit.records.get(s.name)
        if new is None:
            row.update(status="unmeasured", reason=fit.failures.get(s.name, "the fit gave no value"))
            continue
        row["now"] = {"value": new["value"], "ci95": new.get("ci95"), "unit": new.get("unit"), "n": new.get("n"),
                      "flags": list(new.get("flags") or [])}
        limit = thresholds.get(s.name, threshold)
        row["threshold"] = limit
        test = compare_estimates(old.value, old.ci95, new["value"], new.get("ci95"), threshold=limit,
                                 alpha=alpha)
        row.update({k: test[k] for k in ("ratio", "z", "p", "significant", "material")})
        drifted = bool(test["material"]) and test["significant"] is not False
        width = _relative_halfwidth(new["value"], new.get("ci95"))
        own = _relative_halfwidth(old.value, old.ci95) or 0.0
        too_wide = width is not None and width > max(UNSETTLED_THRESHOLDS * limit, UNSETTLED_FACTOR * own)
        if drifted and shipped and getattr(calibrations.get(s.calibration), "HOST_TIMED", False):
            # A shipped profile describes the GPU as another host saw it: one lent H200 host gave the
            # launch latency as 11.85 us, another 13.3 us with every GPU-timed sentinel within 2%
            # (2026-12-01). The GPU is not what differs, and the profile cannot say this host's value.
            row.update(status="host differs", reason="this host's launch path differs from the shipped profile's "
                                                     f"host by {test['ratio']:.3f}x: `calib run --notebook "
                                                     f"{s.calibration}` measures it here")
        elif drifted and s.name in spreads and not too_wide and spreads[s.name].contains(new["value"],
                                                                                        min(width or 0.0, limit)):
            # A shipped profile is one machine's: nine lent H200s gave bf16 at 791-822 TFLOP/s, seven DRAM reads at
            # 4571-4710 GB/s (2026-12-01), each measured to +-1%. Within that range (widened by this reading's CI,
            # at most the threshold, and never for a reading too wide to tell) this machine is one of them.
            sp = spreads[s.name]
            span = f"{sp.low / old.value:.3f}-{sp.high / old.value:.3f}x"
            row.update(status="machine differs", machines={"n": len(sp.values), "low": sp.low, "high": sp.high},
                       reason=f"{test['ratio']:.3f}x the shipped profile, within the {len(sp.values)} machines "
                              f"measured {sp.first} to {sp.last} ({span}): `calib run --notebook {s.calibration}` "
                              "measures this one")
        elif drifted:
            row["status"] = "drifted"
        elif too_wide:
            row.update(status="unsettled", reason=f"measured to ±{width:.1%}, too wide to tell a change of "
                                                  f"{limit:.0%}: the GPU is busy or noisy")
        elif row["lost_share"] > BUSY_LOST_SHARE:
            row.update(status="busy", reason=f"{row['lost_share']:.0%} of its sample time was lost to other work "
                                             "on the GPU: a caller gets less than the undisturbed rate")
        else:
            row["status"] = "consistent"
            if old.ci95 is None:
                row["reason"] = "the profile's record has no CI: counted as exact"
    report.conditions = _conditions(measured, device, bool(b.simulated))
    others = _other_processes(b)
    if others:
        report.conditions["other_processes"] = others
    report.wall_s = time.perf_counter() - t0
    return report


# ----------------------------------------------------------------------------------------------
# text


def _value(side) -> str:
    if not side:
        return "-"
    v, ci = side["value"], side.get("ci95")
    if ci and v > 0:
        return f"{v:.5g} ±{max(v - ci[0], ci[1] - v) / v:.2%}"
    return f"{v:.5g}"


def _overrides(r) -> str:
    other = [(s["name"], s["threshold"]) for s in r.sentinels if s.get("threshold", r.threshold) != r.threshold]
    return "".join(f"; {name}: {1 + t:g}" for name, t in other)


def format_report(r: VerifyReport) -> str:
    out = [f"calib verify: {r.profile} on {r.device} ({r.backend} backend)"]
    if r.simulated:
        out.append("SIMULATED device: a check of the pipeline, not of a real GPU")
    for note in r.notes:
        out.append(f"note: {note}")
    table = [("sentinel", "profile", "now", "now/profile", "p", "lost", "verdict")]
    for s in r.sentinels:
        ratio = f"{s['ratio']:.4f}" if s.get("ratio") is not None else "-"
        p = "-" if s.get("p") is None else ("<1e-4" if s["p"] < 1e-4 else f"{s['p']:.2g}")
        verdict = s["status"].upper() if s["status"] in NOT_CONSISTENT else s["status"]
        if s.get("reason") and s["status"] not in ("consistent", "drifted"):
            verdict += f": {s['reason']}"
        lost = f"{s['lost_share']:.0%}" if s.get("lost_share") is not None else "-"
        table.append((s["name"], _value(s.get("profile")), _value(s.get("now")), ratio, p, lost, verdict))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    out.append("")
    out.extend("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)
    out.append("")
    c = r.conditions
    if c.get("simulated"):
        out.append("clocks, power, throttling: SIMULATED device, nothing to read")
    elif c.get("readings"):
        parts = []
        if "sm_mhz_min" in c:
            parts.append(f"SM {c['sm_mhz_min']}-{c['sm_mhz_max']} MHz"
                         + (f" (max {c['max_sm_mhz']})" if c.get("max_sm_mhz") else ""))
        if "mem_mhz_min" in c:
            parts.append(f"memory {c['mem_mhz_min']}-{c['mem_mhz_max']} MHz")
        if "power_w_min" in c:
            parts.append(f"power {c['power_w_min']:.0f}-{c['power_w_max']:.0f} W")
        if c.get("power_limit_w"):
            parts.append(f"power limit {c['power_limit_w']:.0f} W")
        if "temperature_c_min" in c:
            parts.append(f"{c['temperature_c_min']}-{c['temperature_c_max']} C")
        parts.append("throttle reasons: " + (", ".join(c["throttle_reasons"]) or "none"))
        out.append("during the check: " + ", ".join(parts))
    else:
        limit = f" (power limit {c['power_limit_w']:.0f} W)" if c.get("power_limit_w") else ""
        out.append(f"during the check: NVML gave no clock readings{limit}")
    if c.get("other_processes"):
        out.append("other processes on this GPU: " + ", ".join(
            f"pid {o['pid']}" + (f" ({o['memory_bytes'] / 2**30:.1f} GiB)" if o.get("memory_bytes") else "")
            for o in c["other_processes"]))
    out.append(f"drifted = differs significantly (p < {r.alpha:.3g} each: family-wise 5%) and materially "
               f"(now/profile beyond {1 + r.threshold:g} or 1/{1 + r.threshold:g}{_overrides(r)}); unsettled = "
               f"measured less precisely than ±{UNSETTLED_THRESHOLDS * r.threshold:.0%} and {UNSETTLED_FACTOR:g}x "
               "the profile's CI; busy = over "
               f"{BUSY_LOST_SHARE:.0%} of the sample time lost to other work (the 'lost' column)")
    out.append(f"wall time {r.wall_s:.1f} s: startup {r.startup_s:.1f} s (CuPy, kernel compilation, the DRAM "
               f"launch-shape search; cached for later runs) + measuring {r.wall_s - r.startup_s:.1f} s against a "
               f"budget of {r.budget_s:g} s")
    if r.drifted:
        result = f"DRIFT in {', '.join(r.drifted)}"
        rest = [n for n in r.not_consistent if n not in r.drifted]
        if rest:
            result += f"; not confirmed: {', '.join(rest)}"
    elif r.not_consistent:
        result = f"NOT CONFIRMED: {', '.join(r.not_consistent)} (exit 1)"
    elif not r.compared:
        result = "NOTHING VERIFIED: no GPU-timed sentinel could be compared with the profile (exit 1)"
    else:
        result = _result(r).upper()
    if r.host_differs:
        result += f" ({', '.join(r.host_differs)}: host differs)"
    if r.machine_differs:
        result += f" ({', '.join(r.machine_differs)}: machine differs, within the model's machines)"
    out.append("result: " + result)
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# the command


def add_verify_parser(sub):
    from . import cli_args

    v = sub.add_parser("verify", help="re-measure a few sentinel parameters and report drift from the profile")
    v.add_argument("--profile", metavar="PATH", help="the profile to verify (default: this machine's by the lookup)")
    v.add_argument("--budget-s", type=cli_args.positive_float, default=DEFAULT_BUDGET_S,
                   help="time budget in seconds (default 10)")
    v.add_argument("--threshold", action="append", metavar="[NAME=]FRACTION", type=threshold_arg,
                   help="relative change that counts as drift (default 0.02); NAME=FRACTION for one sentinel, "
                        "e.g. launch.latency_us=0.3 (repeatable)")
    v.add_argument("--backend", choices=["auto", "cupy", "sim"], default="auto")
    v.add_argument("--sim-spec", metavar="FILE", help="JSON ground truth of the simulated device")
    v.add_argument("--device", type=cli_args.non_negative_int, default=0, help="CUDA device index")
    v.add_argument("--seed", type=cli_args.non_negative_int, help="the simulated device's noise seed")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=run_verify)


def threshold_arg(text: str) -> tuple[str, float]:
    """``--threshold``: ``FRACTION`` (every sentinel) or ``NAME=FRACTION`` (one), as ``(name or "",
    fraction)``; a fraction is a finite number at least 0. ``=0.1`` names no sentinel and is refused
    (it read as the default threshold before)."""
    import argparse

    from . import cli_args

    name, eq, number = text.rpartition("=")
    if eq and not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} names no sentinel: give FRACTION or NAME=FRACTION")
    try:
        value = cli_args.non_negative_float(number)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: a fraction or NAME=FRACTION, 0.02 is 2% ({exc})") from None
    return name, value


def _parse_thresholds(values) -> tuple[float, dict]:
    """The default threshold and the per-sentinel ones, from ``threshold_arg`` pairs or texts."""
    import argparse

    threshold, per = DEFAULT_THRESHOLD, {}
    for item in values:
        if isinstance(item, str):
            try:
                item = threshold_arg(item)
            except argparse.ArgumentTypeError as exc:
                raise VerifyError(f"--threshold {exc}") from None
        name, value = item
        if name:
            per[name] = value
        else:
            threshold = value
    return threshold, per


def run_verify(args) -> int:
    import json
    import sys

    threshold, thresholds = _parse_thresholds(args.threshold or [])
    report = verify(args.profile, backend=args.backend, sim_spec=args.sim_spec, budget_s=args.budget_s,
                    threshold=threshold, thresholds=thresholds, device_index=args.device, seed=args.seed,
                    progress=None if args.json else (lambda line: print(line, file=sys.stderr, flush=True)))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, allow_nan=False))
    else:
        print(format_report(report))
    return report.exit_code


__all__ = ["verify", "VerifyReport", "VerifyError", "SENTINELS", "Sentinel", "format_report"]
