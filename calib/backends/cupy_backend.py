"""The real GPU, through CuPy.

Timing follows DESIGN.md's protocol: CUDA events around each launch, warm-up first, inputs rotated
across buffer sets so that no sample starts with its data in L2, repetitions chosen by the
:class:`~calib.timing.StoppingRule`, and NVML clocks and throttle reasons read while the kernels
run.

The backend offers primitives (compiled modules, buffers, the stream, event and host timing
loops, clocks, a per-calibration scratch space); what to launch and how is each calibration's
``measure`` (``calib.calibrations``), so that a calibration is one module.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .. import calibrations
from .._optional import require
from ..fingerprint import cuda_version, software_fingerprint
from ..nvml import ClockReader, merge_readings
from ..timing import Measurement, StoppingRule
from .base import Backend, DeviceOutOfMemory, UnsupportedConfig

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
WARMUP_LAUNCHES = 3
FREE_MEMORY_MARGIN = 0.9
# Compiles in flight at once (compile_modules): memory_bandwidth's 15 modules on a 16-core H200 host.
# Bounded because an NVRTC compile holds a few hundred MB of host memory (the reason gpuowl bounds
# its parallel NVRTC build: github.com/gwoltman/gpuowl, pull request 32).
MAX_COMPILE_THREADS = 16


class CupyBackend(Backend):
    name = "cupy"
    simulated = False

    def __init__(self, device: int = 0, rule: StoppingRule | None = None):
        super().__init__(rule)
        self.cp = require("cupy", "the cupy backend")
        cp = self.cp
        try:
            ndev = cp.cuda.runtime.getDeviceCount()
        except cp.cuda.runtime.CUDARuntimeError as exc:
            raise RuntimeError(f"CUDA is not usable here: {exc}") from None
        if device >= ndev:
            raise RuntimeError(f"no CUDA device {device}: this machine has {ndev}")
        self.index = device
        self.device = cp.cuda.Device(device)
        self.device.use()
        self.props = cp.cuda.runtime.getDeviceProperties(device)
        self.stream = cp.cuda.Stream(non_blocking=True)
        pci = None
        try:
            pci = self.device.pci_bus_id
        except Exception:
            pass
        self.clocks = ClockReader(pci, device)
        self._modules: dict = {}
        self._held: dict = {}
        self._held_key = None
        self._scratch: dict[str, dict] = {}
        self._sink = None

    # -- identity ---------------------------------------------------------------------------
    def _attr(self, name):
        return self.props.get(name)

    def fingerprint(self) -> tuple[dict, dict]:
        cp = self.cp
        name = self._attr("name")
        name = name.decode() if isinstance(name, bytes) else str(name)
        device = {"name": name, "compute_capability": f"{self._attr('major')}.{self._attr('minor')}",
                  "sm_count": int(self._attr("multiProcessorCount")), "memory_bytes": int(self._attr("totalGlobalMem")),
                  "l2_bytes": int(self._attr("l2CacheSize")), "simulated": False,
                  "registers_per_sm": self._attr("regsPerMultiprocessor"),
                  "shared_bytes_per_sm": self._attr("sharedMemPerMultiprocessor"),
                  "max_threads_per_sm": self._attr("maxThreadsPerMultiProcessor"),
                  "memory_bus_width_bits": self._attr("memoryBusWidth")}
        try:
            device["pci_bus_id"] = self.device.pci_bus_id
        except Exception:
            pass
        rt = cp.cuda.runtime.runtimeGetVersion()
        drv = cp.cuda.runtime.driverGetVersion()
        reading = {}
        if self.clocks.available:
            try:
                d = self.clocks.nvml.nvmlSystemGetDriverVersion()
                reading["driver"] = d.decode() if isinstance(d, bytes) else d
                reading["max_sm_mhz"] = self.clocks.read().get("max_sm_mhz")
            except Exception:
                pass
        if reading.get("max_sm_mhz"):
            device["max_sm_mhz"] = reading["max_sm_mhz"]
        for key, value in _conditions(self).items():  # memory clock, power limit: calib.limits, staleness
            device.setdefault(key, value)
        driver = reading.get("driver") or f"cuda-driver-api {cuda_version(drv)}"
        software = software_fingerprint(driver=driver,
                                        cuda_runtime=cuda_version(rt), cupy=cp.__version__,
                                        backend="cupy")
        return {k: v for k, v in device.items() if v is not None}, software

    @property
    def l2_bytes(self) -> int:
        return int(self._attr("l2CacheSize"))

    @property
    def memory_bytes(self) -> int:
        return int(self._attr("totalGlobalMem"))

    @property
    def sm_count(self) -> int:
        return int(self._attr("multiProcessorCount"))

    # -- primitives for the calibrations' measurements --------------------------------------
    def module(self, key: str, source: str, name_expressions, *, code: str | None = None):
        """The RawModule of ``kernels/<source>`` (or of ``code``) with these template instances,
        compiled once per backend under ``key`` (NVRTC, or CuPy's disk cache); RawModule compiles
        lazily, so the first function is fetched here and compiling happens now, not inside a timed
        loop."""
        if key not in self._modules:
            self.compile_modules([(key, source, name_expressions, code)])
        return self._modules[key]

    def compile_modules(self, specs, *, max_threads: int = MAX_COMPILE_THREADS) -> None:
        """Compile the modules of ``specs`` (``(key, source, names)`` or ``(key, source, names,
        code)``, as for :meth:`module`) not yet compiled, several at once in threads.

        Why threads: NVRTC is the cost on a fresh machine (CuPy's kernel cache empty), one core per
        module, and memory_bandwidth's 15 modules compiled one after another took 4.8-6.1 s of its
        prepare, which the host-timed notebook waits for (H200, session 4, 2026-12-02). CuPy 14.2
        calls ``nvrtcCompileProgram`` inside ``with nogil`` (``compileProgram`` in
        cupy_backends/cuda/libs/nvrtc.pyx), so the compiles run in parallel; it writes each cubin
        to its disk cache atomically (a temporary file, then ``os.replace``: ``_write_encoded`` in
        cupy/cuda/_compiler_cache.py), and each thread loads its module on this backend's device
        (``Module.load`` makes the thread's context current: ``runtime._ensure_context``). The
        first function of each is fetched here, in the calling thread, as :meth:`module` did.
        ``max_threads`` bounds the compiles in flight."""
        todo: dict[str, tuple] = {}
        for spec in specs:
            key, source, names, code = (*spec, None) if len(spec) == 3 else spec
            if key not in self._modules and key not in todo:
                todo[key] = (source, list(names), code)
        if not todo:
            return
        jobs = list(todo.values())
        if len(jobs) == 1:
            built = [self._compile(*jobs[0])]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(len(jobs), max_threads, os.cpu_count() or 1)) as pool:
                built = list(pool.map(lambda job: self._compile(*job), jobs))  # the first error propagates
        for (key, (_, names, _)), mod in zip(todo.items(), built):
            if names:
                mod.get_function(names[0])
            self._modules[key] = mod

    def _compile(self, source: str, names: list, code: str | None):
        with self.device:  # a new thread's current device is device 0
            mod = self.cp.RawModule(code=code if code is not None else (KERNELS / source).read_text(),
                                    options=("-std=c++17",), name_expressions=names)
            mod.compile()
        return mod

    def buffers(self, key, make):
        """Device buffers for ``key``: kept while consecutive points ask for the same key (a sweep's
        order), else the previous ones are freed first and ``make()`` allocates anew. One set is
        held at a time, so a sweep never holds two sizes' buffers."""
        if self._held_key != key:
            self.release_buffers()
            self.sink()
            with self.device:
                self._held = make()
            self.cp.cuda.Device().synchronize()
            self._held_key = key
        return self._held

    def scratch(self, calibration_id: str) -> dict:
        """State a calibration keeps across its points in this process (verified kernels, tuned
        launch shapes): the backend holds it, the calibration owns its contents."""
        return self._scratch.setdefault(calibration_id, {})

    def sink(self):
        """A small device buffer that kernels write their never-used results to, so that the
        compiler cannot drop the work."""
        if self._sink is None:
            self._sink = self.cp.zeros(1024, dtype=self.cp.uint32)
        return self._sink

    def release_buffers(self):
        self._held, self._held_key = {}, None
        self.cp.get_default_memory_pool().free_all_blocks()

    def check_free(self, need: int):
        free, _ = self.cp.cuda.runtime.memGetInfo()
        if need > FREE_MEMORY_MARGIN * free:
            raise DeviceOutOfMemory(f"needs {need / 2**30:.1f} GiB of device memory; {free / 2**30:.1f} GiB is free")

    def prepare(self, configs: list[dict]) -> None:
        by_calibration: dict[str, list] = {}
        for c in configs:
            by_calibration.setdefault(c.get("calibration"), []).append(c)
        for calibration_id, group in by_calibration.items():
            if calibration_id in calibrations.IDS:
                calibrations.get(calibration_id).prepare(self, group)

    # -- timing -----------------------------------------------------------------------------
    def time_launches(self, launch, *, rule: StoppingRule | None = None, perf_config=None) -> Measurement:
        """Event-timed samples of ``launch(i)`` until the stopping rule is met."""
        cp = self.cp
        rule = rule or self.rule
        for i in range(WARMUP_LAUNCHES):
            launch(i)
        self.stream.synchronize()
        starts = [cp.cuda.Event() for _ in range(rule.batch)]
        stops = [cp.cuda.Event() for _ in range(rule.batch)]
        samples: list[float] = []
        readings = []
        reason = None
        i = 0
        while reason is None:
            for b in range(rule.batch):
                starts[b].record(self.stream)
                launch(i)
                stops[b].record(self.stream)
                i += 1
            readings.append(self.clocks.read())  # while the batch runs
            stops[-1].synchronize()
            samples.extend(cp.cuda.get_elapsed_time(a, b) * 1e3 for a, b in zip(starts, stops))
            reason = rule.stop_reason(np.asarray(samples))
        protocol = {"timer": "cuda events per launch", "warmup_launches": WARMUP_LAUNCHES,
                    "rule": rule.to_dict(), "perf_config": perf_config or {}}
        return Measurement(np.asarray(samples), stop_reason=reason, protocol=protocol,
                           clocks=merge_readings(readings))

    def time_host(self, sample, *, rule: StoppingRule | None = None, perf_config=None) -> Measurement:
        """Host-clock samples of ``sample()`` (which returns microseconds) until the rule is met."""
        rule = rule or self.rule
        for _ in range(WARMUP_LAUNCHES):
            sample()
        samples: list[float] = []
        reason = None
        while reason is None:
            samples.extend(sample() for _ in range(rule.batch))
            reason = rule.stop_reason(np.asarray(samples))
        protocol = {"timer": "host clock", "warmup_launches": WARMUP_LAUNCHES, "rule": rule.to_dict(),
                    "perf_config": perf_config or {}}
        return Measurement(np.asarray(samples), stop_reason=reason, protocol=protocol,
                           clocks=merge_readings([self.clocks.read()]))

    def time_host_interleaved(self, samplers, *, rule: StoppingRule | None = None, perf_configs=None,
                              seed: int = 0, together: bool = False) -> list[Measurement]:
        """Host-clock samples of several points in rounds (``calib.timing.interleave``), one
        Measurement per sampler, each with its own stopping reason; ``together``: every point
        takes every round (none stops before all would)."""
        from ..timing import interleave

        rule = rule or self.rule
        for sample in samplers:
            for _ in range(WARMUP_LAUNCHES):
                sample()
        before = self.clocks.read()
        taken = interleave(samplers, rule, seed=seed, together=together)
        clocks = merge_readings([before, self.clocks.read()])
        out = []
        for k, (samples, reason) in enumerate(taken):
            protocol = {"timer": "host clock", "warmup_launches": WARMUP_LAUNCHES, "rule": rule.to_dict(),
                        "interleaved": {"points": len(samplers), "samples_per_round": 1, "seed": seed,
                                        "together": together},
                        "perf_config": (perf_configs or [{}] * len(samplers))[k] or {}}
            out.append(Measurement(np.asarray(samples), stop_reason=reason, protocol=protocol, clocks=clocks))
        return out

    def compile_report(self, buffered: list[int]) -> list[dict]:
        return calibrations.get("registers").compile_report(self, buffered)

    # -- the backend interface ----------------------------------------------------------------
    def measure(self, configs: list[dict]) -> list[Measurement | Exception]:
        group = calibrations.measured_together(configs)
        if group is not None:  # points timed in rounds (calib.timing.interleave): one call for all
            try:
                return group.measure_group(self, configs)
            except (DeviceOutOfMemory, UnsupportedConfig) as exc:
                return [exc] * len(configs)
            except self.cp.cuda.memory.OutOfMemoryError as exc:  # as for one point, below
                self.release_buffers()
                return [DeviceOutOfMemory(str(exc))] * len(configs)
        out = []
        for config in configs:
            try:
                out.append(self._measure_one(config))
            except (DeviceOutOfMemory, UnsupportedConfig) as exc:
                out.append(exc)
            except self.cp.cuda.memory.OutOfMemoryError as exc:
                self.release_buffers()
                out.append(DeviceOutOfMemory(str(exc)))
        return out

    def _measure_one(self, config: dict) -> Measurement:
        calibration_id = config.get("calibration")
        if calibration_id not in calibrations.IDS or calibrations.get(calibration_id).KIND != "timed":
            raise UnsupportedConfig(f"the cupy backend has no measurement for calibration {calibration_id!r}")
        return calibrations.get(calibration_id).measure(self, config)

    def close(self):
        try:
            self.release_buffers()
        except Exception:
            pass


def _conditions(b) -> dict:
    """NVML's maximum memory clock, bus width and enforced power limit (``calib.fingerprint``'s
    CONDITION_FIELDS); without NVML the memory clock comes from the CUDA device attribute
    (kHz), which CUDA 13 keeps as an attribute though not in ``cudaDeviceProp``."""
    from ..fingerprint import _nvml_conditions

    out = {}
    if b.clocks.available:
        out = _nvml_conditions(b.clocks.nvml, b.clocks.handle)
    if "memory_clock_mhz" not in out:
        khz = b.props.get("memoryClockRate")
        if not khz:
            try:
                khz = b.cp.cuda.runtime.deviceGetAttribute(36, b.index)  # cudaDevAttrMemoryClockRate
            except Exception:
                khz = None
        if khz:
            out["memory_clock_mhz"] = int(khz) // 1000
    return out
