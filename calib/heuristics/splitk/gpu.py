"""The family on a GPU: the CuPy case (split 1 as cupy.matmul, a split as one batched cupy.matmul of
the K-slices and ``splitk_sum`` of the partials) and its CUDA source. CuPy is imported on first use.
"""

from __future__ import annotations

from ..._lazy import lazy
from ..knobs import check_output, require_cupy
from .problem import SplitKDescriptor

np = lazy("numpy")

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
