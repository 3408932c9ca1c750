"""The family's model: a split's predicted time (split 1 as one cuBLAS GEMM, a split s > 1 as CuPy's
batched path), the recorded-time forests applied, and the simulated device's library time.
"""

from __future__ import annotations

import math

from .. import predictor as P
from ..knobs import Knobs
from .batched import batched_gemm_us
from .forests import fp16_split1_log_factor, fp32_recorded_log_factor, fp32_splits_log_factor
from .fp32_split1 import split1_fp32_us
from .gemm import SMALL_KERNEL_US, TRANSPOSE_EFFICIENCY, gemm_us
from .problem import TILE, SplitKDescriptor


def small_kernel_us(q, nbytes: float, efficiency: float = 1.0) -> float:
    """An elementwise kernel of the batched path (CuPy's ``ascontiguousarray``, a cast, or
    ``splitk_sum``) moving ``nbytes`` read plus written."""
    return SMALL_KERNEL_US + nbytes / (P.dram_gbps(q, "copy", 16) * 1e3 * efficiency)


def model_us(d: SplitKDescriptor, k, q, hidden: bool = False) -> float:
    s = int(k["split"])
    e = d.itemsize_bytes
    if s == 1:  # cupy.matmul of 2-D operands: one cublasGemmEx, tensor cores for fp16
        if d.dtype == "float32":
            t = split1_fp32_us(q, d.m, d.n, d.k) * math.exp(fp32_recorded_log_factor(q, d.m, d.n, d.k))
        else:
            t = gemm_us(q, d.m, d.n, d.k, e, e, "tensor") * math.exp(fp16_split1_log_factor(q, d.m, d.n, d.k))
        if hidden:  # the simulated device's own effect: a prologue per wave of output tiles
            tiles = math.ceil(d.m / TILE) * math.ceil(d.n / TILE)
            t += 0.3 * math.ceil(tiles / P.sm_count(q))
        return t
    t = split_path_us(d, s, q)
    if d.dtype == "float32":
        t *= math.exp(fp32_splits_log_factor(q, d.m, d.n, d.k, s))
    if hidden:
        t *= 1.02
    return t


def split_path_us(d: SplitKDescriptor, s: int, q) -> float:
    """Split ``s`` > 1 as the model times its kernels, before the recorded-time forest (FP32_SPLITS_FILE).

    cupy.matmul of 3-D operands: fp16 is promoted to fp32 and both operands made contiguous (the
    transposed K-slices of At copied, cast on the way), one FP32 strided-batched GEMM of s products
    writes s*m*n fp32 partials, fp16 casts them back, then splitk_sum adds them."""
    e = d.itemsize_bytes
    t = small_kernel_us(q, d.m * d.k * (e + 4), TRANSPOSE_EFFICIENCY)
    if e != 4:
        t += small_kernel_us(q, d.k * d.n * (e + 4))
    t += batched_gemm_us(q, d.m, d.n, d.k // s, s, d.dtype)
    if e != 4:
        t += small_kernel_us(q, s * d.m * d.n * (4 + e))
    rate = q("matmul.splitk.elements_reduced_per_second", P.DEFAULTS["matmul.splitk.elements_reduced_per_second"])
    return t + SMALL_KERNEL_US + s * d.m * d.n / rate * 1e6


def sim_library_us(d, q) -> float:
    """Plain cupy.matmul: split 1."""
    return model_us(d, Knobs(split=1), q, hidden=True)
