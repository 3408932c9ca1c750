"""One module per calibration: its sweep plan, the physical model the simulated device and the
fit share, the fit itself and its plots."""

from . import cache, compute, dram, launch, matmul, normalization, occupancy, reduction, registers, shared, splitk

# Calibrations that time kernels (the rest, registers, read the compiler's report).
TIMED = (dram, cache, shared, occupancy, launch, splitk, compute, matmul, reduction, normalization)

__all__ = ["cache", "compute", "dram", "launch", "matmul", "normalization", "occupancy", "reduction", "registers", "shared", "splitk", "TIMED"]
