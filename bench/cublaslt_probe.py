"""Ask cuBLASLt which kernel it would run for each fp32 GEMM (issue 14): ``cublasLtMatmulAlgoGetHeuristic``.

    python3 bench/probes.py cublaslt-heuristics SHAPES.json OUT.json [--time N] [--no-log]

Why: for fp32 ``cupy.matmul`` runs 1.3-1.9x slower than the split-K model predicts where cuBLAS picks a
tile other than the fastest one the model knows; given the tile it ran the model's constants predict the
traced time to 0.96 (H200, 2026-12-02, bench/results/2026-12-02-h200-splitk-kernels/kernels.json). The tile
could not be learned from the shape, so this asks Lt's heuristic, per shape, for its ranked algos (tile,
split-K, reduction, stages, swizzle, custom option, cluster, workspace, waves), and, separately, records
what cuBLAS's gemm actually ran (Lt's own trace log of ``cupy.matmul``) and times a few shapes both ways.

Enum values and struct layouts are from cublasLt.h of cuBLAS 13.10.0.20 (pip wheel nvidia-cublas
13.10.0.20, nvidia/cu13/include/cublasLt.h) and agree with cuBLAS 12.6.4 (CUDA 12.6.3 include/cublasLt.h,
github zspace/system.cuda-12.6): 13.10 only adds values. Status / op / compute values from cublas_api.h,
CUDA_R_32F = 0 from library_types.h. Where the installed wheel ships cublasLt.h the tile names are read
from it and the table below is checked against it (a mismatch stops the probe: a wrong enum would
silently give nonsense)."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import json
import os
import re
import sys
import time

# cublas_api.h (13.10 / 12.6): cublasStatus_t, cublasOperation_t, cublasComputeType_t.
STATUS_NAMES = {0: "SUCCESS", 1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE", 8: "ARCH_MISMATCH",
                11: "MAPPING_ERROR", 13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED",
                16: "LICENSE_ERROR"}
OP_N, OP_T = 0, 1
COMPUTE_32F = 68          # CUBLAS_COMPUTE_32F: what CuPy passes for fp32 unless CUPY_TF32=1
CUDA_R_32F = 0            # library_types.h
# cublasLt.h: cublasLtMatmulDescAttributes_t, cublasLtMatmulPreferenceAttributes_t,
# cublasLtMatmulAlgoConfigAttributes_t (each value with its C type, which GetAttribute checks by size).
DESC_TRANSA, DESC_TRANSB = 3, 4                       # int32_t
PREF_MAX_WORKSPACE_BYTES = 1                          # uint64_t
CONFIG_ATTRS = [("algo_id", 0, ctypes.c_int32), ("tile_id", 1, ctypes.c_uint32), ("splitk", 2, ctypes.c_int32),
                ("reduction", 3, ctypes.c_uint32), ("swizzle", 4, ctypes.c_uint32),
                ("custom_option", 5, ctypes.c_uint32), ("stages_id", 6, ctypes.c_uint32),
                ("inner_shape_id", 7, ctypes.c_uint16), ("cluster_id", 8, ctypes.c_uint16)]
# cublasLtMatmulTile_t 0-35 (rows x cols of the C/D tile, i.e. cuBLAS's m x n); the later ids (36-645 in
# 13.10) are read from the installed header when it is there.
TILE_NAMES = {0: "UNDEFINED", 1: "8x8", 2: "8x16", 3: "16x8", 4: "8x32", 5: "16x16", 6: "32x8", 7: "8x64",
              8: "16x32", 9: "32x16", 10: "64x8", 11: "32x32", 12: "32x64", 13: "64x32", 14: "32x128", 15: "64x64",
              16: "128x32", 17: "64x128", 18: "128x64", 19: "64x256", 20: "128x128", 21: "256x64", 22: "64x512",
              23: "128x256", 24: "256x128", 25: "512x64", 26: "64x96", 27: "96x64", 28: "96x128", 29: "128x160",
              30: "160x128", 31: "192x128", 32: "128x192", 33: "128x96", 34: "32x256", 35: "256x32"}
STAGE_NAMES = {0: "UNDEFINED", 1: "16x1", 2: "16x2", 3: "16x3", 4: "16x4", 5: "16x5", 6: "16x6", 7: "32x1",
               8: "32x2", 9: "32x3", 10: "32x4", 11: "32x5", 12: "32x6", 13: "64x1", 14: "64x2", 15: "64x3",
               16: "64x4", 17: "64x5", 18: "64x6", 19: "128x1", 20: "128x2", 21: "128x3", 22: "128x4",
               23: "128x5", 24: "128x6", 25: "32x10", 26: "8x4", 27: "16x10", 28: "8x5", 31: "8x3", 32: "8xAUTO",
               33: "16xAUTO", 34: "32xAUTO", 35: "64xAUTO", 36: "128xAUTO", 37: "256xAUTO", 38: "768xAUTO"}
CLUSTER_NAMES = {0: "AUTO", 2: "1x1x1", 3: "2x1x1", 4: "4x1x1", 5: "1x2x1", 6: "2x2x1", 7: "4x2x1", 8: "1x4x1",
                 9: "2x4x1", 10: "4x4x1", 11: "8x1x1", 12: "1x8x1", 13: "8x2x1", 14: "2x8x1", 15: "16x1x1",
                 16: "1x16x1"}
REDUCTION_NAMES = {0: "NONE", 1: "INPLACE", 2: "COMPUTE_TYPE", 4: "OUTPUT_TYPE"}
# cuBLAS API reference, cublasSetWorkspace: 32 MiB is the workspace recommended for Hopper (4 MiB for
# the other architectures; the table PyTorch #120925 sized its cublasLt workspace from). CuPy sets no
# workspace of its own, so cuBLAS runs with its default; whether that default is the recommended size is
# not stated there, so each shape's first choice is also asked at 4 MiB and 0 (``first_by_workspace``).
WORKSPACE_HOPPER_BYTES = 32 << 20
WORKSPACE_ALT_BYTES = (4 << 20, 0)
N_REQUESTED = 8


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t: cublasLtMatmulAlgo_t {uint64_t data[8]}, size_t workspaceSize,
    cublasStatus_t state, float wavesCount, int reserved[4] (96 bytes)."""
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class LtError(RuntimeError):
    pass


