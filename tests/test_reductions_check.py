"""reductions on a fake GPU: the check before timing compares against float64 sums of calib's own
kernels, compiled in prepare, and compares on the host, so that no CuPy kernel compiles inside the
GPU turn (CuPy's float64 sum did: 2.77 s of a fresh H200's turn, issue 13); it still catches a
reduction kernel that drops a column or a row."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from calib.calibrations import reductions
from calib.timing import Measurement

ROWS, COLS = 2048, 1024


class DevArray:
    """A numpy-backed device array with only what the check may use: slices, a zero fill (a memset
    in CuPy), memset, copy to the host. Arithmetic and reductions would be CuPy kernels."""

    def __init__(self, host):
        self.host = host

    def __getitem__(self, index):
        return DevArray(self.host[index])

    @property
    def nbytes(self):
        return self.host.nbytes

    def fill(self, value):
        assert value == 0, "a non-zero fill is a CuPy kernel"
        self.host[...] = 0

    @property
    def data(self):
        def memset_async(value, size, stream=None):
            assert size == self.host.nbytes
            self.host.view(np.uint8)[:] = value

        return SimpleNamespace(memset_async=memset_async)

    def get(self):
        return self.host.copy()

    def _kernel(self, *args, **kwargs):
        raise AssertionError("a CuPy kernel: compiled on first call, inside the GPU turn")

    __sub__ = __rsub__ = __add__ = __mul__ = sum = _kernel


class Stream:
    """``with b.stream:`` and ``b.stream.synchronize()`` on the fake: nothing to wait for."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


class FakeGpu:
    sm_count = 132

    def __init__(self, drop_col=False, drop_row=False):
        self.drop_col, self.drop_row = drop_col, drop_row
        self.compiled, self.launched = {}, []
        self.stream = Stream()
        rng = np.random.default_rng(1)
        self.cp = SimpleNamespace(
            float32=np.float32, float64=np.float64,
            random=SimpleNamespace(random=lambda shape, dtype: DevArray(rng.random(shape).astype(dtype))),
            zeros=lambda n, dtype: DevArray(np.zeros(n, dtype)),
            empty=lambda n, dtype: DevArray(np.full(n, np.nan, dtype)))

    def module(self, key, source, names, *, code=None):
        self.compiled[key] = code if code is not None else source
        return SimpleNamespace(get_function=self._kernel)

    def buffers(self, key, make):
        return make()

    def check_free(self, need):
        pass

    def time_launches(self, launch, *, perf_config=None):
        launch(1)
        return Measurement([1.0, 1.0], protocol={"perf_config": perf_config})

    def _kernel(self, name):
        def launch(grid, block, args, stream=None):
            assert stream is self.stream
            self.launched.append(name)
            src = args[0].host
            cols = src.shape[1] - (1 if self.drop_col and name == "reduce_inner" else 0)
            rows = src.shape[0] - (1 if self.drop_row and name == "reduce_outer" else 0)
            if name == "reduce_inner":
                args[1].host[: src.shape[0]] = src[:, :cols].sum(axis=1, dtype=np.float32)
            elif name == "reduce_outer":
                args[1].host[: src.shape[1]] += src[:rows].sum(axis=0, dtype=np.float32)
            elif name == "reference_rows_f64":
                args[1].host[:] = src.astype(np.float64).sum(axis=1)
            elif name == "reference_cols_f64":
                args[1].host[:] += src.astype(np.float64).sum(axis=0)
            else:
                raise AssertionError(f"no kernel {name}")

        return launch


def _config(axis):
    return {"calibration": reductions.ID, "axis": axis, "rows": ROWS, "cols": COLS}


def test_prepare_compiles_the_reference_and_launches_nothing():
    gpu = FakeGpu()
    reductions.prepare(gpu, [_config("inner"), _config("outer")])
    assert set(gpu.compiled) == {"small", reductions.REFERENCE_KEY} and gpu.launched == []
    assert "reference_rows_f64" in gpu.compiled[reductions.REFERENCE_KEY]


@pytest.mark.parametrize("axis", reductions.AXES)
def test_the_check_uses_no_cupy_kernel_and_passes_a_right_sum(axis):
    gpu = FakeGpu()
    m = reductions.measure(gpu, _config(axis))
    assert m.n == 2 and f"reference_{'rows' if axis == 'inner' else 'cols'}_f64" in gpu.launched


@pytest.mark.parametrize("axis, broken", [("inner", {"drop_col": True}), ("outer", {"drop_row": True})])
def test_the_check_catches_a_sum_that_skips_a_column_or_a_row(axis, broken):
    with pytest.raises(RuntimeError, match=f"reduce_{axis} is wrong at {ROWS}x{COLS}"):
        reductions.measure(FakeGpu(**broken), _config(axis))


def test_relative_error_is_computed_in_float64():
    ref = np.array([1e8, 1.0, -1.0])
    got = np.array([1e8, 1.0, -1.0], dtype=np.float32)
    assert reductions.relative_error(got, ref) == 0.0
    assert reductions.relative_error(got, ref + [0, 0, 1e3]) == pytest.approx(1e3 / np.linalg.norm(ref + [0, 0, 1e3]))
