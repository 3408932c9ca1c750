"""Matmul split-K: ``C = At.T @ B`` computed as ``split`` partial products over slices of K, then
a reduction of the partial tiles.

The problem: ``At`` is (K, M) and ``B`` (K, N), both row-major (the "TN" GEMM of a linear layer's
backward pass), so each K-slice of either is a contiguous block. ``split = 1`` is plain
``cupy.matmul`` (the library op). ``split = s`` is one batched ``cupy.matmul`` of s slices (cuBLAS
runs the s products in one launch, s times as many tiles to spread over the SMs), then
:data:`SOURCE`'s ``splitk_sum<T>`` adds the s partials. The knob is ``split`` (1..32, dividing K,
at least 128 of K per slice).

The model: the output's 128x128 tiles times the split, in whole waves over the SMs, each tile's
share of the flops at the SM's share of the tensor (or FP32) throughput, or the bytes at DRAM
bandwidth if slower; plus the partials reduced at ``matmul.splitk.elements_reduced_per_second``
and a second kernel's fixed cost. Outputs that would leave half the SMs idle get 64x64 tiles (as
cuBLAS picks smaller tiles for them: an assumption about the library, not a measurement).
``hidden=True`` adds a longer per-tile prologue than the predictor assumes.
"""

from __future__ import annotations

import dataclasses
import math

from .._lazy import lazy
from . import predictor as P
from .knobs import FamilyDescriptor, Knobs, check_output, require_cupy

np = lazy("numpy")

KIND = "matmul_splitk"
FAMILY = "heuristics.matmul_splitk"
DTYPES = ("float16", "float32")
SPLITS = (1, 2, 4, 8, 16, 32)
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
        nbytes = (self.m * self.k + self.k * self.n + self.m * self.n) * self.itemsize_bytes
        return self.flops / nbytes < (150 if self.dtype == "float16" else 12)


descriptor = SplitKDescriptor.parse


def space(d: SplitKDescriptor) -> list[Knobs]:
    return [Knobs(split=s) for s in SPLITS if d.k % s == 0 and (s == 1 or d.k // s >= MIN_K_PER_SLICE)]


def model_us(d: SplitKDescriptor, k, q, hidden: bool = False) -> float:
    s = int(k["split"])
    e = d.itemsize_bytes
    sms = P.sm_count(q)
    tile = TILE
    tiles = math.ceil(d.m / tile) * math.ceil(d.n / tile)
    if tiles * 2 <= sms:  # cuBLAS's smaller tiles for outputs that would leave half the SMs idle
        tile = 64
        tiles = math.ceil(d.m / tile) * math.ceil(d.n / tile)
    ctas = tiles * s
    peak = q(RATE[d.dtype], P.DEFAULTS.get(RATE[d.dtype], 100.0)) * 1e6  # flop per us
    per_cta = 2.0 * tile * tile * (d.k / s) / (peak / sms)
    t_mm = math.ceil(ctas / sms) * (per_cta + (0.8 if hidden else 0.3))
    nbytes = (d.m * d.k + d.k * d.n) * e + s * d.m * d.n * e
    t_mem = nbytes / (P.dram_gbps(q, "copy", 16) * 1e3)
    t = P.fixed_us(q) + max(t_mm, t_mem)
    if s > 1:
        rate = q("matmul.splitk.elements_reduced_per_second", P.DEFAULTS["matmul.splitk.elements_reduced_per_second"])
        t += P.fixed_us(q) + s * d.m * d.n / rate * 1e6
    return t


def heuristic(d, profile) -> Knobs:
    d = descriptor(d)
    return P.rank(model_us, d, space(d), profile)[0][1]


def sim_library_us(d, q) -> float:
    """Plain cupy.matmul: split 1."""
    return model_us(d, Knobs(split=1), q, hidden=True)


def generate(count: int, seed: int = 0, *, max_bytes: float = 2**30, max_flops: float = 4e12) -> list:
    """M and N log-uniform 16..8192 (multiples of 16), K log-uniform 256..65536 (multiples of
    256): skinny outputs with long K, where split-K matters, and large squares, where it must not."""
    import random

    from .knobs import ITEMSIZE
    from .registry import HeuristicError

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


# ----------------------------------------------------------------------------------------------
# CuPy

SOURCE = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ float tof(__half x) { return __half2float(x); }
__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ void fromf(float x, __half &y) { y = __float2half_rn(x); }
__device__ __forceinline__ void fromf(float x, float &y) { y = x; }
template <typename T>
__global__ void splitk_sum(const T *__restrict__ parts, T *__restrict__ y, long long mn, int splits) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < mn; i += (long long)gridDim.x * blockDim.x) {
    float a = 0.f;
    for (int s = 0; s < splits; ++s) a += tof(parts[(long long)s * mn + i]);
    fromf(a, y[i]);
  }
}
"""
CTYPE = {"float16": "__half", "float32": "float"}
TOLERANCE = {"float16": 1e-2, "float32": 1e-4}
_modules: dict = {}


def _cp():
    return require_cupy("the split-K matmul family on a GPU")


def reducer(dtype):
    cp = _cp()
    if "mod" not in _modules:
        _modules["mod"] = cp.RawModule(code=SOURCE, options=("-std=c++17",),
                                       name_expressions=[f"splitk_sum<{c}>" for c in CTYPE.values()])
    return _modules["mod"].get_function(f"splitk_sum<{CTYPE[dtype]}>")


class GpuCase:
    def __init__(self, d: SplitKDescriptor, sm_count: int, seed: int = 0):
        cp = _cp()
        self.d, self.sm_count = d, sm_count
        rs = cp.random.RandomState(seed)
        self.at = (rs.random_sample((d.k, d.m), dtype=cp.float32) - 0.5).astype(d.dtype)
        self.b = (rs.random_sample((d.k, d.n), dtype=cp.float32) - 0.5).astype(d.dtype)
        self.y = cp.empty((d.m, d.n), dtype=d.dtype)
        self._ref = None

    def run(self, k):
        cp = _cp()
        d, s = self.d, int(k["split"])
        if s == 1:
            return cp.matmul(self.at.T, self.b, out=self.y)
        a = self.at.reshape(s, d.k // s, d.m).transpose(0, 2, 1)
        parts = cp.matmul(a, self.b.reshape(s, d.k // s, d.n))
        mn = d.m * d.n
        reducer(d.dtype)((min(self.sm_count * 8, -(-mn // 256)),), (256,), (parts, self.y, np.int64(mn), np.int32(s)))
        return self.y

    def reference(self):
        if self._ref is None:
            cp = _cp()
            self._ref = self.at.T.astype(cp.float64) @ self.b.astype(cp.float64)
        return self._ref

    def check(self, k):
        return check_output(self, k, TOLERANCE[self.d.dtype], relative_to="max")

    def library(self):
        cp = _cp()
        return lambda: cp.matmul(self.at.T, self.b)

    def free(self):
        self.at = self.b = self.y = self._ref = None
