"""What the family is: its kind, the descriptor of a problem (M, N, K, dtype), the splits a launch may
name and the candidate space, and the random problems an evaluation draws.
"""

from __future__ import annotations

import dataclasses
import math

from ..knobs import COUNT, FamilyDescriptor, Knobs


KIND = "matmul_splitk"
FAMILY = "heuristics.matmul_splitk"
DTYPES = ("float16", "float32")
SPLITS = (1, 2, 4, 8, 16, 32)
# What a launch of this family must name (knobs.check_knobs): an override or a user's choice
# is checked against it.
KNOB_VALUES = {"split": COUNT}


def launch_problem(d, k) -> str | None:
    """Why launch ``k`` cannot run on ``d`` (families.launch), None if it can: the K-slices are a
    reshape of the operands, so the split must divide K."""
    if d.k % k["split"]:
        return f"split {k['split']} does not divide K = {d.k} (the slices are a reshape of the operands)"
    return None
MIN_K_PER_SLICE = 128
TILE = 128
RATE = {"float16": "compute.fp16.tensor_tflops", "float32": "compute.fp32.fma_tflops"}


@dataclasses.dataclass(frozen=True)
class SplitKDescriptor(FamilyDescriptor):
    KIND = KIND
    m: int
    n: int
    k: int
    dtype: str = "float16"

    def __post_init__(self):
        self._check_fields({"dtype": DTYPES}, counts=("m", "n", "k"))

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def memory_bound(self) -> bool:
        """Below the ridge of an H200-like machine (about 150 flops per byte for fp16 tensor cores)."""
        return flops_per_byte(self.m, self.n, self.k, self.itemsize_bytes) < (150 if self.dtype == "float16" else 12)


def flops_per_byte(m: int, n: int, k: int, itemsize_bytes: int) -> float:
    """One GEMM's flops over the bytes of its operands and output."""
    return 2.0 * m * n * k / ((m * k + k * n + m * n) * itemsize_bytes)


descriptor = SplitKDescriptor.parse


def space(d: SplitKDescriptor) -> list[Knobs]:
    return [Knobs(split=s) for s in SPLITS if d.k % s == 0 and (s == 1 or d.k // s >= MIN_K_PER_SLICE)]


def generate(count: int, seed: int = 0, *, max_bytes: float = 2**30, max_flops: float = 4e12) -> list:
    """M and N log-uniform 16..8192 (multiples of 16), K log-uniform 256..65536 (multiples of
    256): skinny outputs with long K, where split-K matters, and large squares, where it must not."""
    import random

    from ..knobs import ITEMSIZE
    from ..registry import HeuristicError

    # the smallest problem drawn (M = N = 16, K = 256, fp16): a bound below it would never be met
    smallest_bytes = (16 * 256 + 256 * 16 + 32 * 16 * 16) * min(ITEMSIZE[t] for t in DTYPES)
    if max_bytes < smallest_bytes:
        raise HeuristicError(f"max_bytes {max_bytes:g} is below the smallest split-K problem ({smallest_bytes} bytes)")
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        m = 16 * max(1, int(math.exp(rng.uniform(0, math.log(512)))))
        n = 16 * max(1, int(math.exp(rng.uniform(0, math.log(512)))))
        kk = 256 * max(1, int(math.exp(rng.uniform(0, math.log(256)))))
        dtype = rng.choice(DTYPES)
        d = SplitKDescriptor(m, n, kk, dtype)
        nbytes = (m * kk + kk * n + 32 * m * n) * d.itemsize_bytes
        if nbytes <= max_bytes and d.flops <= max_flops * (1 if dtype == "float16" else 0.1):
            out.append(d)
    return out
