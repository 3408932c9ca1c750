"""Normalization over rows (softmax, layer norm without affine weights): persistent or multi-pass.

Knobs, what nvFuser's inner-normalization scheduler decides:

- ``strategy``: ``persistent`` (each thread holds ``buffer`` elements of its row in registers:
  one read, one write) or ``multipass`` (a first pass reduces, a second reads the row again and
  writes; the second read comes from L2 when the rows in flight fit there);
- ``threads``: threads per row (one block per row);
- ``vec``: elements per vector access (4, 8 or 16 bytes);
- ``buffer``: the persistent buffer per thread, a compiled size (0 for multi-pass).

Registers decide the persistent kernel: ``normalization.additional_registers`` plus the buffer,
spilling past ``normalization.max_persistent_elements_per_thread``; registers per thread bound
the blocks resident per SM, hence the bytes in flight. The CuPy kernels are
``persistent_norm<T, BUF, VEC, OP>`` and ``multipass_norm<T, VEC, OP>`` (:data:`SOURCE`); each
candidate's output is checked against a float64 CuPy reference first.
"""

from __future__ import annotations

import dataclasses
import math

from .._lazy import lazy
from . import predictor as P
from .knobs import ITEMSIZE, FamilyDescriptor, Knobs, check_output, require_cupy

np = lazy("numpy")

KIND = "normalization"
FAMILY = "heuristics.normalization"
OPS = ("softmax", "layernorm")
DTYPES = ("float32", "float16")
THREADS = (32, 64, 128, 256, 512, 1024)
MULTIPASS_THREADS = (128, 256, 512, 1024)
BUFFERS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
WIDTHS = (4, 8, 16)
UNROLL = 4  # vectors in flight per thread in the multi-pass loops
EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class NormDescriptor(FamilyDescriptor):
    KIND = KIND
    op: str
    rows: int
    cols: int
    dtype: str = "float32"

    def __post_init__(self):
        self._check_fields({"op": OPS, "dtype": DTYPES}, counts=("rows", "cols"))

    @property
    def bytes_moved(self) -> int:
        return 2 * self.rows * self.cols * self.itemsize_bytes


descriptor = NormDescriptor.parse


