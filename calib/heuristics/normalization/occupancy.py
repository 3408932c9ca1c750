"""Registers, spills and occupancy of the normalization kernels: the register rule (:func:`registers`)
and the blocks an SM holds at its count (:func:`blocks_per_sm`); the driver's counts of every
persistent kernel on the GPU and compiler they were read with (PTXAS_REGISTERS,
:func:`compiled_registers`, the NVRTC check); the bytes ptxas lists as spilled (PTXAS_SPILL_BYTES,
which the time model's spill traffic reads)."""

from __future__ import annotations

import math

from .. import predictor as P
from .candidates import OPS, NormDescriptor


# Registers, from the compiler rather than timings. What the H200's compiler allocated shows in which
# block sizes launched: every candidate that ran or failed for too many registers in A-E brackets its
# kernel's count. A line of 2.5 registers per vector load beyond the buffer (the old rule) predicted
# four launched kernels unlaunchable (v4 x 32 at 1024 threads, v1 x 16 fp32 softmax); the per-load cost
# grows with the loads a thread hoists (more addresses live at once): REGS_PER_LOAD + REGS_PER_LOAD2 *
# loads per load fits every bracket but fp32 layer norm's v1 x 16 and v4 x 32, which did not launch at
# 1024 threads (over 64 registers) where the rule says 62-63: REGS_SPREAD keeps those blocks out.
REGS_PER_LOAD, REGS_PER_LOAD2 = 0.9, 0.05
# Past 255 the compiler rematerializes addresses before it spills: ptxas 13.0 (sm_90) fits 128-element
# buffers of 2-byte-or-wider vectors in 255 registers (0-24 bytes of spill) and spills v1 x 128
# (1.3-1.8 kB): at most this many registers per load then, between the 0.84 and 1.68 those bound.
REGS_MIN_PER_LOAD = 1.25
REGS_SPREAD = 4.0  # registers a kernel's count may differ from the rule by (half an allocation granule):
#                    a persistent candidate's time is the mean over count - 4, count, count + 4, so a block
#                    size at an occupancy edge is not bet on (fp32 layer norm 7142 x 12100, v4 x 32: 2 blocks
#                    of 512 predicted, 1 ran, 212 against 171 us); a scalar-load (vec 1) kernel whose
#                    compiled count is known is timed at that count alone (model.scalar_access)