def _header_enum(text: str, enum: str, prefix: str) -> dict[int, str]:
    body = re.search(r"typedef enum\s*\{(.*?)\}\s*" + enum + r"\s*;", re.sub(r"/\*.*?\*/", "", text, flags=re.S),
                     flags=re.S)
    if not body:
        return {}
    return {int(v, 0): k[len(prefix):] for k, v in re.findall(r"(" + prefix + r"\w+)\s*=\s*(0[xX][0-9a-fA-F]+|\d+)",
                                                            body.group(1))}


def check_header(path: str) -> dict:
    """Read the tile / stage / cluster enums from an installed cublasLt.h; stop if they contradict the tables."""
    text = open(path).read()
    found = {"header": path}
    for name, enum, prefix, table in [("tile", "cublasLtMatmulTile_t", "CUBLASLT_MATMUL_TILE_", TILE_NAMES),
                                      ("stages", "cublasLtMatmulStages_t", "CUBLASLT_MATMUL_STAGES_", STAGE_NAMES),
                                      ("cluster", "cublasLtClusterShape_t", "CUBLASLT_CLUSTER_SHAPE_", CLUSTER_NAMES)]:
        parsed = _header_enum(text, enum, prefix)
        # only ids both know: older headers lack the later ids, newer ones only add
        bad = {i: (n, parsed[i]) for i, n in table.items() if i in parsed and parsed[i] != n}
        if bad:
            raise LtError(f"{path}: {enum} differs from the probe's table: {bad}")
        table.update({i: n for i, n in parsed.items() if not n.endswith("END")})
        found[name] = len(parsed)
    for attr, value in [("CUBLASLT_ALGO_CONFIG_TILE_ID", 1), ("CUBLASLT_ALGO_CONFIG_SPLITK_NUM", 2),
                        ("CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID", 8), ("CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES", 1),
                        ("CUBLASLT_MATMUL_DESC_TRANSB", 4)]:
        m = re.search(attr + r"\s*=\s*(\d+)", text)
        if m and int(m.group(1)) != value:
            raise LtError(f"{path}: {attr} = {m.group(1)}, the probe uses {value}")
    return found


