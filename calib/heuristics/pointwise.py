"""Pointwise (elementwise) kernels: ``y = op(a[, b])`` over ``n`` elements, and how to launch them.

Knobs, the ones a compiler's pointwise scheduler picks:

- ``vec``: elements per vector access (``vec * itemsize`` is the access width, 1..16 bytes);
- ``ept``: vectors per thread per iteration (loads issued before the first use: bytes in flight);
- ``block``: threads per block;
- ``grid``: ``"cover"`` (one pass, a grid sized to the data) or a number of blocks per SM
  (a persistent grid-stride loop).

The CuPy kernel (:data:`SOURCE`) is one template ``pointwise<T, VEC, EPT>`` with the op a runtime
argument (a uniform branch costs nothing in a memory-bound loop, and it keeps compiling to one
module per data type); the ``n % vec`` remainder is done by scalar code. Every candidate's output
is compared with a float64 CuPy reference before it is timed.

The model (:func:`model_us`) is the fixed cost, then bytes moved at the bandwidth of the memory
level the working set sits in (L2, the ramp, DRAM) at the access width, reduced by the bytes in
flight per SM the launch keeps (Little's law), stretched by the busiest SM's extra blocks, or the
FP32 throughput when that is slower. With ``hidden=True`` (the simulated device's truth) it adds
what no profile parameter says: registers per thread limiting the resident blocks, a cost per
block scheduled and per loop iteration.
"""

from __future__ import annotations

import dataclasses
import math

from .._lazy import lazy
from . import predictor as P
from .knobs import ITEMSIZE, FamilyDescriptor, Knobs, check_output, require_cupy

np = lazy("numpy")

KIND = "pointwise"
FAMILY = "heuristics.pointwise"
BINARY = ("add", "mul", "maximum")
UNARY = ("relu", "exp", "sigmoid")
OPS = BINARY + UNARY
OP_CODE = {op: i for i, op in enumerate(OPS)}
FLOPS = {"add": 1, "mul": 1, "maximum": 1, "relu": 1, "exp": 4, "sigmoid": 6}
DTYPES = ("float16", "float32", "float64")
EPTS = (1, 2, 4)
BLOCKS = (128, 256, 512)
GRIDS = ("cover", 4)


@dataclasses.dataclass(frozen=True)
class PointwiseDescriptor(FamilyDescriptor):
    """``memory_bound`` stays True: every op here does at most 6 flops per element, bandwidth
    bound on any GPU."""

    KIND = KIND
    op: str
    n: int
    dtype: str = "float32"

    def __post_init__(self):
        self._check_fields({"op": OPS, "dtype": DTYPES}, counts=("n",))

    @property
    def inputs(self) -> int:
        return 2 if self.op in BINARY else 1

    @property
    def bytes_moved(self) -> int:
        return (self.inputs + 1) * self.n * self.itemsize_bytes


descriptor = PointwiseDescriptor.parse


def space(d: PointwiseDescriptor) -> list[Knobs]:
    vecs = [v for v in (1, 2, 4, 8) if v * d.itemsize_bytes <= 16]
    return [Knobs(vec=v, ept=e, block=b, grid=g) for v in vecs for e in EPTS for b in BLOCKS for g in GRIDS]


