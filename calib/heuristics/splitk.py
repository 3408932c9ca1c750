"""Matmul split-K: ``C = At.T @ B`` computed as ``split`` partial products over slices of K, then
a reduction of the partial tiles.

The problem: ``At`` is (K, M) and ``B`` (K, N), both row-major (the "TN" GEMM of a linear layer's
backward pass), so each K-slice of either is a contiguous block. ``split = 1`` is plain
``cupy.matmul`` (the library op). ``split = s`` is one batched ``cupy.matmul`` of s slices (cuBLAS
runs the s products in one launch, s times as many tiles to spread over the SMs), then
:data:`SOURCE`'s ``splitk_sum<T>`` adds the s partials. The knob is ``split`` (1..32, dividing K,
at least 128 of K per slice).

The model describes what CuPy and cuBLAS do, as measured on an H200 on 2026-12-01
(bench/results/2026-12-01-h200-heuristics-seed0, 100 problems, every split timed): split 1 is one
cublasGemmEx (tensor cores for fp16; SIMT FP32 for fp32): the padded output tiles' flops at a share
of the profile's peak, spread over the SMs by cuBLAS's own split-K/stream-K (few tiles times K in
units of 64), or the operands at DRAM speed if slower, plus the launch and, for a long K over few
tiles, cuBLAS's own reduction. Split s > 1 goes through CuPy's batched matmul, which (CuPy's
``_routines_linalg.matmul``) promotes fp16 to fp32 and makes both operands contiguous: the
transposed K-slices of At are copied (and cast), B is cast, one FP32 strided-batched GEMM runs on
the CUDA cores (no tensor cores, even for fp16), the fp32 partials are cast back, then
``splitk_sum`` adds them.

The conclusion on the H200: an external split almost never pays. Split 1 was the fastest in 95 of
100 problems; fp16 split 2..32 took 2.3x-55x as long (6688x144x35840: 141 us unsplit, 3609-3940 us
split), fp32 up to 16x; the five exceptions are fp32 outputs of 16 rows with a long K, 3-21% faster
split, which the model does not resolve (the heuristic then loses up to 17%, as the library op
does). Replay of that file: heuristic geomean 0.996 of the exhaustive best (0.441 before), worst
0.828. Split 1's constants were then refitted on that file and a second host's recording of the same
problems (...-after, each with its host's profile), with 100 other problems (...-after/seed1) held
out: predictor median |error| (the heuristic's choice, split 1 nearly always) 10.1/11.1% -> 7.0/7.7%
on the two fitted, 10.3% -> 9.6% held out (p90 21/21/28%, worst 30/28/49%); split > 1 candidates
median 20-21%. Left: tiny launch-bound problems (cuBLAS's kernel choice at 5-9 us; held-out
memory-bound median 12.7%) and the m = 16 fp32 cases, which need the batched path within 5%.
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


# Empirical constants of cuBLAS on the H200 (CuPy 14.2, CUDA 13.2), fitted to split 1 of two recordings of the
# same 100 problems on two hosts, each with its own host's profile (2026-12-01): bench/results/
# 2026-12-01-h200-heuristics-seed0 (profile-call3-full.json) and ...-after (profile-call5-full.json); the 100
# problems of ...-after/seed1 were held out. Rates are fractions of the profile's own peaks, so another GPU
# scales them.
GEMM_EFFICIENCY = {"tensor": 0.99, "simt": 0.72}  # cuBLAS's asymptotic share of the profile's peak
BATCHED_SIMT_EFFICIENCY = 0.60  # CuPy's batched path: gemmStridedBatchedEx in FP32 on the CUDA cores
MIN_TILE = {"tensor": 16, "simt": 32}  # the narrowest output tile a dimension is padded to (128 at most)
# cuBLAS's FP32 tiles narrower than 64 (an output of 16 or 32 rows or columns) run at this share of the wide
# tiles' rate: 16x2704x56576 took 307 us, 16x3488x12544 111 us, 3440x32x4352 40 us (2026-12-01), where the
# wide-tile rate over a 32-wide pad predicts 1.6-1.7x less and a 64-wide pad 1.2-1.4x more
NARROW_SIMT_EFFICIENCY = 0.59
K_PER_UNIT = 64  # cuBLAS (stream-K / split-K inside) spreads few output tiles over K in units of this ...
MAX_INTERNAL_SPLIT = 64  # ... into at most this many: 16x16x27392 fp32 took 16.9 us, 32x16x12288 13.7 us,
# 64x256x13056 23.1 us (2026-12-01), 1.3x what spreading one or two tiles over all 132 SMs predicts
INTERNAL_SPLIT_K = 1024  # from this K on, a few-tile GEMM pays cuBLAS's own reduction: a second launch
# (fp16 16x48x1536 7.5 us and 144x96x1792 8.7 us, where K = 256..512 ran in 5.2-5.7 us)
INTERNAL_SPLIT_COST = 0.6  # that reduction, in units of the profile's kernel fixed cost
GEMM_EXTRA_FIXED_US = 1.6  # a cuBLAS launch beyond the profile's kernel fixed cost
DRAM_EFFICIENCY = 0.93  # of the read bandwidth, for a GEMM streaming its operands once
TRANSPOSE_EFFICIENCY = 0.2  # CuPy's strided copy of the transposed K-slices, of the copy bandwidth


def gemm_us(q, m: int, n: int, k: int, in_bytes: int, out_bytes: int, path: str, efficiency: float,
            batch: int = 1) -> float:
    """One cuBLAS GEMM launch (``batch`` products of (m, k) by (k, n)): the padded output tiles'
    flops at ``efficiency`` of the tensor or FP32 rate (less for a narrow FP32 tile), spread over
    the SMs as far as the tiles times K in units of :data:`K_PER_UNIT` (at most
    :data:`MAX_INTERNAL_SPLIT` per tile) allow (cuBLAS's own split-K/stream-K), or the operands at
    DRAM speed if slower; plus the fixed costs (and cuBLAS's own reduction for a few-tile, long-K
    product)."""
    sms = P.sm_count(q)
    name = RATE["float16"] if path == "tensor" else RATE["float32"]
    rate = q(name, P.DEFAULTS.get(name, 100.0)) * 1e6 * efficiency  # flop per us
    tile_m = min(TILE, max(MIN_TILE[path], 1 << max(0, math.ceil(math.log2(m)))))
    tile_n = min(TILE, max(MIN_TILE[path], 1 << max(0, math.ceil(math.log2(n)))))
    if path == "simt" and min(tile_m, tile_n) < 64:
        rate *= NARROW_SIMT_EFFICIENCY
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n) * batch
    util = min(1.0, tiles * min(MAX_INTERNAL_SPLIT, max(1.0, k / K_PER_UNIT)) / sms)
    t_mm = 2.0 * tile_m * tile_n * tiles * k / rate / util
    nbytes = batch * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    t_mem = nbytes / (P.dram_gbps(q, "read", 16) * 1e3 * DRAM_EFFICIENCY)
    t = P.fixed_us(q) + GEMM_EXTRA_FIXED_US + max(t_mm, t_mem)
    if tiles < sms and k >= INTERNAL_SPLIT_K:
        t += P.fixed_us(q) * INTERNAL_SPLIT_COST
    return t


def copy_us(q, nbytes: float, efficiency: float = 1.0) -> float:
    """An elementwise copy (CuPy's ``ascontiguousarray``, a cast) of ``nbytes`` read plus written."""
    return P.fixed_us(q) + nbytes / (P.dram_gbps(q, "copy", 16) * 1e3 * efficiency)


def model_us(d: SplitKDescriptor, k, q, hidden: bool = False) -> float:
    s = int(k["split"])
    e = d.itemsize_bytes
    if s == 1:  # cupy.matmul of 2-D operands: one cublasGemmEx, tensor cores for fp16
        path = "tensor" if d.dtype == "float16" else "simt"
        t = gemm_us(q, d.m, d.n, d.k, e, e, path, GEMM_EFFICIENCY[path])
        if hidden:  # the simulated device's own effect: a prologue per wave of output tiles
            tiles = math.ceil(d.m / TILE) * math.ceil(d.n / TILE)
            t += 0.3 * math.ceil(tiles / P.sm_count(q))
        return t
    # cupy.matmul of 3-D operands: fp16 is promoted to fp32 and both operands made contiguous
    # (the transposed K-slices of At copied, cast on the way), one FP32 strided-batched GEMM of
    # s products writes s*m*n fp32 partials, fp16 casts them back, then splitk_sum adds them.
    t = copy_us(q, d.m * d.k * (e + 4), TRANSPOSE_EFFICIENCY)
    if e != 4:
        t += copy_us(q, d.k * d.n * (e + 4))
    t += gemm_us(q, d.m, d.n, d.k // s, 4, 4, "simt", BATCHED_SIMT_EFFICIENCY, batch=s)
    if e != 4:
        t += copy_us(q, s * d.m * d.n * (4 + e))
    rate = q("matmul.splitk.elements_reduced_per_second", P.DEFAULTS["matmul.splitk.elements_reduced_per_second"])
    t += P.fixed_us(q) + s * d.m * d.n / rate * 1e6
    if hidden:
        t *= 1.02
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
