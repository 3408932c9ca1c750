"""The CuPy backend's module compile on a fake CuPy: the modules of one prepare compile at once in
threads (NVRTC on a fresh machine was 4.8-6.1 s of memory_bandwidth's prepare, one module after
another, issue 13), each on the backend's device, each once, and the first function of each is
fetched in the calling thread, as ``module`` always did."""

from __future__ import annotations

import threading
import time

import pytest

from calib.backends.cupy_backend import KERNELS, CupyBackend

COMPILE_S = 0.2  # what the fake's NVRTC takes per module: time.sleep releases the GIL, as nvrtc.pyx does


class FakeCupy:
    def __init__(self, fail=()):
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0
        self.compiled, self.fetched, self.fail = [], [], set(fail)
        self.device_depth = threading.local()
        outer = self

        class RawModule:
            def __init__(self, *, code, options, name_expressions):
                self.code, self.names = code, list(name_expressions)

            def compile(self):
                assert getattr(outer.device_depth, "n", 0) == 1, "compiled outside the backend's device"
                with outer.lock:
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                time.sleep(COMPILE_S)
                with outer.lock:
                    outer.in_flight -= 1
                    outer.compiled.append(tuple(self.names))
                if self.names and self.names[0] in outer.fail:
                    raise RuntimeError(f"nvrtc: error in {self.names[0]}")

            def get_function(self, name):
                outer.fetched.append((name, threading.get_ident()))
                return name

        self.RawModule = RawModule

    def device(self):
        depth = self.device_depth

        class Device:
            def __enter__(self):
                depth.n = getattr(depth, "n", 0) + 1

            def __exit__(self, *exc):
                depth.n -= 1

        return Device()


def _backend(cp) -> CupyBackend:
    b = object.__new__(CupyBackend)  # no GPU here: only what compile_modules uses
    b.cp, b.device, b._modules = cp, cp.device(), {}
    return b


def test_the_modules_of_a_prepare_compile_at_once_each_once_on_the_device():
    cp = FakeCupy()
    b = _backend(cp)
    specs = [(f"m{i}", "dram.cu", [f"k{i}<1>", f"k{i}<2>"]) for i in range(6)]
    t0 = time.perf_counter()
    b.compile_modules(specs + [specs[0]])  # a key twice: compiled once
    wall_s = time.perf_counter() - t0
    assert sorted(cp.compiled) == sorted(tuple(names) for _, _, names in specs)
    assert cp.most_in_flight > 1 and wall_s < 6 * COMPILE_S * 0.75  # in parallel, not one after another
    assert [name for name, _ in cp.fetched] == [f"k{i}<1>" for i in range(6)]  # the first of each, in order
    assert {thread for _, thread in cp.fetched} == {threading.get_ident()}  # fetched in the calling thread
    b.compile_modules(specs)
    assert b.module("m3", "dram.cu", ["k3<1>", "k3<2>"]) is b._modules["m3"] and len(cp.compiled) == 6


def test_max_threads_bounds_the_compiles_in_flight(monkeypatch):
    # a host of 16 cores (the H200's), so that os.cpu_count() does not bound the threads before
    # max_threads does: on a 2-core host this test would pass with max_threads ignored
    monkeypatch.setattr("calib.backends.cupy_backend.os.cpu_count", lambda: 16)
    cp = FakeCupy()
    _backend(cp).compile_modules([(f"m{i}", "dram.cu", [f"k{i}"]) for i in range(6)], max_threads=2)
    assert cp.most_in_flight == 2 and len(cp.compiled) == 6


def test_one_module_compiles_in_the_calling_thread_from_its_file_or_its_code():
    cp = FakeCupy()
    b = _backend(cp)
    mod = b.module("small", "small.cu", ["fma_chains<16>"])
    assert mod.code == (KERNELS / "small.cu").read_text() and cp.most_in_flight == 1
    inline = b.module("ref", None, ["ref_sum"], code="extern \"C\" __global__ void ref_sum() {}")
    assert inline.code.startswith("extern") and set(b._modules) == {"small", "ref"}


def test_a_compile_error_propagates_and_leaves_no_module_behind():
    cp = FakeCupy(fail={"k2<1>"})
    b = _backend(cp)
    with pytest.raises(RuntimeError, match=r"nvrtc: error in k2<1>"):
        b.compile_modules([(f"m{i}", "dram.cu", [f"k{i}<1>"]) for i in range(4)])
    assert b._modules == {}  # nothing half-registered: a later call compiles again
    assert len(cp.compiled) == 4
