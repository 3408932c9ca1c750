"""The normalization problems an evaluation draws (:func:`generate`)."""

from __future__ import annotations

import math

from ..knobs import ITEMSIZE
from .candidates import DTYPES, OPS, NormDescriptor


def generate(count: int, seed: int = 0, *, max_bytes: float = 2 * 2**30) -> list[NormDescriptor]:
    """Row lengths log-uniform 32..32768 (mostly multiples of 8, some odd), row counts
    log-uniform 1..2^17 within ``max_bytes`` of input and output."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        op, dtype = rng.choice(OPS), rng.choice(DTYPES)
        cols = int(math.exp(rng.uniform(math.log(32), math.log(32768))))
        if rng.random() < 0.8:
            cols = max(8, cols - cols % 8)
        e = ITEMSIZE[dtype]
        hi = max(1.0, min(2**17, max_bytes / (2 * cols * e)))
        rows = int(math.exp(rng.uniform(0, math.log(hi))))
        out.append(NormDescriptor(op, max(rows, 1), cols, dtype))
    return out
