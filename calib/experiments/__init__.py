"""One module per calibration: its sweep plan, the physical model the simulated device and the
fit share, the fit itself and its plots."""

from . import compute, dram, launch, registers, splitk

# Calibrations that time kernels (the rest, registers, read the compiler's report).
TIMED = (dram, launch, splitk, compute)

__all__ = ["compute", "dram", "launch", "registers", "splitk", "TIMED"]
