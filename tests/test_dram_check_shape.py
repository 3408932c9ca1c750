"""memory_bandwidth on a fake GPU: the launch-shape check runs no kernel but the shape's own (CuPy's
comparison and reduction kernels compile inside the GPU turn, issue 13), still catches a shape that
skips its tail, and prepare compiles every candidate the tuner will time without launching one."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from calib.calibrations import memory_bandwidth as dram

BROKEN = re.compile(r",8,2>$")  # the fake's unroll-8 chunked kernels drop the last element


class DevArray:
    """A numpy-backed device array with only what check_shape may use: memset, view, copy to the
    host. No ``==``, no reductions, no ``fill``: each would be a CuPy kernel compiled on first call."""

    def __init__(self, host, gpu):
        self.host, self._gpu = host, gpu

    def view(self, dtype):
        return DevArray(self.host.view(dtype), self._gpu)

    def get(self, out=None):
        if out is None:
            return self.host.copy()
        np.copyto(out, self.host)
        return out

    @property
    def data(self):
        def memset_async(value, size, stream=None):
            self._gpu.calls.append(("memset", stream))
            self.host.view(np.uint8)[:size] = value

        return SimpleNamespace(memset_async=memset_async)

    def __eq__(self, other):
        raise AssertionError("an elementwise CuPy kernel: compiled on first call, inside the GPU turn")

    __hash__ = None


class FakeGpu:
    sm_count = 4
    l2_bytes = 50 * 2**20
    memory_bytes = 141 * 2**30

    def __init__(self):
        self.calls, self.compiled, self._scratch = [], {}, {}
        self.stream = SimpleNamespace(synchronize=lambda: self.calls.append(("sync", None)))
        rng = np.random.default_rng(0)
        self.cp = SimpleNamespace(
            float32=np.float32, uint8=np.uint8,
            random=SimpleNamespace(random=lambda n, dtype: DevArray(rng.random(n).astype(dtype), self)),
            empty=lambda n, dtype: DevArray(np.zeros(n, dtype), self))

    def scratch(self, calibration_id):
        return self._scratch.setdefault(calibration_id, {})

    def sink(self):
        return DevArray(np.zeros(1024, np.uint32), self)

    def module(self, key, source, names):
        if key not in self.compiled:
            self.compile_modules([(key, source, names)])
        return SimpleNamespace(get_function=lambda name: self._kernel(name))

    def compile_modules(self, specs):
        self.batches = getattr(self, "batches", []) + [[key for key, *_ in specs]]
        for key, _source, names in specs:
            self.compiled.setdefault(key, list(names))

    def _kernel(self, name):
        def launch(grid, block, args, stream=None):
            self.calls.append(("launch", stream))
            drop = 1 if BROKEN.search(name) else 0
            if name.startswith("dram_write"):
                dst, n = args[0].host, int(args[1])
                words = dst.view(np.uint8)
                step = len(words) // n
                words[: (n - drop) * step] = 0x5C
            else:
                src, dst, n = args[0].host.view(np.uint8), args[1].host.view(np.uint8), int(args[2])
                step = len(dst) // n
                dst[: (n - drop) * step] = src[: (n - drop) * step]

        return launch


def _perf(kind, unroll, layout):
    return next(p for p in dram.perf_configs(kind) if p["unroll"] == unroll and p["layout"] == layout)


@pytest.mark.parametrize("width", dram.WIDTHS)
@pytest.mark.parametrize("kind", ["copy", "write"])
def test_check_shape_runs_only_the_shapes_kernel_and_catches_a_dropped_tail(kind, width):
    gpu = FakeGpu()
    dram.check_shape(gpu, kind, width, _perf(kind, 4, "tiled"))  # passes: every element written
    with pytest.raises(RuntimeError, match="did not copy every byte|left elements unwritten"):
        dram.check_shape(gpu, kind, width, _perf(kind, 8, "chunked"))
    kinds = [c for c, _ in gpu.calls if c != "sync"]
    assert kinds == ["memset", "launch", "memset", "launch"]  # the poison, then the shape's kernel
    assert all(stream is gpu.stream for c, stream in gpu.calls if c != "sync")  # ordered on one stream


def test_a_read_shape_is_checked_through_the_copy_kernel_once():
    gpu = FakeGpu()
    perf = _perf("read", 8, "chunked")
    with pytest.raises(RuntimeError, match=re.escape(dram.kernel_name("copy", 4, perf))):
        dram.check_shape(gpu, "read", 4, perf)
    dram.check_shape(gpu, "read", 4, _perf("read", 1, "strided"))
    dram.check_shape(gpu, "copy", 4, _perf("copy", 1, "strided"))  # the same check: not run again
    assert [c for c, _ in gpu.calls].count("launch") == 2


def test_every_word_written_finds_one_zero_word_of_each_width():
    for width in dram.WIDTHS:
        data = np.full(dram.VERIFY_BYTES, 0x01, np.uint8)
        data[:width] = 0
        assert not dram.every_word_written(data, width)
        data[width - 1] = 7  # one nonzero byte is a written word
        assert dram.every_word_written(data, width)
        data[-1] = 0  # a zero byte is a zero word of one byte, and no more than a byte of a wider one
        assert dram.every_word_written(data, width) == (width > 1)
    tail = np.concatenate([np.ones(16, np.uint8), np.zeros(3, np.uint8)])
    assert [dram.every_word_written(tail, w) for w in dram.WIDTHS] == [False, False, True, True, True]


def test_prepare_compiles_every_candidate_the_tuner_times_and_launches_nothing():
    gpu = FakeGpu()
    plan = dram.plan("quick", l2_bytes=gpu.l2_bytes, memory_bytes=gpu.memory_bytes)
    dram.prepare(gpu, plan)
    assert gpu.calls == []  # no launch, no memset: another notebook may be timing its kernels
    for kind in dram.KINDS:
        for width in dram.WIDTHS:
            timed = {dram.kernel_name(kind, width, p) for p in dram.perf_configs(kind)}
            assert timed <= set(gpu.compiled[f"dram-{kind}-{width}"])
    assert len(gpu.compiled) == len(dram.KINDS) * len(dram.WIDTHS)
    assert len(gpu.batches) == 1  # all at once: the backend compiles them in parallel
