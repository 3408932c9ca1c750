"""Which kernel cuBLAS will run for an fp32 ``cupy.matmul(a.T, b)``: cuBLASLt's own heuristic
(``cublasLtMatmulAlgoGetHeuristic``), asked through ctypes, or an explicit oracle.

Why: the split-K model's worst cases were fp32 problems whose split 1 (cuBLAS's own GEMM) ran
1.3-1.9x the model's time because cuBLAS took a tile other than the fastest one the model knows,
and the tile could not be learned from the shape (calib/heuristics/splitk/lt_kernel.py). On an H200
(2026-12-02, bench/results/2026-12-02-h200-cublaslt/: cuBLAS 13.1, CuPy 14.2) Lt's first result
was the algo, tile and split-K that cuBLAS's gemm then executed (its trace log) for 455 of the 455
fp32 GEMMs of recordings A-L, asked in 2.4 ms a shape. So on the GPU the split-K model asks.

Two sources, first that answers wins:

- an oracle set with :func:`set_oracle` / :func:`use_oracle` (a mapping ``(m, n, k, dtype) ->``
  :class:`Choice`, e.g. :func:`load_probe` of a ``bench/probes.py cublaslt-heuristics`` JSON file,
  and for split-K's batched GEMMs :func:`batched_key` -> Choice, :func:`load_probe` of a
  ``bench/probes.py cublaslt-batched`` file): only it is asked while it is set, a shape it lacks
  has no choice;
- the live query, only where CuPy is already imported in this process (the GEMM it describes is
  CuPy's), the current device is the GPU the caller's profile is of, and ``CUPY_TF32`` is unset
  (with it CuPy asks for another compute type). Anything else, or any failing call, gives None
  with one warning naming why; nothing here raises into a heuristic.

Never imported by ``import calib``: the split-K model imports it on its first fp32 split-1
or batched prediction. The ctypes core (:class:`Lt`) is shared with bench/cublaslt_probe.py.

Enum values and struct layouts are from cublasLt.h of cuBLAS 13.10.0.20 (pip wheel nvidia-cublas
13.10.0.20, nvidia/cu13/include/cublasLt.h) and agree with cuBLAS 12.6.4 (CUDA 12.6.3
include/cublasLt.h): 13.10 only adds values. Status / op / compute values from cublas_api.h,
CUDA_R_32F = 0 from library_types.h.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import glob
import os
import re
import sys
import warnings
from pathlib import Path

from ..errors import CalibError
from .registry import HeuristicError

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
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6  # int32_t, int64_t (cublasLtMatrixLayoutAttribute_t)
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
# cuBLAS API reference, cublasSetWorkspace: 32 MiB is the workspace recommended for Hopper. With it,
# Lt's first result was what cuBLAS's gemm executed for 455/455 shapes on the H200 (above).
WORKSPACE_HOPPER_BYTES = 32 << 20
N_REQUESTED = 8


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t: cublasLtMatmulAlgo_t {uint64_t data[8]}, size_t workspaceSize,
    cublasStatus_t state, float wavesCount, int reserved[4] (96 bytes)."""
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class LtError(CalibError, RuntimeError):
    """A cuBLASLt call failed or answered nonsense; ``choice`` turns it into None and one warning."""


def candidate_libs() -> list[tuple[str, str]]:
    """(path or name, how found), best first: the copy this process already mapped (CuPy's cuBLAS loaded
    it), the pip wheels' directories (nvidia/cu13/lib for CUDA 13, nvidia/cublas/lib for 12), ctypes.util,
    then plain sonames."""
    out = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
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


