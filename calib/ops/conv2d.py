"""2-D convolution forward as an autotune family, after cuDNN's ``cudnnFindConvolutionForwardAlgorithm``.

The descriptor holds what cuDNN's tensor, filter and convolution descriptors hold: N, C, H, W; K,
R, S; pad, stride and dilation per axis; groups; input, filter and output data types; layout; math
mode. Batch size is in the key: the best algorithm changes with it.

Algorithms, in the preference order that breaks ties (least workspace first, so that among
algorithms within noise of each other the one that allocates least wins):

- ``gemm_1x1``: a 1x1 filter is a matrix product (``cupy.matmul``), no workspace;
- ``direct``: one thread per output element (``kernels/conv2d.cu``), no workspace;
- ``im2col_gemm``: the input unfolded into a (C·R·S) x (P·Q) matrix per image, then ``cupy.matmul``;
- ``fft``: ``cupy.fft`` of input and filter, products summed over channels, inverse FFT (stride 1
  and dilation 1 only).

On every miss each candidate's output is compared with a float64 reference computed another way
(shift-and-accumulate: one product per filter tap) before it is timed: a candidate that is wrong
never wins, and its failure is stored. On the simulated device each algorithm's time comes from a
roofline model (:func:`simulated_time_us`) with the device's noise.
"""

from __future__ import annotations

import dataclasses
import math

from .._lazy import lazy
from ..autotune.descriptors import dtype_name
from ..backends.base import UnsupportedConfig
from . import timer
from .timer import SPIN_UP_S, WARMUP_S, cuda_timer  # noqa: F401 - cuda_timer: this module's timer

np = lazy("numpy")

FAMILY = "conv2d"
ALGORITHMS = ("gemm_1x1", "direct", "im2col_gemm", "fft")
LAYOUTS = ("NCHW",)
MATH_MODES = ("default", "tf32", "fp16_accum")
# max |out - ref| / max |ref| allowed, by the narrowest of the three data types, and math mode
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 2e-2, "bfloat16": 5e-2}
TF32_TOLERANCE = 5e-3


