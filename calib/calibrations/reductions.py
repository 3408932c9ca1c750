"""Reductions along the contiguous (inner) and the strided (outer) axis of a row-major fp32 matrix.

Inner: one block per row sums its contiguous elements. Outer: threads own columns and walk the rows
of a slab, adding their partial sums atomically. Both over row counts at a fixed width, far beyond
L2; ``t = t0 + bytes / bandwidth`` gives ``reduction.inner.bandwidth_gbps`` and
``reduction.outer.bandwidth_gbps`` (bytes of the input, read once).
"""

from __future__ import annotations

from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..fit import fit_rates
from ._base import Param, line_figures, small_kernels

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]

TITLE = "Reductions along the inner and the outer axis"
INTRO = """Sums a row-major fp32 matrix of 8192 columns along its rows (inner: contiguous, one block per
row) and along its columns (outer: strided, threads own columns and add slabs atomically), over
row counts far beyond L2; `t = t0 + bytes / bandwidth` gives `reduction.inner.bandwidth_gbps` and
`reduction.outer.bandwidth_gbps`."""
READING = """Both are memory-bound; how far each falls below `memory.dram.read_bandwidth_gbps` is what a
reduction scheduler pays for the axis it reduces along."""
AXES = ("inner", "outer")
SIM_DEFAULTS = {"sim.reductions.fixed_us": 5.0}
THREADS = 256
COLS = 8192
# Up to 4 GiB per matrix: with 2 GiB at most, the outer-axis line's CI was ±0.68% on an H200
# (2026-11-29); a longer lever arm narrows it.
SUITES = {"quick": [16384, 24576, 32768, 49152, 65536, 98304, 131072],
          "full": [8192, 16384, 24576, 32768, 49152, 65536, 81920, 98304, 114688, 131072]}


def param_name(axis: str) -> str:
    return f"reduction.{axis}.bandwidth_gbps"


PARAMETERS = (Param("reduction.inner.bandwidth_gbps", "GB/s", "sum along the contiguous axis, input bytes over time"),
              Param("reduction.outer.bandwidth_gbps", "GB/s", "sum along the strided axis, input bytes over time"))


def plan(suite: str, *, memory_bytes: int = 2**34, **_) -> list[dict]:
    return [{"calibration": ID, "axis": a, "rows": r, "cols": COLS} for r in SUITES[suite] for a in AXES
            if footprint_bytes({"rows": r, "cols": COLS}) < memory_bytes / 2]


def footprint_bytes(config: dict) -> int:
    return 2 * 4 * config["rows"] * config["cols"]  # two input sets, rotated


def bytes_read(c):
    return 4.0 * np.asarray(c["rows"], dtype=float) * np.asarray(c["cols"], dtype=float)


