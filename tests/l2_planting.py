"""What the L2 tests plant on a grid from a recorded fit: the fit's own model time at each point,
its slope in log2 W (for the working-set jitter), which points are working-set points and DRAM's
share of their reads. One place, so that every planted test perturbs the same model."""

from __future__ import annotations

import numpy as np

from calib.calibrations import cache_hierarchy as l2


def fitted_terms(grid, hinge):
    """(log2 W, bytes read, model time us, d time / d log2 W, working-set mask, DRAM share)."""
    w, b = grid.working_set_bytes.to_numpy(float), l2.bytes_read(grid)
    x, p = np.log2(w), hinge.params
    t = l2._model((x, b), *p)
    slope = (l2._model((x + 1e-4, b), *p) - l2._model((x - 1e-4, b), *p)) / 2e-4
    ws = (grid.series == "working_set").to_numpy()
    m = l2.dram_share(x, p[3] + p[4], p[5], p[6])
    return x, b, t, slope, ws, m