def candidate_libs() -> list[tuple[str, str]]:
    """(path or name, how found), best first: the copy this process already mapped (CuPy's cuBLAS loaded
    it), the pip wheels' directories (nvidia/cu13/lib for CUDA 13, nvidia/cublas/lib for 12), ctypes.util,
    then plain sonames."""
    out = []
    try:
        for line in open("/proc/self/maps"):
            p = line.split()[-1]
            if re.search(r"/libcublasLt\.so[.\d]*$", p) and p not in [q for q, _ in out]:
                out.append((p, "mapped in this process"))
    except OSError:
        pass
    try:
        import nvidia
        for root in list(nvidia.__path__):
            for sub in ("cu13/lib", "cublas/lib", "cu12/lib"):
                for p in sorted(glob.glob(os.path.join(root, sub, "libcublasLt.so*")), reverse=True):
                    out.append((p, f"nvidia package dir {sub}"))
    except ImportError:
        pass
    name = ctypes.util.find_library("cublasLt")
    if name:
        out.append((name, "ctypes.util.find_library"))
    out += [("libcublasLt.so.13", "soname"), ("libcublasLt.so.12", "soname")]
    return out


def header_for(lib_path: str) -> str | None:
    d = os.path.dirname(os.path.realpath(lib_path))
    for p in (os.path.join(d, "..", "include", "cublasLt.h"), "/usr/local/cuda/include/cublasLt.h"):
        if os.path.exists(p):
            return os.path.normpath(p)
    return None


