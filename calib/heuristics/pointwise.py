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

The model (:func:`model_us`) is a launch floor, then the slowest of: the bytes at the bandwidth
of the memory level the working set sits in (L2 or DRAM) at the access width, combined with
Little's law over the thread slots (rounds of resident blocks, each a memory latency plus the
thread's elements worked one after another, which is what makes many elements per thread slow on
small tensors), the block scheduler's pace for cover grids of many blocks, and the op's issue
slots at the FP32 rate over the occupancy (exp and sigmoid). Its few empirical constants come
from the H200 evaluation of 2026-12-01 and say which data each is from. With ``hidden=True`` (the
simulated device's truth) the registers are the loaded vectors only, and it adds a cost per block
scheduled and per loop iteration.
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


# Empirical constants of the model, from the H200 evaluations of 2026-12-01 (seed 0, every candidate
# of 100 problems timed), refitted jointly on two hosts' recordings of those problems, each with its
# own host's full-suite profile (bench/results/2026-12-01-h200-heuristics-seed0 with
# profile-call3-full.json, ...-after with profile-call5-full.json), and checked on 100 held-out
# problems (...-after/seed1):
# - FLOOR: the launch floor as a share of the DRAM read line's intercept (``memory.dram.fixed_cost_us``,
#   4.24 and 4.43 us on the two hosts, which holds a DRAM latency and the pipe's fill besides the
#   launch), fitted on both hosts at 0.62: 2.6-2.7 us, to which the model's other terms add up to the
#   3.40 and 3.52 us it gives the smallest relu, against 3.17 and 3.23 us measured;
# - BLOCK_US: a block's own start and retirement (a one-element-per-thread cover grid of 128-thread
#   blocks on L2-resident data ran ~0.5 us per wave of resident blocks above its latency);
# - DISPATCH_US, THREAD_US: the pace at which an SM takes new blocks of a cover grid, the slower of
#   a block's dispatch and its threads' start: the fastest cover grids of hundreds to thousands of
#   blocks per SM took 0.080 us per 128-thread block, 0.112 per 256 and 0.245 per 512 per SM (both
#   hosts alike); the fit over all candidates gave 0.083 us per block and 0.59 ns per thread, which
#   is 0.151 and 0.302 us for 256 and 512 threads: slower than those fastest grids, fitted so;
# - ELEMENT_US, DEP_CYCLES: a thread's vectors are worked one after another: small launches grew
#   by ~0.1 us per vector a thread loads (not per element: wide vectors cost no more issue latency),
#   plus ~2.2 dependent cycles per issue slot of the op and element;
# - LAT_SHARE: the memory latency is Little's law over ``memory.bytes_in_flight_per_sm``, which the
#   occupancy calibration's three-limit model now puts at 18.4-18.9 kB on both hosts (13.2 kB under the
#   model the first fit used); 0.74 of it is the latency a pointwise block waits;
# - HALF_UNROLL_SLOTS: float16 candidates of more than one vector per thread ran slower than float32
#   ones at equal bytes (the __half vectors' unrolled conversion code): fp16 sigmoid of 196M elements
#   (compute-bound) took +11 issue slots per element at ept 2 and +20 at ept 4, fp16 exp of 37M the same
#   per element, so 11.2 slots per doubling of ept (relu fp16 vec 8 at 3.7 MB: ept 2 1.3x, ept 4 1.7x);
# - the L2 share: a pointwise working set (inputs and the written output) is streamed once per call,
#   so :func:`calib.heuristics.predictor.streamed_l2_fraction` (L2 to 0.9 of ``memory.l2.capacity_bytes``,
#   DRAM from 1.125 of it: 39 and 49 MB on these hosts), far earlier than the read-only ramp's end:
#   54 MB ran at the DRAM copy bandwidth;
# - L2_WIDTH_EXP: narrow accesses lose more at L2 than at DRAM (2-byte accesses on L2-resident data
#   moved ~3 TB/s, the DRAM align2 rate): L2 bandwidth times (DRAM(width) / DRAM(16 B)) ** 3.1;
# - SMOOTH: bandwidth and Little's law combine as a p-norm of 3, the knee of
#   :func:`calib.heuristics.predictor.inflight_efficiency`;
# - TAIL_COVER, TAIL_STRIDE: the share of a last partial wave (cover) or grid-stride iteration that
#   costs a whole one;
# - REGS_PER_SLOT: registers per element per issue slot of the op that a thread keeps live while
#   its elements are unrolled (exp and sigmoid at 8-16 elements per thread lost occupancy);
# - OCCUPANCY_THREADS: the resident threads per SM that hide the ALU latency of exp and sigmoid;
# - INDEX_SLOTS: issue slots per vector access for its address and bounds (1-2 byte accesses of the
#   compute-heavy ops ran slower than wide ones at equal bytes);
# - STRIDE_DRAM: DRAM traffic of a grid-stride loop costs that much more than a cover grid's: its
#   persistent blocks drift apart, so the DRAM pages they touch at once are spread over the tensor, while a
#   cover grid's blocks start in order and keep its accesses in a compact window (the 19 rows of
#   > 60 MB: the best grid-stride candidate 1-10% slower than the best cover one, median 4.2%, at
#   every ept and block; within 1% on the L2-resident rows, so it is DRAM's, not the loop's).
FLOOR = 0.62
BLOCK_US = 0.47
DISPATCH_US, THREAD_US = 0.083, 0.00059
ELEMENT_US = 0.097
DEP_CYCLES = 2.16
L2_WIDTH_EXP = 3.1
SMOOTH = 3.0
TAIL_COVER, TAIL_STRIDE = 0.29, 0.91
REGS_PER_SLOT = 0.021
OCCUPANCY_THREADS = 1024.0
INDEX_SLOTS = 12.9
STRIDE_DRAM = 0.05
HALF_UNROLL_SLOTS = 11.2
LAT_SHARE = 0.74
# fp32 issue slots per element (the FMA pipe's rate, ``compute.fp32.fma_tflops`` / 2): the cheap ops
# are a conversion and an op; expf (range reduction, ex2, scaling) and sigmoid (expf and an IEEE
# divide) from the compute-bound H200 rows of 2026-12-01 (fp16 sigmoid of 71M and 196M elements at
# 0.75 G elements/s; fp16 exp of 37M elements within 5% of the copy bandwidth); float64 in fp32 slots
# (the FP64 pipe at half the rate, exp and divide as polynomial and Newton code: fp64 sigmoid and exp
# of ~1-2M L2-resident elements ran at 0.28 and 0.36 G elements/s).
SLOTS = {"float16": {"add": 2, "mul": 2, "maximum": 2, "relu": 2, "exp": 24, "sigmoid": 43},
         "float32": {"add": 2, "mul": 2, "maximum": 2, "relu": 2, "exp": 24, "sigmoid": 43},
         "float64": {"add": 2, "mul": 2, "maximum": 2, "relu": 2, "exp": 93, "sigmoid": 119}}


def _smax(a: float, b: float, p: float = SMOOTH) -> float:
    return (a**p + b**p) ** (1 / p)


def model_us(d: PointwiseDescriptor, k, q, hidden: bool = False) -> float:
    """The launch floor, then the slowest of: the bytes at the bandwidth of the level the working set
    sits in (L2 or DRAM) at the access width, combined with Little's law over the thread slots
    (rounds of resident blocks, each a memory latency plus its thread's elements one after another),
    the block scheduler's pace, and the op's issue slots at the FP32 rate over the occupancy."""
    e, nin = d.itemsize_bytes, d.inputs
    vec, ept, block = int(k["vec"]), int(k["ept"]), int(k["block"])
    sms = P.sm_count(q)
    width = vec * e
    slots = SLOTS[d.dtype][d.op]
    if d.dtype == "float16" and not hidden:  # the __half unrolled code (the simulated device has none)
        slots += HALF_UNROLL_SLOTS * math.log2(ept)
    need, resident = launch_shape(d, k)
    nvec = max(1, math.ceil(d.n / vec))
    if hidden:  # the compiler's registers: 16 + the loaded vectors, in 8-register granules
        regs = 16 + math.ceil(nin * ept * width / 4)
    else:  # the same, and the op's temporaries of the unrolled elements
        regs = 16 + nin * ept * width / 4 + vec * ept * slots * REGS_PER_SLOT
    regs = 8 * math.ceil(regs / 8)
    resident = max(1, min(resident, 65536 // int(regs * block)))
    cover = k["grid"] == "cover"
    g = grid_blocks(d, k, sms)
    per_sm = g / sms
    rounds = max(1.0, per_sm / resident) if cover else need / g  # waves of blocks, or loop iterations
    whole = math.ceil(rounds - 1e-9)
    ept_eff = min(ept, math.ceil(nvec / block))  # vectors the first block's threads really load
    nbytes = d.bytes_moved
    f = P.streamed_l2_fraction(q, nbytes)
    dram16 = P.dram_gbps(q, "copy", 16)
    dram = P.dram_gbps(q, "copy", width)
    l2_16 = q("memory.l2.read_bandwidth_gbps", P.DEFAULTS["memory.l2.read_bandwidth_gbps"])
    l2 = l2_16 * (dram / dram16) ** L2_WIDTH_EXP
    if not cover:  # a grid-stride loop's blocks drift apart: their DRAM accesses are spread wider
        dram /= 1 + STRIDE_DRAM
    t_bw = nbytes * (f / (l2 * 1e3) + (1 - f) / (dram * 1e3))
    # the latency Little's law gives: the bytes in flight per SM that reach the bandwidth, over it
    inflight = q("memory.bytes_in_flight_per_sm", P.DEFAULTS["memory.bytes_in_flight_per_sm"])
    lat = LAT_SHARE * sms * inflight * (f / (l2_16 * 1e3) + (1 - f) / (dram16 * 1e3))
    tflops = q("compute.fp32.fma_tflops", P.DEFAULTS["compute.fp32.fma_tflops"])
    clock_ghz = tflops * 1e3 / (sms * 256)  # 128 FP32 lanes per SM, 2 flops per FMA
    per_element = DEP_CYCLES * slots / (clock_ghz * 1e3)
    life = lat + (ELEMENT_US + per_element * vec) * ept_eff + (BLOCK_US if cover else 0.0)
    t_mem = _smax(t_bw, rounds * life) * (1 + (TAIL_COVER if cover else TAIL_STRIDE) * (whole / rounds - 1))
    if cover:
        t_mem = max(t_mem, per_sm * max(DISPATCH_US, block * THREAD_US))
    else:
        t_mem += BLOCK_US
    threads = min(resident, math.ceil(per_sm)) * block
    occupancy = min(1.0, threads / OCCUPANCY_THREADS)
    t_cmp = d.n * (slots + INDEX_SLOTS * (nin + 1) / vec) / (tflops * 0.5e6) / occupancy
    t = FLOOR * P.fixed_us(q) + max(t_mem, t_cmp)
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