@dataclasses.dataclass(frozen=True)
class Conv2dDescriptor:
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    in_dtype: str = "float32"
    filter_dtype: str = "float32"
    out_dtype: str = "float32"
    layout: str = "NCHW"
    math_mode: str = "default"
    direction: str = "fwd"
    _hash: int = dataclasses.field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self):
        for f in ("n", "c", "h", "w", "k", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w", "dilation_h",
                  "dilation_w", "groups"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) and not (hasattr(v, "item") and float(v) == int(v)):
                raise ValueError(f"conv2d descriptor field {f} is {v!r}, not an integer")
            object.__setattr__(self, f, int(v))
        for f in ("in_dtype", "filter_dtype", "out_dtype"):
            object.__setattr__(self, f, dtype_name(getattr(self, f), field=f"conv2d descriptor {f}"))
        if self.c % self.groups or self.k % self.groups:
            raise ValueError(f"groups={self.groups} must divide C={self.c} and K={self.k}")
        if self.p < 1 or self.q < 1:
            raise ValueError(f"the output of {self} would be empty")
        # The memo of the autotune cache hashes descriptors on every hit: hash once.
        object.__setattr__(self, "_hash", hash(dataclasses.astuple(self)[:-1]))

    def __hash__(self):
        return self._hash

    @property
    def p(self) -> int:
        return (self.h + 2 * self.pad_h - self.dilation_h * (self.r - 1) - 1) // self.stride_h + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.pad_w - self.dilation_w * (self.s - 1) - 1) // self.stride_w + 1

    @property
    def flops(self) -> float:
        return 2.0 * self.n * self.k * self.p * self.q * (self.c // self.groups) * self.r * self.s

    def with_batch(self, n: int) -> Conv2dDescriptor:
        return dataclasses.replace(self, n=n)


def conv(n, c, h, w, k, r, s=None, *, pad=0, stride=1, dilation=1, groups=1, dtype="float32", **kw):
    """A descriptor with square pad/stride/dilation given once."""
    return Conv2dDescriptor(n, c, h, w, k, r, r if s is None else s, pad, pad, stride, stride, dilation, dilation,
                            groups, dtype, dtype, dtype, **kw)


def conv_columns(d: dict) -> dict:
    """The ``autotune_conv`` row of a descriptor (its canonical JSON form)."""
    return {"direction": d["direction"], "batch": d["n"], "in_channels": d["c"], "in_h": d["h"], "in_w": d["w"],
            "out_channels": d["k"], "fil_h": d["r"], "fil_w": d["s"], "pad_h": d["pad_h"], "pad_w": d["pad_w"],
            "stride_h": d["stride_h"], "stride_w": d["stride_w"], "dilation_h": d["dilation_h"],
            "dilation_w": d["dilation_w"], "groups": d["groups"], "in_dtype": d["in_dtype"],
            "fil_dtype": d["filter_dtype"], "out_dtype": d["out_dtype"], "layout": d["layout"],
            "math_mode": d["math_mode"]}


def supports(d: Conv2dDescriptor, algorithm: str) -> str | None:
    """None when ``algorithm`` can run ``d``, else why not."""
    if d.layout not in LAYOUTS:
        return f"layout {d.layout} (only NCHW)"
    if d.direction != "fwd":
        return "forward only"
    if not (d.in_dtype == d.filter_dtype == d.out_dtype and d.in_dtype in ("float32", "float16")):
        return "one data type, float32 or float16"
    if algorithm == "gemm_1x1" and not (d.r == d.s == 1 and d.pad_h == d.pad_w == 0):
        return "1x1 filters without padding only"
    if algorithm == "fft" and not (d.stride_h == d.stride_w == d.dilation_h == d.dilation_w == 1):
        return "stride 1 and dilation 1 only"
    if algorithm not in ALGORITHMS:
        return f"no algorithm {algorithm!r}"
    return None


# ----------------------------------------------------------------------------------------------
# ResNet-50's convolutions (torchvision's v1.5: the stride in the 3x3), one of each shape, at 224x224

RESNET50 = [  # (C, H, K, R, stride, pad)
    (3, 224, 64, 7, 2, 3),
    (64, 56, 64, 1, 1, 0), (64, 56, 64, 3, 1, 1), (64, 56, 256, 1, 1, 0), (256, 56, 64, 1, 1, 0),
    (256, 56, 128, 1, 1, 0), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 0), (256, 56, 512, 1, 2, 0),
    (512, 28, 128, 1, 1, 0), (128, 28, 128, 3, 1, 1),
    (512, 28, 256, 1, 1, 0), (256, 28, 256, 3, 2, 1), (256, 14, 1024, 1, 1, 0), (512, 28, 1024, 1, 2, 0),
    (1024, 14, 256, 1, 1, 0), (256, 14, 256, 3, 1, 1),
    (1024, 14, 512, 1, 1, 0), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 0), (1024, 14, 2048, 1, 2, 0),
    (2048, 7, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1),
]


def resnet50_layers(batch: int, dtype: str = "float32") -> list[Conv2dDescriptor]:
    return [conv(batch, c, h, h, k, r, pad=pad, stride=stride, dtype=dtype) for c, h, k, r, stride, pad in RESNET50]


# ----------------------------------------------------------------------------------------------
# the simulated device's model