class Lt:
    """The few cublasLt entry points the probe needs, each call's status checked and named."""

    def __init__(self, path: str | None = None):
        errors = []
        for p, how in ([(path, "given")] if path else candidate_libs()):
            try:
                self.lib = ctypes.CDLL(p)
                self.path, self.how = p, how
                break
            except OSError as e:
                errors.append(f"{p}: {e}")
        else:
            raise LtError("no libcublasLt could be loaded: " + "; ".join(errors))
        self.lib.cublasLtGetVersion.restype = ctypes.c_size_t
        self.version = int(self.lib.cublasLtGetVersion())
        self.lib.cublasLtGetStatusName.restype = ctypes.c_char_p
        self.lib.cublasLtMatrixLayoutCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                                        ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64]
        self.handle = None

    def call(self, name: str, *args) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise LtError(f"{name} returned {status} (CUBLAS_STATUS_{STATUS_NAMES.get(status, '?')})")

    def create(self) -> None:
        h = ctypes.c_void_p()
        self.call("cublasLtCreate", ctypes.byref(h))
        self.handle = h

    def set_attr(self, setter: str, obj, attr: int, value) -> None:
        self.call(setter, obj, ctypes.c_int(attr), ctypes.byref(value), ctypes.c_size_t(ctypes.sizeof(value)))

    def descriptors(self, m: int, n: int, k: int):
        """The GEMM ``cupy.matmul(a.T, b)`` hands cuBLAS, a.T of shape (m, k) from a C-contiguous (k, m) array,
        b C-contiguous (k, n), out C-contiguous (m, n). CuPy's dot (cupy/_core/_routines_linalg.pyx:
        dot -> tensordot_core -> tensordot_core_v11 -> cublasGemmEx) computes the column-major C^T = B^T A^T:
        cuBLAS m' = n, n' = m, k' = k; A' = b, which column-major is n x k with ld n, op N; B' = the (k, m)
        array, column-major m x k with ld m, op T (transb = 1 - 0 from _mat_to_cublas_contiguous); C' n x m,
        ld n. Hence the '_nt_' in the traced kernel names. Lt layouts describe the stored matrices."""
        desc, la, lb, lc = (ctypes.c_void_p() for _ in range(4))
        self.call("cublasLtMatmulDescCreate", ctypes.byref(desc), ctypes.c_int(COMPUTE_32F), ctypes.c_int(CUDA_R_32F))
        self.set_attr("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSA, ctypes.c_int32(OP_N))
        self.set_attr("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSB, ctypes.c_int32(OP_T))
        for lay, rows, cols, ld in ((la, n, k, n), (lb, m, k, m), (lc, n, m, n)):
            self.call("cublasLtMatrixLayoutCreate", ctypes.byref(lay), CUDA_R_32F, rows, cols, ld)
        return desc, la, lb, lc

    def destroy(self, desc, la, lb, lc) -> None:
        for lay in (la, lb, lc):
            self.call("cublasLtMatrixLayoutDestroy", lay)
        self.call("cublasLtMatmulDescDestroy", desc)

    def preference(self, workspace_bytes: int):
        pref = ctypes.c_void_p()
        self.call("cublasLtMatmulPreferenceCreate", ctypes.byref(pref))
        self.set_attr("cublasLtMatmulPreferenceSetAttribute", pref, PREF_MAX_WORKSPACE_BYTES,
                      ctypes.c_uint64(workspace_bytes))
        return pref

    def heuristic(self, descs, pref, n_requested: int = N_REQUESTED) -> list[HeuristicResult]:
        desc, la, lb, lc = descs
        results = (HeuristicResult * n_requested)()
        count = ctypes.c_int(0)
        self.call("cublasLtMatmulAlgoGetHeuristic", self.handle, desc, la, lb, lc, lc, pref,
                  ctypes.c_int(n_requested), results, ctypes.byref(count))
        if not 0 <= count.value <= n_requested:
            raise LtError(f"cublasLtMatmulAlgoGetHeuristic returned count {count.value} of {n_requested}")
        return list(results[:count.value])

    def config(self, res: HeuristicResult) -> dict:
        out = {}
        for key, attr, ctype in CONFIG_ATTRS:
            v, written = ctype(0), ctypes.c_size_t(0)
            self.call("cublasLtMatmulAlgoConfigGetAttribute", ctypes.byref(res.algo), ctypes.c_int(attr),
                      ctypes.byref(v), ctypes.c_size_t(ctypes.sizeof(v)), ctypes.byref(written))
            if written.value != ctypes.sizeof(v):
                raise LtError(f"cublasLtMatmulAlgoConfigGetAttribute({key}) wrote {written.value} bytes, "
                              f"expected {ctypes.sizeof(v)}")
            out[key] = int(v.value)
        out["tile"] = TILE_NAMES.get(out["tile_id"], f"id{out['tile_id']}")
        out["stages"] = STAGE_NAMES.get(out["stages_id"], f"id{out['stages_id']}")
        out["cluster"] = CLUSTER_NAMES.get(out["cluster_id"], f"id{out['cluster_id']}")
        out["reduction_name"] = REDUCTION_NAMES.get(out["reduction"], f"mask{out['reduction']}")
        out["workspace_bytes"] = int(res.workspace_size)
        out["waves"] = round(float(res.waves), 4)
        out["state"] = STATUS_NAMES.get(res.state, str(res.state))
        return out


def probe_shape(lt: Lt, prefs: dict, m: int, n: int, k: int) -> dict:
    descs = lt.descriptors(m, n, k)
    try:
        ranked = [lt.config(r) for r in lt.heuristic(descs, prefs[WORKSPACE_HOPPER_BYTES])]
        alt = {}
        for ws in WORKSPACE_ALT_BYTES:
            first = lt.heuristic(descs, prefs[ws], 1)
            alt[str(ws)] = {key: c[key] for c in [lt.config(r) for r in first[:1]]
                            for key in ("algo_id", "tile", "splitk", "reduction_name", "stages", "workspace_bytes")}
    finally:
        lt.destroy(*descs)
    return {"m": m, "n": n, "k": k, "results": ranked, "first_by_workspace": alt}


# ---- optional part: what cuBLAS's gemm (cupy.matmul) actually ran, from Lt's trace log, and timings ----
LOG_ALGO = re.compile(r"algo=\[algoId=(\d+) tile=MATMUL_TILE_(\w+?)[\s\]]")
LOG_FIELDS = {"splitk": re.compile(r"numSplitsK=(\d+)"), "reduction": re.compile(r"reductionScheme=(\w+)"),
              "stages": re.compile(r"stages=MATMUL_STAGES_(\w+)"),
              "workspace_bytes": re.compile(r"workSpaceSizeInBytes=(\d+)"),
              "swizzle": re.compile(r"swizzle=(\d+)"), "custom_option": re.compile(r"customOption=(\d+)")}


def parse_log_line(line: str) -> dict | None:
    """One Lt trace line of a matmul call ('[cublasLtSSSMatmul] ... algo=[algoId=21 tile=MATMUL_TILE_128x128
    ...]') to its fields; None for lines without an algo."""
    m = LOG_ALGO.search(line)
    if not m:
        return None
    out = {"algo_id": int(m.group(1)), "tile": m.group(2)}
    for key, rx in LOG_FIELDS.items():
        f = rx.search(line)
        if f:
            out[key] = int(f.group(1)) if f.group(1).isdigit() else f.group(1)
    return out


def executed_by_cublas(lt: Lt, shapes) -> dict:
    """cupy.matmul(a.T, b) once per shape with Lt's logger on (legacy cuBLAS gemm runs through
    cublasLtSSSMatmul of this same library and logs the algo it executes)."""
    import cupy as cp
    lines: list[str] = []
    cb_type = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p)
    cb = cb_type(lambda level, fn, msg: lines.append(f"[{(fn or b'').decode(errors='replace')}] "
                                                     f"{(msg or b'').decode(errors='replace')}"))
    lt.call("cublasLtLoggerOpenFile", b"/dev/null")  # the callback still gets every line; stdout stays readable
    lt.call("cublasLtLoggerSetCallback", cb)
    out = {}
    try:
        lt.call("cublasLtLoggerSetLevel", ctypes.c_int(5))
        for m, n, k in shapes:
            at, b = cp.zeros((k, m), dtype=cp.float32), cp.zeros((k, n), dtype=cp.float32)
            del lines[:]
            cp.matmul(at.T, b)
            cp.cuda.Device().synchronize()
            parsed = [p for p in map(parse_log_line, lines) if p]
            line = next((ln for ln in reversed(lines) if "algo=" in ln), "")
            # self-check: the logged call is this GEMM (A' = b stored n x k, see Lt.descriptors)
            out[f"{m}x{n}x{k}"] = {"executed": parsed[-1] if parsed else None, "n_log_lines": len(lines),
                                   "layout_seen": f"rows={n} cols={k} ld={n}" in line, "line": line[:600] or None}
    finally:
        lt.call("cublasLtLoggerSetLevel", ctypes.c_int(0))
        lt.call("cublasLtLoggerSetCallback", ctypes.cast(None, cb_type))
    return out


def _median_us(fn, reps: int) -> float:
    import cupy as cp
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    return round(sorted(ts)[len(ts) // 2], 2)


def time_one(lt: Lt, ws, m: int, n: int, k: int, reps: int) -> dict:
    """CUDA-event time per call of cupy.matmul(a.T, b) and of cublasLtMatmul with the heuristic's first algo
    on the same arrays (same 32 MiB workspace cap), median of ``reps`` after 3 warm-up calls each."""
    import cupy as cp
    at, b = cp.random.rand(k, m, dtype=cp.float32), cp.random.rand(k, n, dtype=cp.float32)
    c = cp.empty((m, n), dtype=cp.float32)
    stream = ctypes.c_void_p(cp.cuda.get_current_stream().ptr)
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    descs = lt.descriptors(m, n, k)
    try:
        first = lt.heuristic(descs, lt_prefs(lt)[WORKSPACE_HOPPER_BYTES], 1)[0]

        def lt_call():
            # A' = b (n x k, ld n), B' = at (m x k, ld m, op T), C' = D' = c (n x m, ld n): see descriptors().
            lt.call("cublasLtMatmul", lt.handle, descs[0], ctypes.byref(alpha), ctypes.c_void_p(b.data.ptr),
                    descs[1], ctypes.c_void_p(at.data.ptr), descs[2], ctypes.byref(beta),
                    ctypes.c_void_p(c.data.ptr), descs[3], ctypes.c_void_p(c.data.ptr), descs[3],
                    ctypes.byref(first.algo), ctypes.c_void_p(ws.data.ptr), ctypes.c_size_t(ws.nbytes), stream)

        ref = cp.matmul(at.T, b)
        lt_call()
        cp.cuda.Device().synchronize()
        # self-check of the layouts: Lt's D must equal CuPy's product (fp32, different summation orders)
        diff = float(cp.abs(c - ref).max()) / max(float(cp.abs(ref).max()), 1e-30)
        row = {"lt_first": {key: v for key, v in lt.config(first).items() if key in ("algo_id", "tile", "splitk")},
               "max_rel_diff": diff,
               "cupy_us": _median_us(lambda: cp.matmul(at.T, b, out=c), reps),
               "lt_first_us": _median_us(lt_call, reps)}
    finally:
        lt.destroy(*descs)
    row["cupy_over_lt"] = round(row["cupy_us"] / row["lt_first_us"], 3)
    return row


def time_shapes(lt: Lt, shapes, reps: int = 20) -> dict:
    import cupy as cp
    ws = cp.empty(WORKSPACE_HOPPER_BYTES, dtype=cp.uint8)
    out = {}
    for m, n, k in shapes:
        row = out[f"{m}x{n}x{k}"] = time_one(lt, ws, m, n, k, reps)
        print(f"  time {m}x{n}x{k}: cupy {row['cupy_us']} us, Lt first ({row['lt_first']['tile']} split "
              f"{row['lt_first']['splitk']}) {row['lt_first_us']} us, cupy/Lt {row['cupy_over_lt']}, "
              f"max rel diff {row['max_rel_diff']:.1e}")
    return out


_PREFS: dict = {}


def lt_prefs(lt: Lt) -> dict:
    if not _PREFS:
        for ws in (WORKSPACE_HOPPER_BYTES, *WORKSPACE_ALT_BYTES):
            _PREFS[ws] = lt.preference(ws)
    return _PREFS


def timing_subset(shapes, count: int, prefer=()):
    """``count`` shapes: those of ``prefer`` in the list first (probes.SPLITK_SHAPES, the split-1 misses of
    issue 14), the rest evenly spread over the list by output size (smallest to largest m*n)."""
    if count <= 0:
        return []
    have = set(shapes)
    picked = [tuple(s) for s in prefer if tuple(s) in have][:count]
    rest = sorted((s for s in shapes if s not in picked), key=lambda s: (s[0] * s[1], s[2]))
    left = count - len(picked)
    if left > 0 and rest:
        idx = sorted({round(i * (len(rest) - 1) / max(1, left - 1)) for i in range(left)})
        picked += [rest[i] for i in idx]
    return picked


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: probes.py cublaslt-heuristics SHAPES.json OUT.json [--time N] [--no-log]")
    shapes_path, out_path = argv[0], argv[1]
    n_time = int(argv[argv.index("--time") + 1]) if "--time" in argv else 12
    t0 = time.perf_counter()
    shapes = [tuple(int(x) for x in s) for s in json.load(open(shapes_path))]
    try:  # let CuPy's cuBLAS load its libcublasLt first, so the probe takes the very copy it uses
        import cupy as cp
        cp.matmul(cp.ones((2, 2), cp.float32).T, cp.ones((2, 2), cp.float32))
        cp.cuda.Device().synchronize()
        device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception as e:  # noqa: BLE001 - the heuristic part needs no CuPy
        cp, device = None, f"no cupy ({e})"
    lt = Lt()
    print(f"loaded {lt.path} ({lt.how}); cublasLtGetVersion() = {lt.version}; device {device}")
    header = header_for(lt.path)
    checked = check_header(header) if header else {"header": None}
    print(f"enum tables checked against {checked}")
    lt.create()
    prefs = lt_prefs(lt)
    out = {"library": lt.path, "found_by": lt.how, "version": lt.version, "device": device, "header": checked,
           "workspace_bytes": WORKSPACE_HOPPER_BYTES, "requested": N_REQUESTED, "shapes": {}}
    failed = []
    for m, n, k in shapes:
        try:
            out["shapes"][f"{m}x{n}x{k}"] = probe_shape(lt, prefs, m, n, k)
        except LtError as e:
            failed.append(f"{m}x{n}x{k}: {e}")
    out["failed"] = failed
    out["heuristic_s"] = round(time.perf_counter() - t0, 2)
    json.dump(out, open(out_path, "w"), indent=1)
    firsts = [v["results"][0] for v in out["shapes"].values() if v["results"]]
    print(f"{len(out['shapes'])} of {len(shapes)} shapes asked in {out['heuristic_s']} s ({len(failed)} failed, "
          f"{len(out['shapes']) - len(firsts)} with no result); first choice split > 1 for "
          f"{sum(f['splitk'] > 1 for f in firsts)}; tiles {sorted({f['tile'] for f in firsts})}")
    for f in failed[:10]:
        print("  failed", f)
    from probes import SPLITK_SHAPES
    for m, n, k in SPLITK_SHAPES:  # the issue-14 misses, readable in the output tail
        r = (out["shapes"].get(f"{m}x{n}x{k}") or {}).get("results")
        if r:
            print(f"  {m}x{n}x{k}: " + "; ".join(f"{x['tile']} split {x['splitk']} {x['reduction_name']} "
                                                  f"st {x['stages']} w {x['waves']}" for x in r[:3]))
    if cp is None:
        return
    if "--no-log" not in argv:
        t1 = time.perf_counter()
        try:
            out["executed"] = executed_by_cublas(lt, shapes)
            got = [v for v in out["executed"].values() if v["executed"]]
            same = sum(1 for key, v in out["executed"].items() if v["executed"] and out["shapes"].get(key, {}).get(
                "results") and v["executed"]["algo_id"] == out["shapes"][key]["results"][0]["algo_id"]
                and v["executed"]["tile"] == out["shapes"][key]["results"][0]["tile"])
            print(f"cuBLAS's executed algo logged for {len(got)} of {len(shapes)} shapes in "
                  f"{time.perf_counter() - t1:.1f} s; same algo id and tile as Lt's first for {same}")
        except Exception as e:  # noqa: BLE001 - optional part: the heuristic result above is kept
            out["executed_error"] = repr(e)
            print("executed-algo log failed:", repr(e))
        json.dump(out, open(out_path, "w"), indent=1)
    subset = [s for s in timing_subset(shapes, n_time, SPLITK_SHAPES[:n_time // 2])
              if out["shapes"].get(f"{s[0]}x{s[1]}x{s[2]}", {}).get("results")]
    if subset:
        try:
            out["timing"] = time_shapes(lt, subset)
        except Exception as e:  # noqa: BLE001 - optional part
            out["timing_error"] = repr(e)
            print("timing failed:", repr(e))
    out["total_s"] = round(time.perf_counter() - t0, 2)
    json.dump(out, open(out_path, "w"), indent=1)
    print(f"wrote {out_path} in {out['total_s']} s")


if __name__ == "__main__":
    main(sys.argv[1:])
