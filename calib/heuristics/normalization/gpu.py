"""The normalization family on a GPU: the CUDA source of its kernels (:data:`SOURCE`), their
compilation through CuPy (:func:`kernel`, on first use: importing this module imports neither CuPy
nor NumPy), :class:`GpuCase` (a problem's buffers, its float64 reference, the CuPy-composed
library version) and that library version's time on the simulated device (:func:`sim_library_us`)."""

from __future__ import annotations

from ..._lazy import lazy
from .. import predictor as P
from ..knobs import ITEMSIZE, check_output, require_cupy
from .candidates import BUFFERS, EPS, OPS, WIDTHS, NormDescriptor

np = lazy("numpy")


def sim_library_us(d, q) -> float:
    """CuPy composed of its own ops (max, exp of the difference, sum, divide; mean, var, ...):
    about six passes over the rows and four kernels."""
    nbytes = 3 * d.bytes_moved
    return 4 * P.fixed_us(q) + P.stream_us(q, nbytes, d.bytes_moved, d.itemsize_bytes, "copy") / 0.9


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
        if e > 1:  # rows of odd length in fp16: the space falls back to one element per access
            out += [f"persistent_norm<{CTYPE[dtype]},{b},1,{op}>" for b in BUFFERS]
            out.append(f"multipass_norm<{CTYPE[dtype]},1,{op}>")
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