def launch_shape(d: PointwiseDescriptor, k) -> tuple[int, int]:
    """(blocks, blocks resident per SM) of a launch; the grid is what the kernel is launched with."""
    vec, ept, block = int(k["vec"]), int(k["ept"]), int(k["block"])
    nvec = max(1, math.ceil(d.n / vec))
    need = math.ceil(nvec / (block * ept))
    return need, min(32, 2048 // block)


def grid_blocks(d, k, sms: int) -> int:
    need, _ = launch_shape(d, k)
    return need if k["grid"] == "cover" else max(1, min(need, int(k["grid"]) * sms))


def model_us(d: PointwiseDescriptor, k, q, hidden: bool = False) -> float:
    e, nin = d.itemsize_bytes, d.inputs
    vec, ept, block = int(k["vec"]), int(k["ept"]), int(k["block"])
    sms = P.sm_count(q)
    width = vec * e
    need, resident = launch_shape(d, k)
    if hidden:  # the compiler's registers: 16 + the loaded vectors, in 8-register granules
        regs = 16 + math.ceil(nin * ept * width / 4)
        regs = 8 * math.ceil(regs / 8)
        resident = max(1, min(resident, 65536 // (regs * block)))
    g = grid_blocks(d, k, sms)
    concurrent = min(g, sms * resident)
    inflight = concurrent * block * ept * width * nin / sms
    nbytes = d.bytes_moved
    t_mem = P.stream_us(q, nbytes, nbytes, width, "copy") / P.inflight_efficiency(q, inflight)
    if g >= sms:
        waves = g / (sms * resident)
        t_mem *= 1 + 0.3 * (P.imbalance(g, sms) - 1) if waves < 4 else 1.0
    flops = d.n * FLOPS[d.op] * (2 if d.dtype == "float64" else 1)
    t_cmp = flops / (q("compute.fp32.fma_tflops", P.DEFAULTS["compute.fp32.fma_tflops"]) * 1e6)
    t = P.fixed_us(q) + max(t_mem, t_cmp)
    if hidden:
        t += 0.004 * g / sms + 0.01 * math.ceil(need / g)
    return t


def heuristic(d, profile) -> Knobs:
    """The candidate the predictor ranks fastest on this profile."""
    d = descriptor(d)
    return P.rank(model_us, d, space(d), profile)[0][1]


def library_knobs(d) -> Knobs:
    """The launch CuPy's elementwise kernels use: one element per thread, 128 threads, a covering grid."""
    return Knobs(vec=1, ept=1, block=128, grid="cover")


def sim_library_us(d, q) -> float:
    """CuPy's elementwise op on the simulated device: its launch shape, plus its 64-bit indexer."""
    return 1.05 * model_us(d, library_knobs(d), q, hidden=True)


def generate(count: int, seed: int = 0, *, max_bytes: float = 3 * 2**30) -> list[PointwiseDescriptor]:
    """``count`` problems: op and dtype uniform, ``n`` log-uniform from 1e3 elements up to what
    keeps the inputs and output within ``max_bytes`` (odd sizes included, for the remainders)."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        op, dtype = rng.choice(OPS), rng.choice(DTYPES)
        d0 = PointwiseDescriptor(op, 1, dtype)
        hi = max_bytes / ((d0.inputs + 1) * d0.itemsize_bytes)
        n = int(math.exp(rng.uniform(math.log(1e3), math.log(hi))))
        if rng.random() < 0.7:
            n -= n % 8  # most real sizes are multiples of 8; the rest exercise the remainder code
        out.append(PointwiseDescriptor(op, max(n, 1), dtype))
    return out


# ----------------------------------------------------------------------------------------------
# CuPy

SOURCE = r"""
#include <cuda_fp16.h>
template <typename T, int V> struct alignas(sizeof(T) * V) VecT { T v[V]; };
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ void from_acc(float x, __half &y) { y = __float2half_rn(x); }
__device__ __forceinline__ void from_acc(float x, float &y) { y = x; }
__device__ __forceinline__ void from_acc(double x, double &y) { y = x; }

template <typename A> __device__ __forceinline__ A apply(int op, A a, A b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a * b;
    case 2: return a > b ? a : b;
    case 3: return a > A(0) ? a : A(0);
    case 4: return exp(a);
    default: return A(1) / (A(1) + exp(-a));
  }
}

template <typename T, int V, int E>
__global__ void pointwise(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ y, long long n, int op) {
  typedef typename Acc<T>::type A;
  typedef VecT<T, V> W;
  const long long nvec = n / V;
  const long long chunk = (long long)blockDim.x * E;
  const W *va = reinterpret_cast<const W *>(a);
  const W *vb = reinterpret_cast<const W *>(b);
  W *vy = reinterpret_cast<W *>(y);
  for (long long base = (long long)blockIdx.x * chunk; base < nvec; base += (long long)gridDim.x * chunk) {
    W ra[E], rb[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      long long i = base + (long long)e * blockDim.x + threadIdx.x;
      if (i < nvec) {
        ra[e] = va[i];
        if (op < 3) rb[e] = vb[i];
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      long long i = base + (long long)e * blockDim.x + threadIdx.x;
      if (i < nvec) {
        W out;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          A x = to_acc(ra[e].v[v]);
          A z = op < 3 ? to_acc(rb[e].v[v]) : A(0);
          from_acc(apply<A>(op, x, z), out.v[v]);
        }
        vy[i] = out;
      }
    }
  }
  long long i = nvec * V + threadIdx.x;  // the n % V remainder, scalar, in block 0
  if (blockIdx.x == 0 && i < n) {
    A x = to_acc(a[i]);
    A z = op < 3 ? to_acc(b[i]) : A(0);
    from_acc(apply<A>(op, x, z), y[i]);
  }
}
"""
CTYPE = {"float16": "__half", "float32": "float", "float64": "double"}
TOLERANCE = {"float16": 2e-3, "float32": 1e-6, "float64": 1e-12}
_modules: dict = {}


def _cp():
    return require_cupy("the pointwise kernel family on a GPU")


def kernel(dtype: str, vec: int, ept: int):
    """The compiled ``pointwise<T, vec, ept>`` (one module per data type, compiled on first use)."""
    cp = _cp()
    mod = _modules.get(dtype)
    if mod is None:
        names = [f"pointwise<{CTYPE[dtype]},{v},{e}>" for v in (1, 2, 4, 8) if v * ITEMSIZE[dtype] <= 16
                 for e in EPTS]
        mod = _modules[dtype] = cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    return mod.get_function(f"pointwise<{CTYPE[dtype]},{vec},{ept}>")


class GpuCase:
    """One problem on the GPU: inputs, the reference, each candidate's run, the library op."""

    def __init__(self, d: PointwiseDescriptor, sm_count: int, seed: int = 0):
        cp = _cp()
        self.d, self.sm_count = d, sm_count
        rs = cp.random.RandomState(seed)
        self.a = (rs.random_sample(d.n, dtype=cp.float32) * 4 - 2).astype(d.dtype)
        self.b = (rs.random_sample(d.n, dtype=cp.float32) * 4 - 2).astype(d.dtype) if d.inputs == 2 else self.a
        self.y = cp.empty(d.n, dtype=d.dtype)
        self._ref = None

    def run(self, k):
        cp = _cp()
        fn = kernel(self.d.dtype, int(k["vec"]), int(k["ept"]))
        g = grid_blocks(self.d, k, self.sm_count)
        fn((g,), (int(k["block"]),), (self.a, self.b, self.y, np.int64(self.d.n), np.int32(OP_CODE[self.d.op])))
        return cp

    def reference(self):
        if self._ref is None:
            cp = _cp()
            a = self.a.astype(cp.float64)
            b = self.b.astype(cp.float64)
            op = self.d.op
            self._ref = {"add": lambda: a + b, "mul": lambda: a * b, "maximum": lambda: cp.maximum(a, b),
                         "relu": lambda: cp.maximum(a, 0), "exp": lambda: cp.exp(a),
                         "sigmoid": lambda: 1 / (1 + cp.exp(-a))}[op]()
        return self._ref

    def check(self, k):
        return check_output(self, k, TOLERANCE[self.d.dtype])

    def library(self):
        """The op a CuPy user calls (a ufunc; sigmoid as the ElementwiseKernel one would write)."""
        cp = _cp()
        op = self.d.op
        if op == "sigmoid":
            ker = _sigmoid_kernel()
            return lambda: ker(self.a, self.y)
        fn = {"add": lambda: cp.add(self.a, self.b, out=self.y), "mul": lambda: cp.multiply(self.a, self.b, out=self.y),
              "maximum": lambda: cp.maximum(self.a, self.b, out=self.y),
              "relu": lambda: cp.maximum(self.a, 0, out=self.y), "exp": lambda: cp.exp(self.a, out=self.y)}[op]
        return fn

    def free(self):
        self.a = self.b = self.y = self._ref = None


_sig: dict = {}


def _sigmoid_kernel():
    if "k" not in _sig:
        _sig["k"] = _cp().ElementwiseKernel("T x", "T y", "y = (T)(1.0f / (1.0f + expf(-(float)x)))", "calib_sigmoid")
    return _sig["k"]
