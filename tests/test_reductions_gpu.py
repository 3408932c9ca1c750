"""On a real GPU: the reductions check's float64 reference kernels agree with numpy's float64 sums of the same data,
on a shape neither their block nor their slab divides. Skipped without one."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("axis", ["inner", "outer"])
def test_reference_sums_agree_with_cupy(axis):
    from calib.backends.cupy_backend import CupyBackend
    from calib.calibrations import reductions

    b = CupyBackend(device=0)
    try:
        cp = b.cp
        rows, cols = 3 * reductions.REFERENCE_SLAB + 7, 4 * reductions.REFERENCE_THREADS + 3
        src = cp.random.standard_normal(rows * cols + 1, dtype=cp.float32)[: rows * cols].reshape(rows, cols)
        # drawn on the current (legacy default) stream; b.stream is non-blocking and does not wait for it
        cp.cuda.get_current_stream().synchronize()
        reductions.prepare(b, [])
        with b.stream:
            ref = reductions.reference_sums(b, src, axis, rows, cols)
            b.stream.synchronize()
            got = ref.get()
        want = cp.asnumpy(src).astype(np.float64).sum(axis=1 if axis == "inner" else 0)
        assert got.shape == want.shape
        assert np.max(np.abs(got - want)) <= 1e-9 * np.max(np.abs(want))
    finally:
        b.close()