class Lt:
    """The few cublasLt entry points the probe and the live query need, each call's status checked and named."""

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

    def batched_descriptors(self, m: int, n: int, k_slice: int, batch: int):
        """The strided-batched GEMM of split-K's split > 1 path (splitk.GpuCase.run): ``cupy.matmul`` of
        the (batch, m, k_slice) slices of At, which CuPy first makes C-contiguous, by B's (batch, k_slice,
        n) ones. CuPy's matmul (cupy/_core/_routines_linalg.pyx: matmul, "(A B)^T = B^T A^T") calls
        gemmStridedBatchedEx with op N, N, m' = n, n' = m, k' = k_slice: A' = the B slices, column-major
        n x k_slice, ld n, stride n * k_slice; B' = the A slices, column-major k_slice x m, ld k_slice,
        stride m * k_slice; C' n x m, ld n, stride n * m; ``batch`` products. Lt layouts describe the
        stored matrices, each with its batch count and stride."""
        desc, la, lb, lc = (ctypes.c_void_p() for _ in range(4))
        self.call("cublasLtMatmulDescCreate", ctypes.byref(desc), ctypes.c_int(COMPUTE_32F), ctypes.c_int(CUDA_R_32F))
        self.set_attr("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSA, ctypes.c_int32(OP_N))
        self.set_attr("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSB, ctypes.c_int32(OP_N))
        for lay, rows, cols, ld in ((la, n, k_slice, n), (lb, k_slice, m, k_slice), (lc, n, m, n)):
            self.call("cublasLtMatrixLayoutCreate", ctypes.byref(lay), CUDA_R_32F, rows, cols, ld)
            self.set_attr("cublasLtMatrixLayoutSetAttribute", lay, LAYOUT_BATCH_COUNT, ctypes.c_int32(batch))
            self.set_attr("cublasLtMatrixLayoutSetAttribute", lay, LAYOUT_STRIDED_BATCH_OFFSET,
                          ctypes.c_int64(rows * cols))
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


# ----------------------------------------------------------------------------------------------
# the choice


@dataclasses.dataclass(frozen=True)
class Choice:
    """Lt's first result for one GEMM, in C's orientation: ``tile_m`` rows of C (M) by ``tile_n``
    columns (N). Lt names the tile m' x n' of the column-major C^T it is handed (m' = N, n' = M:
    :meth:`Lt.descriptors`), so its "64x128" is 64 of N by 128 of M. ``source`` says where it came
    from (the probe file, or "cublasLtMatmulAlgoGetHeuristic <library> <version>")."""
    algo_id: int
    tile_m: int
    tile_n: int
    split: int
    reduction: str
    source: str
    waves: float = 0.0  # Lt's wavesCount: the CTAs over the SMs' resident slots (0: not given)
    device: str | None = None  # the GPU it was asked on (None: any)
    custom_option: int = 0  # CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION (for algo 55, how its split reduces)


def choice_from_result(r: dict, source: str, device: str | None = None, untiled_ok: bool = False) -> Choice:
    """A :class:`Choice` from one result of :meth:`Lt.config` (or a probe JSON file's), checked.
    ``untiled_ok``: tile "UNDEFINED" is allowed (tile_m = tile_n = 0), as Lt answers for the batched
    GEMMs that cuBLAS runs as its small-N kernel (algo 11, gemmSN_NN_kernel in the traces)."""
    tile = r.get("tile")
    if tile == "UNDEFINED" and untiled_ok:  # a kernel Lt names no tile for (algo 11: cuBLAS's gemmSN)
        tile = "0x0"
    elif not isinstance(tile, str) or not re.fullmatch(r"\d+x\d+", tile):
        raise ValueError(f"tile must be like '64x128', not {tile!r}")
    along_n, along_m = (int(v) for v in tile.split("x"))
    fields = {name: r.get(name) for name in ("algo_id", "splitk")}
    for name, v in fields.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < (1 if name == "splitk" else 0):
            raise ValueError(f"{name} must be a non-negative integer (split >= 1), not {v!r}")
    if min(along_n, along_m) < 1 and tile != "0x0":
        raise ValueError(f"tile {tile!r} has an empty side")
    red = r.get("reduction_name", "NONE")
    waves = r.get("waves", 0.0)
    if not isinstance(waves, (int, float)) or isinstance(waves, bool) or not 0 <= waves < 1e9:
        raise ValueError(f"waves must be a non-negative number, not {waves!r}")
    custom = r.get("custom_option", 0)
    if not isinstance(custom, int) or isinstance(custom, bool) or custom < 0:
        raise ValueError(f"custom_option must be a non-negative integer, not {custom!r}")
    return Choice(fields["algo_id"], along_m, along_n, fields["splitk"], str(red), source, float(waves), device,
                  custom)


def load_probe(path) -> dict:
    """(m, n, k, "float32") -> :class:`Choice` from a ``bench/probes.py cublaslt-heuristics`` JSON
    file (its "shapes": each shape's ranked "results", the first is Lt's choice), plain or, where the
    path ends in ``.gz``, gzip-compressed (registry.read_text decompresses it, bounded). HeuristicError
    naming the file and the entry if it is not such a file (a corrupt gzip file included). The probe
    writes strict JSON (every shipped probe file parses so), so NaN, Infinity, 1e400 and a key written
    twice are refused here: an infinite m, n or k had ended the load in an OverflowError, and an
    integer of 5000 digits anywhere in a ValueError that is no HeuristicError."""
    from .. import strict_json
    from .registry import read_text

    where = f"cuBLASLt probe file {path}"
    try:
        doc = strict_json.loads(read_text(Path(path), "cuBLASLt probe file", HeuristicError),
                                object_pairs_hook=strict_json.unique_keys)
    except HeuristicError:  # read_text's: missing, not a file, not gzip, not UTF-8
        raise
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, NaN, 1e400, a key twice, 5000 digits
        raise HeuristicError(f"{where} is not JSON ({str(exc).split(';')[0][:200]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("shapes"), dict):
        raise HeuristicError(f"{where}: expected an object with 'shapes' (bench/probes.py cublaslt-heuristics)")
    batched = doc.get("format") == BATCHED_PROBE_FORMAT
    if doc.get("format") != PROBE_FORMAT and not batched:
        raise HeuristicError(f"{where}: format {doc.get('format')!r}, expected {PROBE_FORMAT!r} "
                             f"or {BATCHED_PROBE_FORMAT!r}")
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= PROBE_VERSION:
        raise HeuristicError(f"{where}: format version {version!r}; this calib reads 1 to {PROBE_VERSION}")
    device = doc.get("device")
    if not isinstance(device, str) or not device:
        raise HeuristicError(f"{where}: 'device' (the GPU it was asked on) must be a non-empty string")
    source = f"{Path(path).name} ({device}, cuBLASLt {doc.get('version', '?')})"
    out = {}
    for key, entry in doc["shapes"].items():
        try:
            mnk = tuple(int(entry[x]) for x in ("m", "n", "k"))
            split = int(entry["split"]) if batched else 1
            if f"{mnk[0]}x{mnk[1]}x{mnk[2]}" + (f"/{split}" if batched else "") != key:
                raise ValueError(f"m, n, k{', split' if batched else ''} {mnk} do not match the key")
            if batched and (split < 2 or mnk[2] % split):
                raise ValueError(f"split {split} must be at least 2 and divide k")
            if "error" in entry and batched:  # the probe recorded Lt's failure: no choice
                continue
            results = entry["results"]
            if not isinstance(results, list):
                raise ValueError("'results' must be a list")
            if results and not isinstance(results[0], dict):  # r.get below: an AttributeError
                raise ValueError(f"'results' must hold objects, not {type(results[0]).__name__}")
            if results:  # no result: Lt offered nothing, the model's own estimate stands
                c = choice_from_result(results[0], source, device, untiled_ok=batched)
                out[batched_key(mnk[0], mnk[1], mnk[2] // split, split) if batched else (*mnk, "float32")] = c
        except (KeyError, TypeError, ValueError) as exc:
            raise HeuristicError(f"{where}: shape {key!r}: {exc!r}"[:300]) from None
    return out


def batched_key(m: int, n: int, k_slice: int, batch: int, dtype: str = "float32") -> tuple:
    """The oracle's key of split-K's strided-batched GEMM (``batch`` products of (m, k_slice) by
    (k_slice, n)): five fields, so that one mapping holds split-1 choices (m, n, k, dtype) and these."""
    return ("batched", m, n, k_slice, batch, dtype)


# The probe file's format (bench/probes.py cublaslt-heuristics writes it): version 1 is the H200 probes
# of 2026-12-02, stamped after they were written (their content is what the probe wrote).
PROBE_FORMAT = "calib.cublaslt-probe"
PROBE_VERSION = 1
# bench/probes.py cublaslt-batched: keys "MxNxK/split", each entry with its split (version 1: the
# H200 probe of 2026-12-02, bench/results/2026-12-02-h200-splitk-batched/).
BATCHED_PROBE_FORMAT = "calib.cublaslt-batched-probe"

_state: dict = {"oracle": None, "cache": {}, "warned": set(), "lt": None}


def set_oracle(mapping) -> None:
    """Use ``mapping`` ((m, n, k, dtype) -> :class:`Choice`; a str or Path is a probe file, read
    with :func:`load_probe`) instead of the live query; None goes back to the live query."""
    if isinstance(mapping, (str, Path)):
        mapping = load_probe(mapping)
    _state["oracle"] = None if mapping is None else dict(mapping)


@contextlib.contextmanager
def use_oracle(mapping):
    """:func:`set_oracle` for the duration of a ``with`` block."""
    before = _state["oracle"]
    set_oracle(mapping)
    try:
        yield
    finally:
        _state["oracle"] = before


def _warn(why: str) -> None:
    if why not in _state["warned"]:
        _state["warned"].add(why)
        warnings.warn(f"cuBLASLt choice unavailable, the split-K model's own tile estimate is used: {why}",
                      RuntimeWarning, stacklevel=3)


def _live_device() -> str | None:
    """The current device's name, where CuPy is already imported (else None: no GPU in use here)."""
    cp = sys.modules.get("cupy")
    if cp is None:
        return None
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def _lt() -> Lt:
    """The process's Lt handle, made once; a failure to make it is kept (and raised again) rather than
    retried for every shape."""
    if isinstance(_state["lt"], Exception):
        raise _state["lt"]
    if _state["lt"] is None:
        with contextlib.suppress(Exception):  # best effort: without it Lt() searches the usual places
            # CuPy's cuBLAS handle maps its libcublasLt: Lt() then takes that very copy (candidate_libs)
            sys.modules["cupy"].cuda.device.get_cublas_handle()
        try:
            lt = Lt()
            lt.create()
            lt.pref = lt.preference(WORKSPACE_HOPPER_BYTES)
        except Exception as exc:  # noqa: BLE001 - kept, re-raised to the caller's one handler
            _state["lt"] = exc
            raise
        _state["lt"] = lt
    return _state["lt"]


def _ask(m: int, n: int, k: int, batch: int = 1) -> Choice | None:
    """Lt's first result, live: split 1's GEMM (``batch`` 1) or split-K's strided-batched one of
    ``batch`` products of K ``k`` (:meth:`Lt.batched_descriptors`)."""
    lt = _lt()
    descs = lt.descriptors(m, n, k) if batch == 1 else lt.batched_descriptors(m, n, k, batch)
    try:
        results = lt.heuristic(descs, lt.pref, 1)
        first = lt.config(results[0]) if results else None
    finally:
        lt.destroy(*descs)
    source = f"cublasLtMatmulAlgoGetHeuristic {lt.path} {lt.version}"
    return None if first is None else choice_from_result(first, source, _live_device(), untiled_ok=batch > 1)


def choice(m: int, n: int, k: int, dtype: str, device: str | None) -> Choice | None:
    """The kernel cuBLAS runs for ``cupy.matmul(a.T, b)`` of (m, k).T-stored by (k, n) fp32 operands
    on a GPU named ``device`` (the caller's profile's): the oracle's, if one is set; else Lt's first
    result asked live (cached per shape), if CuPy runs on such a GPU here; else None. Never raises."""
    return _lookup((m, n, k, dtype), dtype, device, lambda: _ask(m, n, k))


def batched_choice(m: int, n: int, k_slice: int, batch: int, dtype: str, device: str | None) -> Choice | None:
    """The kernel cuBLAS runs for split-K's strided-batched GEMM (``batch`` > 1 products of (m, k_slice)
    by (k_slice, n), fp32 operands as CuPy 14.2's matmul hands them over: :meth:`Lt.batched_descriptors`).
    As :func:`choice`: the oracle's (key :func:`batched_key`; a ``bench/probes.py cublaslt-batched`` file
    read with :func:`load_probe`), else Lt asked live under the same conditions, else None. Never raises."""
    return _lookup(batched_key(m, n, k_slice, batch, dtype), dtype, device, lambda: _ask(m, n, k_slice, batch))


def _lookup(key: tuple, dtype: str, device: str | None, ask) -> Choice | None:
    if _state["oracle"] is not None:
        c = _state["oracle"].get(key)
        return c if c is not None and c.device in (None, device) else None
    if dtype != "float32":
        return None
    key = (*key, device)
    if key in _state["cache"]:
        return _state["cache"][key]
    try:
        live = _live_device()
        if live is None:
            _warn("CuPy is not in use in this process (no GPU)")
            return None
        if live != device:
            _warn(f"the GPU here ({live}) is not the profile's ({device})")
            return None
        if os.environ.get("CUPY_TF32", "0") != "0":
            _warn("CUPY_TF32 is set: CuPy asks cuBLAS for another compute type")
            return None
        got = ask()
    except Exception as exc:  # noqa: BLE001 - a failing library call must not fail a heuristic
        _warn(f"{type(exc).__name__}: {exc}"[:300])
        got = None
    _state["cache"][key] = got
    return got


# ----------------------------------------------------------------------------------------------
# the live answers, recorded with an evaluation and replayed from it

ASKED_MAX = 100_000  # an evaluation asks at most a few thousand; a longer list is not one


def asked() -> list[dict]:
    """Every answer Lt gave live in this process, as JSON rows ``{"key": [...], "device": ...,
    "choice": {...} or None}`` (key: ``[m, n, k, dtype]`` for split 1, ``["batched", m, n, k_slice,
    batch, dtype]`` for split-K's GEMM). Why: the split-K predictions on a GPU read these answers, so
    a recorded evaluation that carries them replays to the predictions it reported, on a machine
    without the GPU (before 2026-12-04 a replay fell back to the plain model for every shape whose
    fp32 time takes Lt's kernel, and fitting on those rows fitted another model than the one that ran)."""
    rows = []
    for key, c in _state["cache"].items():
        *k, device = key
        rows.append({"key": list(k), "device": device, "choice": None if c is None else {
            "algo_id": c.algo_id, "tile": "UNDEFINED" if c.tile_m == 0 else f"{c.tile_n}x{c.tile_m}",
            "splitk": c.split, "reduction_name": c.reduction, "waves": c.waves, "custom_option": c.custom_option}})
    return sorted(rows, key=lambda r: [str(x) for x in r["key"]])


def oracle_from_asked(rows, where: str) -> dict:
    """The oracle (:func:`set_oracle`'s mapping) of the rows :func:`asked` wrote, checked row by row:
    HeuristicError naming ``where`` and the row if one is not such a row. A row whose choice is null
    (Lt offered nothing) is left out: the oracle's None, as live."""
    if not isinstance(rows, list) or len(rows) > ASKED_MAX:
        raise HeuristicError(f"{where}: 'cublaslt' must be a list of at most {ASKED_MAX} recorded answers")
    out = {}
    for i, r in enumerate(rows):
        try:
            if not isinstance(r, dict) or not isinstance(r.get("key"), list):
                raise ValueError("a row is an object with a 'key' list")
            key = r["key"]
            batched = key[:1] == ["batched"]
            ints = key[1:5] if batched else key[:3]
            if len(key) != (6 if batched else 4) or not all(
                    isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 31 for v in ints):
                raise ValueError(f"key must be [m, n, k, dtype] or ['batched', m, n, k_slice, batch, dtype] "
                                 f"of positive integers, not {key!r}")
            if key[-1] not in ("float32", "float16"):
                raise ValueError(f"dtype {key[-1]!r} is not float32 or float16")
            device = r.get("device")
            if device is not None and (not isinstance(device, str) or not device):
                raise ValueError(f"device must be a GPU's name or null, not {device!r}")
            if r.get("choice") is None:
                continue
            if not isinstance(r["choice"], dict):
                raise ValueError("choice must be an object or null")
            out[tuple(key)] = choice_from_result(r["choice"], f"{where} (recorded live)", device,
                                                 untiled_ok=batched)
        except (TypeError, ValueError) as exc:
            raise HeuristicError(f"{where}: cublaslt row {i}: {exc}"[:300]) from None
    return out