# Which block sizes launch is the compiler's, not the rule's: the driver's register count of every
# persistent kernel (cupy.RawKernel.num_regs: NVRTC 13.0 for sm_90 through CuPy 14.2.0, driver
# 580.159.04, on an H200, 2026-12-03; `bench/probes.py norm-registers`, committed in
# bench/results/2026-12-03-h200-heuristics-s10/norm-registers.json.gz) by (dtype, BUF, VEC, OP). Of the 122
# kernels, the rule + REGS_SPREAD misjudged launchability at 256-1024 threads for six, all at 1024 and
# all compiled to 63-64 registers where the rule says 61.9-62.7 (fp32 softmax v1 x 16, v4 x 32; fp16
# softmax and layer norm, the same two), and it called none launchable that the driver refused (fp32
# layer norm's v1 x 16 and v4 x 32: 72 and 68, 896 threads at most). T's, W's and seed 26's worst
# cases were won by such a kernel at 1024 threads. On a profile of the GPU they were read on
# (:func:`compiled_registers`) a listed kernel is offered where its count launches, and its time is
# the mean over the rule's count +- REGS_SPREAD of those that would launch (a scalar-load, vec 1 kernel's:
# its count alone, model.scalar_access); elsewhere the rule decides.
# Left out one seed at a time over the 29 recordings, those below a worst case of 0.85 went from M, T, W
# to T (W 0.801 -> 0.937, M 0.750 -> 0.933, 23 0.898 -> 0.942; S 0.956 -> 0.886), and fitted on all 29
# from T, W to T. The counts in the time model too (not only in the launch) lost V (0.905 -> 0.827) and
# K (0.934 -> 0.878). Live on seeds 29-31 (2026-12-03) every block offered so launched.
# The counts are one compiler's: a process compiling with another NVRTC (CuPy's, which the evaluation's
# kernels go through) may get other counts, and a 1024-thread block the table offers might not launch;
# there the rule decides (:func:`compiled_registers` asks NVRTC only where CuPy is already imported:
# a replay of recordings made with this compiler, on a machine without one, keeps the table).
PTXAS_REGISTERS_DEVICE, PTXAS_REGISTERS_ARCH = "NVIDIA H200", "9.0"  # ptxas targets the architecture
PTXAS_REGISTERS_NVRTC = (13, 0)
PTXAS_REGISTERS = {
    ("float16", 1, 1, 0): 23, ("float16", 1, 1, 1): 21, ("float16", 2, 1, 0): 28, ("float16", 2, 1, 1): 26,
    ("float16", 2, 2, 0): 26, ("float16", 2, 2, 1): 30, ("float16", 4, 1, 0): 31, ("float16", 4, 1, 1): 32,
    ("float16", 4, 2, 0): 29, ("float16", 4, 2, 1): 30, ("float16", 4, 4, 0): 28, ("float16", 4, 4, 1): 31,
    ("float16", 8, 1, 0): 42, ("float16", 8, 1, 1): 40, ("float16", 8, 2, 0): 32, ("float16", 8, 2, 1): 32,
    ("float16", 8, 4, 0): 27, ("float16", 8, 4, 1): 32, ("float16", 8, 8, 0): 31, ("float16", 8, 8, 1): 32,
    ("float16", 16, 1, 0): 63, ("float16", 16, 1, 1): 64, ("float16", 16, 2, 0): 47, ("float16", 16, 2, 1): 48,
    ("float16", 16, 4, 0): 37, ("float16", 16, 4, 1): 40, ("float16", 16, 8, 0): 32, ("float16", 16, 8, 1): 40,
    ("float16", 32, 1, 0): 148, ("float16", 32, 1, 1): 147, ("float16", 32, 2, 0): 72,
    ("float16", 32, 2, 1): 80, ("float16", 32, 4, 0): 64, ("float16", 32, 4, 1): 64, ("float16", 32, 8, 0): 54,
    ("float16", 32, 8, 1): 58, ("float16", 64, 1, 0): 221, ("float16", 64, 1, 1): 255,
    ("float16", 64, 2, 0): 168, ("float16", 64, 2, 1): 152, ("float16", 64, 4, 0): 111,
    ("float16", 64, 4, 1): 128, ("float16", 64, 8, 0): 95, ("float16", 64, 8, 1): 99,
    ("float16", 128, 1, 0): 255, ("float16", 128, 1, 1): 255, ("float16", 128, 2, 0): 255,
    ("float16", 128, 2, 1): 255, ("float16", 128, 4, 0): 178, ("float16", 128, 4, 1): 201,
    ("float16", 128, 8, 0): 173, ("float16", 128, 8, 1): 168, ("float16", 256, 1, 0): 255,
    ("float16", 256, 1, 1): 255, ("float16", 256, 2, 0): 255, ("float16", 256, 2, 1): 255,
    ("float16", 256, 4, 0): 255, ("float16", 256, 4, 1): 255, ("float16", 256, 8, 0): 255,
    ("float16", 256, 8, 1): 255, ("float32", 1, 1, 0): 23, ("float32", 1, 1, 1): 21, ("float32", 2, 1, 0): 28,
    ("float32", 2, 1, 1): 26, ("float32", 2, 2, 0): 28, ("float32", 2, 2, 1): 24, ("float32", 4, 1, 0): 32,
    ("float32", 4, 1, 1): 32, ("float32", 4, 2, 0): 28, ("float32", 4, 2, 1): 30, ("float32", 4, 4, 0): 28,
    ("float32", 4, 4, 1): 32, ("float32", 8, 1, 0): 42, ("float32", 8, 1, 1): 40, ("float32", 8, 2, 0): 32,
    ("float32", 8, 2, 1): 32, ("float32", 8, 4, 0): 27, ("float32", 8, 4, 1): 32, ("float32", 16, 1, 0): 64,
    ("float32", 16, 1, 1): 72, ("float32", 16, 2, 0): 48, ("float32", 16, 2, 1): 48, ("float32", 16, 4, 0): 40,
    ("float32", 16, 4, 1): 44, ("float32", 32, 1, 0): 139, ("float32", 32, 1, 1): 147,
    ("float32", 32, 2, 0): 72, ("float32", 32, 2, 1): 84, ("float32", 32, 4, 0): 64, ("float32", 32, 4, 1): 68,
    ("float32", 64, 1, 0): 217, ("float32", 64, 1, 1): 255, ("float32", 64, 2, 0): 141,
    ("float32", 64, 2, 1): 152, ("float32", 64, 4, 0): 110, ("float32", 64, 4, 1): 128,
    ("float32", 128, 1, 0): 255, ("float32", 128, 1, 1): 255, ("float32", 128, 2, 0): 212,
    ("float32", 128, 2, 1): 255, ("float32", 128, 4, 0): 196, ("float32", 128, 4, 1): 175,
    ("float32", 256, 1, 0): 255, ("float32", 256, 1, 1): 255, ("float32", 256, 2, 0): 255,
    ("float32", 256, 2, 1): 255, ("float32", 256, 4, 0): 255, ("float32", 256, 4, 1): 255,
}

