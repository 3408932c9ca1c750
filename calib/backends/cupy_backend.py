"""The real GPU, through CuPy.

Timing follows DESIGN.md's protocol: CUDA events around each launch, warm-up first, inputs rotated
across buffer sets so that no sample starts with its data in L2, repetitions chosen by the
:class:`~calib.timing.StoppingRule`, and NVML clocks and throttle reasons read while the kernels
run. The launch configuration (the perf-config) of each kernel variant is chosen by a short
search before its first sweep point and recorded with every result.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from .._optional import require
from ..experiments import (cache, compute, dram, launch as launch_costs, matmul, normalization, occupancy, reduction,
                           shared, splitk)
from . import cupy_runners
from ..fingerprint import software_fingerprint
from ..nvml import ClockReader, merge_readings
from ..timing import Measurement, StoppingRule
from .base import Backend, DeviceOutOfMemory, UnsupportedConfig

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
CTYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}
THREADS = 256
BLOCKS_PER_SM = (1, 2, 4, 8, 16)
UNROLLS = (1, 4, 8)
LAYOUTS = ("strided", "tiled", "chunked")  # the kernel's LAYOUT 0, 1, 2
COPY_ONLY_LAYOUTS = ("pipelined",)  # dram_copy_pipelined
# Grids sized to the data rather than to the GPU: one strided step per thread, blocks retiring as
# new ones start. With 128 threads a block this copy matched cudaMemcpyAsync at 1 GiB on an H200
# (1.006 of it) where every persistent grid-stride shape stopped at 0.956 (bench/copy_more.py,
# 2026-11-29); the tuner weighs them against the persistent shapes for every kind and width.
DATA_GRID_THREADS = (128, 256, 512)
MAX_GRID_BLOCKS = 2**31 - 1
ROTATION = 2
WARMUP_LAUNCHES = 3
TUNE_SAMPLES = 8  # a search among configs 1% or more apart: the median of 8 separates them
FREE_MEMORY_MARGIN = 0.9
# Every calibration but DRAM (whose tuning lives in this class) has its runner in cupy_runners.
RUNNERS = {launch_costs.EXPERIMENT: cupy_runners.launch, splitk.EXPERIMENT: cupy_runners.splitk,
           compute.EXPERIMENT: cupy_runners.fma, cache.EXPERIMENT: cupy_runners.l2, shared.EXPERIMENT: cupy_runners.smem,
           matmul.EXPERIMENT: cupy_runners.matmul, reduction.EXPERIMENT: cupy_runners.reduction,
           occupancy.EXPERIMENT: cupy_runners.occupancy, normalization.EXPERIMENT: cupy_runners.normalization}


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
        self._modules: dict = {}  # compiled RawModules by (kind, width) or by name
        self._perf: dict[tuple, dict] = {}
        self._buffers: dict[str, object] = {}
        self._buffer_key = None
        self._sink = None
        self._verified = False

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
        software = software_fingerprint(driver=reading.get("driver") or f"cuda-driver-api {drv // 1000}.{drv % 1000 // 10}",
                                        cuda_runtime=f"{rt // 1000}.{rt % 1000 // 10}", cupy=cp.__version__,
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

    # -- kernels ----------------------------------------------------------------------------
    @staticmethod
    def _kernel_name(kind: str, width: int, perf: dict) -> str:
        if perf["layout"] == "pipelined":
            return f"dram_copy_pipelined<{CTYPES[width]},{perf['unroll']}>"
        return f"dram_{kind}<{CTYPES[width]},{perf['unroll']},{LAYOUTS.index(perf['layout'])}>"

    def _kernel(self, kind: str, width: int, perf: dict):
        """Compiled on first use, one module per (kind, width) with every perf-config variant."""
        key = (kind, width)
        if key not in self._modules:
            names = sorted({self._kernel_name(kind, width, p) for p in self.perf_configs(kind)})
            self._modules[key] = self.cp.RawModule(code=(KERNELS / "dram.cu").read_text(), options=("-std=c++17",),
                                                   name_expressions=names)
        return self._modules[key].get_function(self._kernel_name(kind, width, perf))

    def prepare(self, configs: list[dict]) -> None:
        dram_modules = set()
        for c in configs:
            if c.get("experiment") == dram.EXPERIMENT:
                dram_modules.add((c["kind"], int(c["width_bytes"])))
            elif c.get("experiment") == occupancy.EXPERIMENT:  # the DRAM read kernel, at other residencies
                dram_modules.add(("read", int(c["width_bytes"])))
        for kind, width in sorted(dram_modules):
            self._kernel(kind, width, next(self.perf_configs(kind)))
        cupy_runners.prepare(self, {c.get("experiment") for c in configs})

    @staticmethod
    def perf_configs(kind: str):
        """Persistent grids (``blocks_per_sm`` blocks on every SM walking the whole buffer), then
        grids sized to the data (``blocks_per_sm`` None: as many blocks as the data needs)."""
        layouts = LAYOUTS + COPY_ONLY_LAYOUTS if kind == "copy" else LAYOUTS
        for bps, unroll, layout in itertools.product(BLOCKS_PER_SM, UNROLLS, layouts):
            yield {"threads": THREADS, "blocks_per_sm": bps, "unroll": unroll, "layout": layout}
        for threads in DATA_GRID_THREADS:
            yield {"threads": threads, "blocks_per_sm": None, "unroll": 1, "layout": "strided"}

    def _grid_blocks(self, perf: dict, n_elements: int) -> int:
        if perf["blocks_per_sm"] is not None:
            return self.sm_count * int(perf["blocks_per_sm"])
        step = int(perf["threads"]) * int(perf["unroll"])
        blocks = -(-n_elements // step)
        if blocks > MAX_GRID_BLOCKS:
            raise UnsupportedConfig(f"{n_elements} elements need {blocks} blocks of {perf['threads']} threads; "
                                    f"a grid holds at most {MAX_GRID_BLOCKS}")
        return blocks

    def _launcher(self, kind: str, width: int, perf: dict, size_bytes: int, src, dst):
        """A function of the sample index that launches one kernel on buffer set ``i % ROTATION``."""
        kernel = self._kernel(kind, width, perf)
        n = np.uint64(size_bytes // width)
        grid, block = (self._grid_blocks(perf, int(n)),), (perf["threads"],)
        stream = self.stream
        if kind == "read":
            return lambda i: kernel(grid, block, (src[i % ROTATION], n, self._sink), stream=stream)
        if kind == "write":
            return lambda i: kernel(grid, block, (dst[i % ROTATION], n, np.uint32(0x2545F491 + i)), stream=stream)
        return lambda i: kernel(grid, block, (src[i % ROTATION], dst[i % ROTATION], n), stream=stream)

    def _ensure_buffers(self, size_bytes: int):
        """Sources filled with random data (never zeros), destinations uninitialized; kept for
        consecutive points of the same size, the sweep's order."""
        cp = self.cp
        if self._buffer_key == size_bytes:
            return self._buffers["src"], self._buffers["dst"]
        self.release_buffers()
        self.check_free(2 * ROTATION * size_bytes)
        self.sink()
        with self.device:
            src = [cp.random.random(size_bytes // 4, dtype=cp.float32).view(cp.uint8) for _ in range(ROTATION)]
            dst = [cp.empty(size_bytes, dtype=cp.uint8) for _ in range(ROTATION)]
        cp.cuda.Device().synchronize()
        self._buffers.update(src=src, dst=dst)
        self._buffer_key = size_bytes
        return src, dst

    def verify_kernels(self, n_bytes: int = 3 * 2**20 + 48):
        """Poison destinations, run every copy and write variant on a size no launch divides
        evenly, and check that every element was written with the right value."""
        cp = self.cp
        src = cp.random.random(n_bytes // 4, dtype=cp.float32).view(cp.uint8)
        dst = cp.empty(n_bytes, dtype=cp.uint8)
        variants = [p for p in self.perf_configs("copy") if p["blocks_per_sm"] in (2, None)]
        for width, perf in itertools.product(dram.WIDTHS, variants):
            dst.fill(0xA5)
            self._launcher("copy", width, perf, n_bytes, [src] * ROTATION, [dst] * ROTATION)(0)
            self.stream.synchronize()
            if not bool(cp.all(dst == src)):
                raise RuntimeError(f"{self._kernel_name('copy', width, perf)} did not copy every byte")
            if perf["layout"] not in LAYOUTS:
                continue
            dst.fill(0)
            self._launcher("write", width, perf, n_bytes, None, [dst] * ROTATION)(0)
            self.stream.synchronize()
            words = dst[: n_bytes - n_bytes % width].reshape(-1, width)
            if not bool(cp.all(words.any(axis=1))):
                raise RuntimeError(f"{self._kernel_name('write', width, perf)} left elements unwritten")
        self._verified = True

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
        protocol = {"timer": "cuda events per launch", "warmup_launches": WARMUP_LAUNCHES, "rotation": ROTATION,
                    "rule": rule.to_dict(), "perf_config": perf_config or {}}
        return Measurement(np.asarray(samples), stop_reason=reason, protocol=protocol,
                           clocks=merge_readings(readings))

    def _tune(self, kind: str, width: int, size_bytes: int, src, dst) -> tuple[dict, list[Measurement]]:
        """Fastest launch configuration for this kernel variant, by median of a few samples; and
        the candidates' measurements when the search ran now (empty when it was cached)."""
        key = (kind, width)
        tried = []
        if key not in self._perf:
            quick = StoppingRule(min_samples=TUNE_SAMPLES, max_samples=TUNE_SAMPLES, batch=TUNE_SAMPLES)
            for perf in self.perf_configs(kind):
                tried.append(self.time_launches(self._launcher(kind, width, perf, size_bytes, src, dst), rule=quick,
                                                perf_config=perf))
            best = min(tried, key=lambda m: m.median_us)
            self._perf[key] = {**best.protocol["perf_config"], "tuned_at_bytes": size_bytes}
        return self._perf[key], tried

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
        return Measurement(np.asarray(samples), stop_reason=reason, protocol=protocol, clocks=merge_readings([self.clocks.read()]))

    def sink(self):
        if self._sink is None:
            self._sink = self.cp.zeros(1024, dtype=self.cp.uint32)
        return self._sink

    def release_buffers(self):
        self._buffers.clear()
        self._buffer_key = None
        self.cp.get_default_memory_pool().free_all_blocks()

    def check_free(self, need: int):
        free, _ = self.cp.cuda.runtime.memGetInfo()
        if need > FREE_MEMORY_MARGIN * free:
            raise DeviceOutOfMemory(f"needs {need / 2**30:.1f} GiB of device memory; {free / 2**30:.1f} GiB is free")

    def compile_report(self, buffered: list[int]) -> list[dict]:
        return cupy_runners.compile_report(self, buffered)

    # -- the backend interface ----------------------------------------------------------------
    def measure(self, configs: list[dict]) -> list[Measurement | Exception]:
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
        runner = RUNNERS.get(config.get("experiment"))
        if runner is not None:
            return runner(self, config)
        if config.get("experiment") != dram.EXPERIMENT:
            raise UnsupportedConfig(f"the cupy backend has no kernel for {config.get('experiment')!r}")
        kind, width, size = config["kind"], int(config["width_bytes"]), int(config["size_bytes"])
        if width not in CTYPES or kind not in dram.KINDS:
            raise UnsupportedConfig(f"no DRAM kernel for kind={kind!r}, width={width}")
        if not self._verified:
            self.verify_kernels()
        src, dst = self._ensure_buffers(size)
        perf, tried = self._tune(kind, width, size, src, dst)
        measurement = self.time_launches(self._launcher(kind, width, perf, size, src, dst), perf_config=perf)
        measurement.candidates = tried
        return measurement

    def measure_memcpy(self, size_bytes: int) -> Measurement:
        """``cudaMemcpyAsync`` device to device, timed like the kernels: the copy ceiling."""
        cp = self.cp
        src, dst = self._ensure_buffers(size_bytes)
        rt = cp.cuda.runtime

        def launch(i):
            rt.memcpyAsync(dst[i % ROTATION].data.ptr, src[i % ROTATION].data.ptr, size_bytes,
                           rt.memcpyDeviceToDevice, self.stream.ptr)

        return self.time_launches(launch, perf_config={"api": "cudaMemcpyAsync D2D"})

    def close(self):
        try:
            self.release_buffers()
        except Exception:
            pass