def default_truth(base: dict | None = None) -> dict:
    truth = {param_name("inner"): 4150.0, param_name("outer"): 3900.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def true_time_us(frame, truth: dict) -> np.ndarray:
    bw = np.array([truth[param_name(a)] for a in frame["axis"]])
    return truth["sim.reductions.fixed_us"] + bytes_read(frame) / (bw * 1e3)


def fit(frame, *, robust: bool = False, source: str | None = None):
    return fit_rates(frame, ID, work=bytes_read, name=param_name, by="axis", scale=1e9, unit="GB/s",
                     robust=robust, source=source)


def figures(frame, result, *, title) -> dict:
    return line_figures(result, title, {param_name(a): ("GB read", 1e9) for a in AXES})


# The check's reference: float64 sums by kernels of calib's own, compiled in prepare. CuPy's
# ``sum(dtype=float64)`` (and the ``got - ref`` and norms of the comparison) compile on first call,
# inside the GPU turn, with no compile-only path (``_launch`` in cupy/_core/_reduction.pyx): on
# fresh H200s the reductions notebook measured 3.4-4.0 s against 0.6-1.0 s with CuPy's kernel cache
# warm (session 4, 2026-12-02). Rows: a block per row, a tree in shared memory; columns: a thread
# per column over a slab of REFERENCE_SLAB rows, the slabs' sums added atomically, in float64.
REFERENCE_THREADS = 256  # a power of two: the rows kernel halves its tree
REFERENCE_SLAB = 1024
REFERENCE_KEY = "reductions-reference"
REFERENCE_CU = r"""
extern "C" __global__ void reference_rows_f64(const float* __restrict__ in, double* __restrict__ out, int cols) {
    __shared__ double part[256];
    const float* row = in + (unsigned long long)blockIdx.x * cols;
    double acc = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) acc += (double)row[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

extern "C" __global__ void reference_cols_f64(const float* __restrict__ in, double* __restrict__ out, int rows,
                                              int cols, int slab) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const int r0 = blockIdx.y * slab;
    const int r1 = min(rows, r0 + slab);
    double acc = 0.0;
    for (int r = r0; r < r1; ++r) acc += (double)in[(unsigned long long)r * cols + c];
    atomicAdd(out + c, acc);
}
"""


def reference_kernels(b):
    return b.module(REFERENCE_KEY, None, [], code=REFERENCE_CU)


def reference_sums(b, src, axis: str, rows: int, cols: int):
    """Float64 sums of ``src`` along ``axis``, on the device once ``b.stream`` has run, by calib's
    reference kernels: no CuPy kernel, so nothing compiles here."""
    cp, mod = b.cp, reference_kernels(b)
    ref = cp.empty(rows if axis == "inner" else cols, dtype=cp.float64)
    if axis == "inner":
        mod.get_function("reference_rows_f64")((rows,), (REFERENCE_THREADS,), (src, ref, np.int32(cols)),
                                               stream=b.stream)
    else:
        ref.data.memset_async(0, ref.nbytes, b.stream)  # the slabs add into it
        grid = (-(-cols // REFERENCE_THREADS), -(-rows // REFERENCE_SLAB))
        mod.get_function("reference_cols_f64")(grid, (REFERENCE_THREADS,), (src, ref, np.int32(rows), np.int32(cols),
                                                                            np.int32(REFERENCE_SLAB)), stream=b.stream)
    return ref


def relative_error(got_host, ref_host) -> float:
    """‖got − ref‖ / ‖ref‖, on the host in float64."""
    ref_host = np.asarray(ref_host, dtype=np.float64)
    return float(np.linalg.norm(np.asarray(got_host, dtype=np.float64) - ref_host) / np.linalg.norm(ref_host))


def measure(b, config: dict):
    """Inner or outer sum of a rows × cols fp32 matrix, two input sets alternated, checked against
    float64 sums (reference_sums) before timing."""
    cp = b.cp
    axis, rows, cols = config["axis"], int(config["rows"]), int(config["cols"])
    if cols % 1024:
        raise UnsupportedConfig("the reduction kernels need cols to be a multiple of 1024")
    if axis not in AXES:
        raise UnsupportedConfig(f"no reduction along {axis!r}")
    mod = small_kernels(b)

    def make():
        b.check_free(2 * 4 * rows * cols)
        return {"src": [cp.random.random((rows, cols), dtype=cp.float32) for _ in range(2)],
                "dst": [cp.zeros(max(rows, cols), dtype=cp.float32) for _ in range(2)]}

    held = b.buffers(("reduction", rows, cols), make)
    src, dst = held["src"], held["dst"]
    if axis == "inner":
        kernel = mod.get_function("reduce_inner")
        grid, block = (rows,), (THREADS,)

        def launch(i):
            kernel(grid, block, (src[i % 2], dst[i % 2], np.int32(cols)), stream=b.stream)
    else:
        kernel = mod.get_function("reduce_outer")
        col_blocks = (cols + THREADS - 1) // THREADS
        slabs = max(1, (b.sm_count * 8) // col_blocks)
        slab = (rows + slabs - 1) // slabs
        grid, block = (col_blocks, slabs), (THREADS,)

        def launch(i):
            dst[i % 2][:cols].fill(0)  # a memset on the current stream: part of the fixed cost
            kernel(grid, block, (src[i % 2], dst[i % 2], np.int32(rows), np.int32(cols), np.int32(slab)),
                   stream=b.stream)
    with b.stream:
        launch(0)
        ref = reference_sums(b, src[0], axis, rows, cols)
        b.stream.synchronize()
        got = dst[0][:rows] if axis == "inner" else dst[0][:cols]
        err = relative_error(got.get(), ref.get())
    if not err < 1e-5:
        raise RuntimeError(f"reduce_{axis} is wrong at {rows}x{cols}: relative error {err:.2e}")

    def timed(i):
        with b.stream:
            launch(i)

    return b.time_launches(timed, perf_config={"threads": THREADS, "grid": list(grid)})


def prepare(b, configs):
    """Compiles kernels/small.cu and the check's reference kernels (REFERENCE_CU). The reference
    was CuPy's ``sum(axis=1, dtype=float64)``, which CuPy compiles in the call that launches it
    (``_launch`` in cupy/_core/_reduction.pyx; its CUB block reduction likewise, ``_launch_cub``),
    with no public compile-only path: on a fresh H200 (session 4, 2026-12-02) the first inner
    point, which compiled it, took 2.77 s of the GPU turn (0.1 s once cached)."""
    small_kernels(b)
    reference_kernels(b)
