"""Static baselines: the rules compilers hard-code today, one per scheduler kind, read no profile.

Implemented as their authors wrote them, not weakened: each uses the device properties a compiler
does query (the SM count), and the constants those compilers use in place of measurements.

- **pointwise** (TorchInductor's pointwise config): 16-byte vectors, 4 warps (128 threads), 1024
  elements per block, a grid that covers the data.
- **normalization** (nvFuser's persistent inner-normalization rule): a register overhead of 40
  ("empirically observed"), an occupancy target of 50% (1024 resident threads per SM, so at most
  64 registers per thread: a buffer of at most 64 - 40 = 24 fp32 values per thread); the fewest
  threads per row (a power of two, 32..1024) that hold the row in that buffer; past 24 x 1024
  elements, multi-pass with 512 threads. 16-byte vectors where the row length allows.
- **matmul split-K** (the fill-the-machine rule of CUTLASS-style heuristics): split only while the
  output's 128x128 tiles times the split stay within one wave of SMs and every slice of K keeps at
  least 512: the largest power of two with ``tiles * split <= SMs`` and ``K / split >= 512``.
"""

from __future__ import annotations

import math

from .knobs import Knobs

REGISTER_OVERHEAD = 40
OCCUPANCY_THREADS_PER_SM = 1024  # 50% of 2048
MIN_K_PER_SPLIT = 512
TILE = 128


def pointwise(d, profile=None) -> Knobs:
    from . import pointwise as pw

    d = pw.descriptor(d)
    vec = 16 // d.itemsize_bytes
    ept = max(1, min(4, 1024 // (128 * vec)))
    return Knobs(vec=vec, ept=ept, block=128, grid="cover")


def normalization(d, profile=None) -> Knobs:
    from . import normalization as nm

    d = nm.descriptor(d)
    vec = nm.widest_vec(d)
    budget = 65536 // OCCUPANCY_THREADS_PER_SM - REGISTER_OVERHEAD  # 24 fp32 registers of buffer
    for threads in nm.THREADS:
        per_thread = math.ceil(d.cols / threads)
        buf = nm.buffer_for(per_thread, vec)
        if buf is not None and buf <= budget:
            return Knobs(strategy="persistent", threads=threads, vec=vec, buffer=buf)
    return Knobs(strategy="multipass", threads=512, vec=vec, buffer=0)


def matmul_splitk(d, profile=None, *, sm_count: int | None = None) -> Knobs:
    from . import splitk as sk
    from .registry import read

    d = sk.descriptor(d)
    # the SM count is the one device property the rule queries (as a compiler does), not a measurement
    if sm_count is None:
        sm_count = int(read(profile, "device.sm_count", 108)) if profile is not None else 108
    sms = sm_count
    tiles = math.ceil(d.m / TILE) * math.ceil(d.n / TILE)
    split = 1
    for s in sk.SPLITS:
        if d.k % s == 0 and tiles * s <= sms and d.k // s >= MIN_K_PER_SPLIT:
            split = max(split, s)
    return Knobs(split=split)


BASELINES = {"pointwise": pointwise, "normalization": normalization, "matmul_splitk": matmul_splitk}