# How much a spilling kernel moves is the compiler's, not the rule's: the rule's spilled registers
# times SPILL_BYTES put the scalar-load kernels' local traffic at half what ptxas lists and the wide
# vectors' at 1.5-2x. ptxas 13.0 (nvcc 13.0.88, -arch=sm_90 -Xptxas -v, SOURCE's kernels, this repository's
# CPU host, 2026-12-02; the same counts the comment above quotes) lists these spill stores + loads per
# thread, bytes, by (dtype, BUF, VEC, OP: 0 softmax, 1 layer norm); every other kernel of the space spills
# nothing. On the ten H200 recordings A-J (plain model, every candidate) the median log(measured /
# predicted) of the BUF >= 128 kernels was 0.30 in magnitude with the rule (v1 x 256 +1.0 to +1.3, v1 x
# 128 +0.5 to +0.9), 0.09 with these bytes times LOCAL_BYTES_PER_SPILLED_BYTE (0.11, 0.14, 0.21 at
# 1.5, 2.5, 3); the remaining error is the learned corrections' (classes.py). Whether a buffer spills stays
# the profile's budget (normalization.max_persistent_elements_per_thread through :func:`registers`); a
# kernel the rule spills that ptxas does not list keeps the rule's estimate.
PTXAS_SPILL_BYTES = {
    ("float16", 64, 1, 1): 32, ("float16", 128, 1, 0): 3032, ("float16", 128, 1, 1): 3724,
    ("float16", 128, 2, 0): 32, ("float16", 128, 4, 0): 48, ("float16", 256, 1, 0): 16124,
    ("float16", 256, 1, 1): 13548, ("float16", 256, 2, 0): 3132, ("float16", 256, 2, 1): 3308,
    ("float16", 256, 4, 0): 1400, ("float16", 256, 4, 1): 1620, ("float16", 256, 8, 0): 904,
    ("float16", 256, 8, 1): 1068, ("float32", 64, 1, 1): 32, ("float32", 128, 1, 0): 2824,
    ("float32", 128, 1, 1): 3448, ("float32", 128, 2, 0): 32, ("float32", 128, 4, 0): 40,
    ("float32", 256, 1, 0): 13412, ("float32", 256, 1, 1): 12740, ("float32", 256, 2, 0): 3004,
    ("float32", 256, 2, 1): 4128, ("float32", 256, 4, 0): 1468, ("float32", 256, 4, 1): 2092,
}
LOCAL_BYTES_PER_SPILLED_BYTE = 2.0  # L2 bytes per listed spill byte and row (write-back and refetch)