def vecs(d) -> list[int]:
    return [w // d.itemsize_bytes for w in WIDTHS if d.cols % (w // d.itemsize_bytes) == 0]


def widest_vec(d) -> int:
    v = vecs(d)
    return v[-1] if v else 1


def buffer_for(per_thread: int, vec: int) -> int | None:
    for b in BUFFERS:
        if b >= per_thread and b % vec == 0:
            return b
    return None


def space(d: NormDescriptor) -> list[Knobs]:
    out = []
    for v in vecs(d) or [1]:
        for t in THREADS:
            b = buffer_for(math.ceil(d.cols / t), v)
            if b is not None and (t == 32 or math.ceil(d.cols / (t // 2)) > v):  # no thread without work
                out.append(Knobs(strategy="persistent", threads=t, vec=v, buffer=b))
        for t in MULTIPASS_THREADS:
            out.append(Knobs(strategy="multipass", threads=t, vec=v, buffer=0))
    return out


def norm_gbps(q, width: int) -> float:
    w = min(16, max(4, P.width_of(width)))
    return q(f"normalization.load_bandwidth_gbps.align{w}", P.dram_gbps(q, "copy", w) * 0.93)


def model_us(d: NormDescriptor, k, q, hidden: bool = False) -> float:
    e, rows, cols = d.itemsize_bytes, d.rows, d.cols
    threads, vec, buf = int(k["threads"]), int(k["vec"]), int(k["buffer"])
    sms = P.sm_count(q)
    overhead = q("normalization.additional_registers", P.DEFAULTS["normalization.additional_registers"])
    max_buf = q("normalization.max_persistent_elements_per_thread",
                P.DEFAULTS["normalization.max_persistent_elements_per_thread"])
    persistent = k["strategy"] == "persistent"
    regs = overhead + (buf if persistent else 4 * vec)
    if hidden:
        regs += 2 if persistent else 0
    spilled = max(0.0, buf - max_buf) if persistent else 0.0
    regs = min(255, 8 * math.ceil(regs / 8))
    bps = min(32, 2048 // threads, 65536 // (regs * threads))
    if bps < 1:
        return math.inf
    per_thread_bytes = (buf if persistent else UNROLL * vec) * e
    concurrent = min(rows, sms * bps)
    inflight = concurrent * threads * per_thread_bytes / sms
    eff = P.inflight_efficiency(q, inflight)
    width = vec * e
    bw = norm_gbps(q, width) * 1e3
    l2 = q("memory.l2.read_bandwidth_gbps", P.DEFAULTS["memory.l2.read_bandwidth_gbps"]) * 1e3
    l2 *= norm_gbps(q, width) / norm_gbps(q, 16)
    total = d.bytes_moved
    f = P.l2_fraction(q, total)
    t_mem = total * (f / l2 + (1 - f) / bw) / eff
    if not persistent:  # the second read: from L2 when the rows in flight fit
        again = rows * cols * e
        in_flight_rows = concurrent * cols * e
        g = P.l2_fraction(q, in_flight_rows) * (0.9 if hidden else 1.0)
        g = max(g, f)
        t_mem += again * (g / l2 + (1 - g) / bw) / eff
    if spilled:
        t_mem *= 1 + 2.0 * spilled / buf
    waves = math.ceil(rows / (sms * bps))
    t_sync = waves * 2 * (0.3 + 0.05 * math.log2(threads)) / min(bps, 4)
    if waves < 4 and rows >= sms:
        t_mem *= 1 + 0.3 * (P.imbalance(rows, sms) - 1)
    flops = rows * cols * (10 if d.op == "softmax" else 8)
    t_cmp = flops / (q("compute.fp32.fma_tflops", P.DEFAULTS["compute.fp32.fma_tflops"]) * 1e6)
    t = P.fixed_us(q) + max(t_mem, t_cmp) + t_sync
    if hidden:
        t += 0.004 * rows / sms
    return t


def heuristic(d, profile) -> Knobs:
    d = descriptor(d)
    return P.rank(model_us, d, space(d), profile)[0][1]


def sim_library_us(d, q) -> float:
    """CuPy composed of its own ops (max, exp of the difference, sum, divide; mean, var, ...):
    about six passes over the rows and four kernels."""
    nbytes = 3 * d.bytes_moved
    return 4 * P.fixed_us(q) + P.stream_us(q, nbytes, d.bytes_moved, d.itemsize_bytes, "copy") / 0.9


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


# ----------------------------------------------------------------------------------------------
# CuPy

SOURCE = r"""
#include <cuda_fp16.h>
#define NEG_INF __int_as_float(0xff800000)  // NVRTC has no <math.h> INFINITY
template <typename T, int V> struct alignas(sizeof(T) * V) VecT { T v[V]; };
__device__ __forceinline__ float tof(__half x) { return __half2float(x); }
__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ void fromf(float x, __half &y) { y = __float2half_rn(x); }
__device__ __forceinline__ void fromf(float x, float &y) { y = x; }

// block-wide reduction of one float (op 0: max, 1: sum) through warp shuffles and shared memory
__device__ __forceinline__ float block_reduce(float v, int op, float *sh) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffff, v, o);
    v = op == 0 ? fmaxf(v, w) : v + w;
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : (op == 0 ? NEG_INF : 0.f);
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffff, v, o);
    v = op == 0 ? fmaxf(v, w) : v + w;
  }
  return v;
}

// OP 0 softmax, 1 layer norm; one block per row; each thread holds BUF elements as BUF/V vectors
template <typename T, int BUF, int V, int OP>
__global__ void persistent_norm(const T *__restrict__ x, T *__restrict__ y, int rows, int cols, float eps) {
  __shared__ float sh[32];
  typedef VecT<T, V> W;
  const int nv = cols / V;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const W *xr = reinterpret_cast<const W *>(x + (long long)row * cols);
    W *yr = reinterpret_cast<W *>(y + (long long)row * cols);
    float buf[BUF];
#pragma unroll
    for (int j = 0; j < BUF / V; ++j) {
      int i = j * blockDim.x + threadIdx.x;
      if (i < nv) {
        W w = xr[i];
#pragma unroll
        for (int v = 0; v < V; ++v) buf[j * V + v] = tof(w.v[v]);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) buf[j * V + v] = OP == 0 ? NEG_INF : 0.f;
      }
    }
    float a = OP == 0 ? NEG_INF : 0.f;
#pragma unroll
    for (int j = 0; j < BUF; ++j) a = OP == 0 ? fmaxf(a, buf[j]) : a + buf[j];
    a = block_reduce(a, OP == 0 ? 0 : 1, sh);
    float center = OP == 0 ? a : a / cols;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < BUF; ++j) {
      int i = (j / V) * blockDim.x + threadIdx.x;
      if (i < nv) {
        float d = buf[j] - center;
        if (OP == 0) { buf[j] = __expf(d); s += buf[j]; } else { buf[j] = d; s += d * d; }
      }
    }
    s = block_reduce(s, 1, sh);
    float scale = OP == 0 ? 1.f / s : rsqrtf(s / cols + eps);
#pragma unroll
    for (int j = 0; j < BUF / V; ++j) {
      int i = j * blockDim.x + threadIdx.x;
      if (i < nv) {
        W w;
#pragma unroll
        for (int v = 0; v < V; ++v) fromf(buf[j * V + v] * scale, w.v[v]);
        yr[i] = w;
      }
    }
  }
}

// two passes over the row: statistics (online max and sum of exponentials, or sum and sum of
// squares), then the row read again, normalized and written
template <typename T, int V, int OP>
__global__ void multipass_norm(const T *__restrict__ x, T *__restrict__ y, int rows, int cols, float eps) {
  __shared__ float sh[32];
  typedef VecT<T, V> W;
  const int nv = cols / V;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const W *xr = reinterpret_cast<const W *>(x + (long long)row * cols);
    W *yr = reinterpret_cast<W *>(y + (long long)row * cols);
    float m = NEG_INF, s = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
      W w = xr[i];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float f = tof(w.v[v]);
        if (OP == 0) {
          float nm = fmaxf(m, f);
          s = s * __expf(m - nm) + __expf(f - nm);
          m = nm;
        } else {
          m = (m == NEG_INF ? 0.f : m) + f;
          s += f * f;
        }
      }
    }
    float mean, scale;
    if (OP == 0) {
      float bm = block_reduce(m, 0, sh);
      float bs = block_reduce(m == NEG_INF ? 0.f : s * __expf(m - bm), 1, sh);
      mean = bm;
      scale = 1.f / bs;
    } else {
      float sum = block_reduce(m == NEG_INF ? 0.f : m, 1, sh);
      float sq = block_reduce(s, 1, sh);
      mean = sum / cols;
      scale = rsqrtf(fmaxf(sq / cols - mean * mean, 0.f) + eps);
    }
#pragma unroll 4
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
      W w = xr[i], o;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float f = tof(w.v[v]);
        fromf(OP == 0 ? __expf(f - mean) * scale : (f - mean) * scale, o.v[v]);
      }
      yr[i] = o;
    }
  }
}
"""
CTYPE = {"float16": "__half", "float32": "float"}
TOLERANCE = {"float16": 4e-3, "float32": 2e-4}
_modules: dict = {}


def _cp():
    return require_cupy("the normalization kernel family on a GPU")


def _names(dtype):
    e = ITEMSIZE[dtype]
    out = []
    for op in (0, 1):
        for w in WIDTHS:
            v = w // e
            out += [f"persistent_norm<{CTYPE[dtype]},{b},{v},{op}>" for b in BUFFERS if b % v == 0]
            out.append(f"multipass_norm<{CTYPE[dtype]},{v},{op}>")
    return out


def kernel(dtype: str, k, op: str):
    cp = _cp()
    mod = _modules.get(dtype)
    if mod is None:
        mod = _modules[dtype] = cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=_names(dtype))
    o = OPS.index(op)
    if k["strategy"] == "persistent":
        return mod.get_function(f"persistent_norm<{CTYPE[dtype]},{int(k['buffer'])},{int(k['vec'])},{o}>")
    return mod.get_function(f"multipass_norm<{CTYPE[dtype]},{int(k['vec'])},{o}>")


class GpuCase:
    def __init__(self, d: NormDescriptor, sm_count: int, seed: int = 0):
        cp = _cp()
        self.d = d
        rs = cp.random.RandomState(seed)
        self.x = (rs.standard_normal((d.rows, d.cols), dtype=cp.float32) * 2).astype(d.dtype)
        self.y = cp.empty_like(self.x)
        self._ref = None

    def run(self, k):
        d = self.d
        fn = kernel(d.dtype, k, d.op)
        fn((d.rows,), (int(k["threads"]),), (self.x, self.y, np.int32(d.rows), np.int32(d.cols), np.float32(EPS)))

    def reference(self):
        if self._ref is None:
            cp = _cp()
            x = self.x.astype(cp.float64)
            if self.d.op == "softmax":
                e = cp.exp(x - x.max(axis=1, keepdims=True))
                self._ref = e / e.sum(axis=1, keepdims=True)
            else:
                m = x.mean(axis=1, keepdims=True)
                self._ref = (x - m) / cp.sqrt(x.var(axis=1, keepdims=True) + EPS)
        return self._ref

    def check(self, k):
        return check_output(self, k, TOLERANCE[self.d.dtype])

    def library(self):
        """Softmax or layer norm as a CuPy user writes it from CuPy's own ops."""
        cp = _cp()
        x = self.x
        if self.d.op == "softmax":
            def f():
                e = cp.exp(x - x.max(axis=1, keepdims=True))
                return e / e.sum(axis=1, keepdims=True)
        else:
            def f():
                m = x.mean(axis=1, keepdims=True)
                return (x - m) / cp.sqrt(x.var(axis=1, keepdims=True) + EPS)
        return f

    def free(self):
        self.x = self.y = self._ref = None