def simulated_time_us(d: Conv2dDescriptor, algorithm: str, truth: dict | None = None) -> float | None:
    """A roofline time per algorithm: launch costs plus the larger of compute and DRAM traffic, with
    each algorithm's efficiency and extra traffic (im2col's unfolded matrix, FFT's spectra). Not a
    prediction of a real GPU: a plausible landscape, in which each algorithm wins somewhere, for
    testing the cache."""
    if supports(d, algorithm) is not None:
        return None
    truth = truth or {}
    peak = float(truth.get("compute.fp32.fma_tflops", 60.0)) * 1e6  # flop per us
    bw = float(truth.get("memory.dram.read_bandwidth_gbps", 4300.0)) * 1e3  # bytes per us
    launch = float(truth.get("launch.latency_us", 4.0))
    elt = 2 if d.in_dtype == "float16" else 4
    cg = d.c // d.groups
    io = elt * (d.n * d.c * d.h * d.w + d.k * cg * d.r * d.s + d.n * d.k * d.p * d.q)
    if algorithm == "gemm_1x1":
        return launch + max(d.flops / (0.75 * peak), io / bw)
    if algorithm == "direct":
        # no data reuse through shared memory: efficiency falls as the reduction grows
        eff = 0.5 / (1.0 + cg * d.r * d.s / 256.0)
        return launch + max(d.flops / (eff * peak), 1.5 * io / bw)
    if algorithm == "im2col_gemm":
        col = elt * d.n * d.c * d.r * d.s * d.p * d.q
        return 3 * launch + 2 * col / bw + max(d.flops / (0.75 * peak), (col + io) / bw)
    hp, wp = d.h + 2 * d.pad_h, d.w + 2 * d.pad_w
    bins = hp * (wp // 2 + 1)
    planes = d.n * d.c + d.k * cg + d.n * d.k
    fft_flops = 2.5 * planes * hp * wp * math.log2(max(hp * wp, 2))
    product_flops = 8.0 * d.n * d.k * cg * bins
    spectra = 8 * planes * bins
    return 5 * launch + max((fft_flops + product_flops) / (0.5 * peak), 3 * spectra / bw)


# ----------------------------------------------------------------------------------------------
# CuPy implementations

def _cp():
    from .._optional import require

    return require("cupy", "the conv2d family on a GPU")


def out_shape(d: Conv2dDescriptor) -> tuple:
    return (d.n, d.k, d.p, d.q)


def run_gemm_1x1(d, x, w):
    cp = _cp()
    g, cg, kg = d.groups, d.c // d.groups, d.k // d.groups
    if d.stride_h != 1 or d.stride_w != 1:
        x = x[:, :, :: d.stride_h, :: d.stride_w]
    xs = cp.ascontiguousarray(x).reshape(d.n, g, cg, d.p * d.q)
    out = cp.matmul(w.reshape(1, g, kg, cg), xs)  # (N, G, Kg, PQ)
    return out.reshape(out_shape(d)).astype(d.out_dtype, copy=False)


def _unfold(d, x):
    """(N, C, R, S, P, Q) view of the padded input: the im2col matrix before it is copied."""
    cp = _cp()
    xp = cp.pad(x, ((0, 0), (0, 0), (d.pad_h, d.pad_h), (d.pad_w, d.pad_w))) if d.pad_h or d.pad_w else x
    xp = cp.ascontiguousarray(xp)
    sn, sc, sh, sw = xp.strides
    return cp.lib.stride_tricks.as_strided(
        xp, shape=(d.n, d.c, d.r, d.s, d.p, d.q),
        strides=(sn, sc, sh * d.dilation_h, sw * d.dilation_w, sh * d.stride_h, sw * d.stride_w))


def run_im2col_gemm(d, x, w):
    cp = _cp()
    g, cg, kg = d.groups, d.c // d.groups, d.k // d.groups
    col = cp.ascontiguousarray(_unfold(d, x)).reshape(d.n, g, cg * d.r * d.s, d.p * d.q)
    out = cp.matmul(w.reshape(1, g, kg, cg * d.r * d.s), col)
    return out.reshape(out_shape(d)).astype(d.out_dtype, copy=False)


def run_direct(d, x, w, _module={}):  # noqa: B006 - one compiled module per process
    cp = _cp()
    from ..resources import kernels_dir

    if "mod" not in _module:
        _module["mod"] = cp.RawModule(code=(kernels_dir() / "conv2d.cu").read_text(), options=("-std=c++17",),
                                      name_expressions=["conv2d_direct<float>", "conv2d_direct<__half>"])
    fn = _module["mod"].get_function("conv2d_direct<float>" if d.in_dtype == "float32" else "conv2d_direct<__half>")
    y = cp.empty(out_shape(d), dtype=d.out_dtype)
    total = d.n * d.k * d.p * d.q
    blocks = min(-(-total // 256), 65535 * 8)
    i32 = np.int32
    fn((blocks,), (256,), (cp.ascontiguousarray(x), cp.ascontiguousarray(w), y, *map(i32, (
        d.n, d.c, d.h, d.w, d.k, d.r, d.s, d.p, d.q, d.pad_h, d.pad_w, d.stride_h, d.stride_w, d.dilation_h,
        d.dilation_w, d.groups))))
    return y


def run_fft(d, x, w):
    cp = _cp()
    g, cg, kg = d.groups, d.c // d.groups, d.k // d.groups
    hp, wp = d.h + 2 * d.pad_h, d.w + 2 * d.pad_w
    xf = x.astype(cp.float32, copy=False)
    if d.pad_h or d.pad_w:
        xf = cp.pad(xf, ((0, 0), (0, 0), (d.pad_h, d.pad_h), (d.pad_w, d.pad_w)))
    X = cp.fft.rfft2(xf, s=(hp, wp))  # (N, C, hp, F)
    Wf = cp.fft.rfft2(w.astype(cp.float32, copy=False), s=(hp, wp))  # (K, Cg, hp, F)
    bins = X.shape[-2] * X.shape[-1]
    # correlation = IFFT(X * conj(W)); summed over the group's channels as a batched product per bin
    Xt = X.reshape(d.n, g, cg, bins).transpose(1, 3, 0, 2)  # (G, bins, N, Cg)
    Wt = cp.conj(Wf).reshape(g, kg, cg, bins).transpose(0, 3, 2, 1)  # (G, bins, Cg, Kg)
    Y = cp.matmul(Xt, Wt)  # (G, bins, N, Kg)
    Y = Y.transpose(2, 0, 3, 1).reshape(d.n, d.k, hp, -1)
    y = cp.fft.irfft2(Y, s=(hp, wp))[:, :, : d.p, : d.q]
    return cp.ascontiguousarray(y).astype(d.out_dtype, copy=False)


RUN = {"gemm_1x1": run_gemm_1x1, "direct": run_direct, "im2col_gemm": run_im2col_gemm, "fft": run_fft}


def reference(d, x, w):
    """float64 shift-and-accumulate, computed another way than every candidate: one product over
    channels per filter tap."""
    cp = _cp()
    g, cg, kg = d.groups, d.c // d.groups, d.k // d.groups
    x64 = x.astype(cp.float64)
    if d.pad_h or d.pad_w:
        x64 = cp.pad(x64, ((0, 0), (0, 0), (d.pad_h, d.pad_h), (d.pad_w, d.pad_w)))
    w64 = w.astype(cp.float64).reshape(g, kg, cg, d.r, d.s)
    out = cp.zeros((d.n, g, kg, d.p, d.q), dtype=cp.float64)
    for r in range(d.r):
        for s in range(d.s):
            h0, w0 = r * d.dilation_h, s * d.dilation_w
            xs = x64[:, :, h0: h0 + d.stride_h * (d.p - 1) + 1: d.stride_h, w0: w0 + d.stride_w * (d.q - 1) + 1:
                     d.stride_w].reshape(d.n, g, cg, d.p, d.q)
            out += cp.einsum("gkc,ngcpq->ngkpq", w64[:, :, :, r, s], xs)
    return out.reshape(out_shape(d))


def tolerance(d) -> float:
    tol = max(TOLERANCE[t] for t in (d.in_dtype, d.filter_dtype, d.out_dtype))
    return max(tol, TF32_TOLERANCE) if d.math_mode == "tf32" else tol


def check_output(d, out, ref):
    """Raise AssertionError unless ``out`` matches the float64 reference within the tolerance."""
    cp = _cp()
    if tuple(out.shape) != out_shape(d):
        raise AssertionError(f"output shape {tuple(out.shape)}, expected {out_shape(d)}")
    scale = float(cp.abs(ref).max()) or 1.0
    err = float(cp.abs(out.astype(cp.float64) - ref).max()) / scale
    if not math.isfinite(err) or err > tolerance(d):
        raise AssertionError(f"max |out - reference| / max |reference| is {err:.3g}, tolerance {tolerance(d):.1g}")
    return True


def random_inputs(d, seed: int = 0):
    cp = _cp()
    rs = cp.random.RandomState(seed)
    x = (rs.random_sample((d.n, d.c, d.h, d.w), dtype=cp.float32) * 2 - 1).astype(d.in_dtype)
    w = (rs.random_sample((d.k, d.c // d.groups, d.r, d.s), dtype=cp.float32) * 2 - 1).astype(d.filter_dtype)
    return x, w


# Candidates are timed in ROUNDS interleaved rounds (Autotuner._time_rounds says why), each batch of
# samples held behind a GPU spin so that the host runs ahead, and each sample from a cold L2
# (calib/ops/timer.py says why: host-bound and L2-placement timings changed from tune to tune).
ROUNDS = 3
HOLD, FLUSH_L2 = True, True
# The timing protocol an entry records (a soft field: entries timed under another are stale).
PROTOCOL = {"timer": "cuda events per call", "warmup_s": WARMUP_S, "spin_up_s": SPIN_UP_S, "rounds": ROUNDS,
            "hold": HOLD, "flush_l2": FLUSH_L2}


_FINGERPRINTS: dict = {}


def cupy_fingerprint(device_id: int | None = None) -> tuple[dict, dict]:
    """The device's hard fields and the software's soft fields, from CuPy, once per device."""
    cp = _cp()
    device_id = cp.cuda.Device().id if device_id is None else device_id
    if device_id not in _FINGERPRINTS:
        props = cp.cuda.runtime.getDeviceProperties(device_id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        rt, drv = cp.cuda.runtime.runtimeGetVersion(), cp.cuda.runtime.driverGetVersion()
        libraries = {"cupy": cp.__version__}
        try:
            libraries["cufft"] = str(cp.cuda.cufft.getVersion())
        except Exception:
            pass
        from .._version import __version__
        from ..fingerprint import cuda_version

        _FINGERPRINTS[device_id] = (
            {"name": name, "compute_capability": f"{props['major']}.{props['minor']}",
             "sm_count": int(props["multiProcessorCount"]), "simulated": False},
            {"driver": f"cuda-driver-api {cuda_version(drv)}",
             "cuda_runtime": cuda_version(rt), "cupy": cp.__version__, "calib": __version__,
             "libraries": libraries})
    return _FINGERPRINTS[device_id]


def descriptor_of(x, w, *, stride=1, padding=0, dilation=1, groups=1, math_mode="default", out_dtype=None):
    def pair(v):
        return (v, v) if isinstance(v, int) else tuple(v)

    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    return Conv2dDescriptor(n, c, h, wd, k, r, s, ph, pw, sh, sw, dh, dw, groups, x.dtype, w.dtype,
                            out_dtype or x.dtype, "NCHW", math_mode)


def select_algorithm(d: Conv2dDescriptor, autotuner, *, x=None, w=None, algorithms=ALGORITHMS, early_stop=None,
                     rule=None):
    """The cached algorithm for ``d`` on this GPU; on a miss every supported algorithm's output is
    checked against the float64 reference, then timed on ``x``, ``w`` (random inputs if None)."""
    memo = autotuner._recall(FAMILY, d)
    if memo is not None and memo.offered is algorithms:
        autotuner.counters.hits += 1
        return memo
    state = {}

    def inputs():
        if "x" not in state:
            state["x"], state["w"] = (x, w) if x is not None else random_inputs(d)
        return state["x"], state["w"]

    def check(alg):
        why = supports(d, alg)
        if why:
            raise UnsupportedConfig(why)
        xx, ww = inputs()
        if "ref" not in state:
            state["ref"] = reference(d, xx, ww)
        return check_output(d, RUN[alg](d, xx, ww), state["ref"])

    def time(alg):
        xx, ww = inputs()
        return cuda_timer(lambda: RUN[alg](d, xx, ww), rule=rule, hold=HOLD, flush_l2=FLUSH_L2)

    try:
        return autotuner.select(FAMILY, d, algorithms, time=time, check=check, early_stop=early_stop, rounds=ROUNDS)
    finally:
        state.clear()
        timer.release()  # the L2 flush buffer (twice the L2) is not kept between misses
        _cp().get_default_memory_pool().free_all_blocks()


def conv2d(x, w, *, stride=1, padding=0, dilation=1, groups=1, math_mode="default", autotuner=None):
    """Forward convolution of CuPy arrays (NCHW input, KCRS filter) by the algorithm the autotune
    cache chose for this problem on this GPU (tuned on a miss)."""
    from ..autotune import autotuner_for

    d = descriptor_of(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups, math_mode=math_mode)
    if autotuner is None:
        autotuner = autotuner_for(*cupy_fingerprint(), protocol=PROTOCOL)
    sel = select_algorithm(d, autotuner, x=x, w=w)
    return RUN[sel.choice](d, x, w)


def sim_family(backend, **kwargs):
    """The conv2d family on the simulated device: ``SimFamily`` with this module's model."""
    from ..autotune.sim import SimFamily

    return SimFamily(backend, lambda d, alg: simulated_time_us(d, alg, backend.truth), **kwargs)