def registers(d, k, q) -> tuple[float, float]:
    """(registers per thread the kernel needs, registers it spills): the profile's overhead plus
    the buffer and its loads' addresses, capped at 255 by rematerializing addresses, spilling what
    even that cannot hold past the budget of ``normalization.max_persistent_elements_per_thread``."""
    overhead = q("normalization.additional_registers", P.DEFAULTS["normalization.additional_registers"])
    max_buf = q("normalization.max_persistent_elements_per_thread",
                P.DEFAULTS["normalization.max_persistent_elements_per_thread"])
    vec, buf = int(k["vec"]), int(k["buffer"])
    if k["strategy"] != "persistent":  # one vector's registers per load: every multi-pass kernel ran at 2048/SM
        return overhead + vec * d.itemsize_bytes / 4, 0.0
    loads = buf / vec
    need = overhead + buf + (REGS_PER_LOAD + REGS_PER_LOAD2 * loads) * loads
    if need <= 255:
        return need, 0.0
    squeezed = overhead + buf + REGS_MIN_PER_LOAD * loads
    return 255.0, max(0.0, squeezed - min(255.0, overhead + max_buf))


def blocks_per_sm(threads: int, regs: float) -> int:
    """Blocks of ``threads`` an SM holds at ``regs`` registers per thread (allocated in 8s, 64K per
    SM, 2048 threads, 32 blocks); 0 where one block cannot launch."""
    alloc = min(255, 8 * math.ceil(min(regs, 255) / 8))
    if alloc * threads > 65536:
        return 0
    return min(32, 2048 // threads, 65536 // (alloc * threads))


def compiled_registers(d: NormDescriptor, k, q) -> int | None:
    """The driver's register count of the persistent kernel ``k`` compiles to (PTXAS_REGISTERS),
    on a profile of the GPU it was read on and with the compiler it was read with; None elsewhere
    (another GPU, the simulated device, whose truth is the rule's count + 2, another NVRTC in this
    process) and for a kernel not listed."""
    if k["strategy"] != "persistent" or not P.measured_on(
            q, PTXAS_REGISTERS_DEVICE, None, "normalization's compiled register counts", PTXAS_REGISTERS_ARCH):
        return None
    if not _same_compiler():
        return None
    return PTXAS_REGISTERS.get((d.dtype, int(k["buffer"]), int(k["vec"]), OPS.index(d.op)))


_compiler: dict = {}


def nvrtc_version() -> tuple | None:
    """(major, minor) of the NVRTC CuPy compiles with in this process, or None where CuPy is not
    imported here (importing it is not this module's to do) or does not say."""
    import sys

    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        return tuple(int(v) for v in cupy.cuda.nvrtc.getVersion())
    except Exception:  # noqa: BLE001 - no NVRTC to ask: nothing known, as without CuPy
        return None


def _same_compiler() -> bool:
    """Whether the register table holds for this process's compiler; warns once where it does not."""
    if "same" not in _compiler:
        v = nvrtc_version()
        _compiler["same"] = v is None or v == PTXAS_REGISTERS_NVRTC
        if not _compiler["same"]:
            import warnings

            from ..registry import HeuristicWarning

            warnings.warn(f"normalization: the persistent kernels' register counts were read with NVRTC "
                          f"{'.'.join(map(str, PTXAS_REGISTERS_NVRTC))}; this process compiles with NVRTC "
                          f"{'.'.join(map(str, v))}, so the register rule decides which blocks launch "
                          "(bench/probes.py norm-registers reads this compiler's counts)",
                          HeuristicWarning, stacklevel=3)
    return _compiler["same"]
