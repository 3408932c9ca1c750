"""Ask cuBLASLt which kernel it would run for each fp32 GEMM (issue 14): ``cublasLtMatmulAlgoGetHeuristic``.

    python3 bench/probes.py cublaslt-heuristics SHAPES.json OUT.json [--time N] [--no-log]

Why: for fp32 ``cupy.matmul`` runs 1.3-1.9x slower than the split-K model predicts where cuBLAS picks a
tile other than the fastest one the model knows; given the tile it ran the model's constants predict the
traced time to 0.96 (H200, 2026-12-02, bench/results/2026-12-02-h200-splitk-kernels/kernels.json.gz). The tile
could not be learned from the shape, so this asks Lt's heuristic, per shape, for its ranked algos (tile,
split-K, reduction, stages, swizzle, custom option, cluster, workspace, waves), and, separately, records
what cuBLAS's gemm actually ran (Lt's own trace log of ``cupy.matmul``) and times a few shapes both ways.

Enum values and struct layouts are from cublasLt.h of cuBLAS 13.10.0.20 (pip wheel nvidia-cublas
13.10.0.20, nvidia/cu13/include/cublasLt.h) and agree with cuBLAS 12.6.4 (CUDA 12.6.3 include/cublasLt.h,
github zspace/system.cuda-12.6): 13.10 only adds values. Status / op / compute values from cublas_api.h,
CUDA_R_32F = 0 from library_types.h. Where the installed wheel ships cublasLt.h the tile names are read
from it and calib's tables (calib/heuristics/cublaslt.py) are checked against it (a mismatch stops the
probe: a wrong enum would silently give nonsense)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The ctypes core (enum tables, the result struct, the Lt wrapper) is calib's: the split-K model asks
# the same heuristic live on the GPU (calib/heuristics/cublaslt.py).
from calib.heuristics.cublaslt import (  # noqa: E402
    CLUSTER_NAMES, N_REQUESTED, PROBE_FORMAT, PROBE_VERSION, STAGE_NAMES, TILE_NAMES, WORKSPACE_HOPPER_BYTES,
    HeuristicResult, Lt, LtError,
)

__all__ = ["CLUSTER_NAMES", "HeuristicResult", "LtError", "STAGE_NAMES", "TILE_NAMES", "check_header", "main"]
# cuBLAS API reference, cublasSetWorkspace: 32 MiB is the workspace recommended for Hopper (4 MiB for
# the other architectures; the table PyTorch #120925 sized its cublasLt workspace from). CuPy sets no
# workspace of its own, so cuBLAS runs with its default; whether that default is the recommended size is
# not stated there, so each shape's first choice is also asked at 4 MiB and 0 (``first_by_workspace``).
WORKSPACE_ALT_BYTES = (4 << 20, 0)


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


def header_for(lib_path: str) -> str | None:
    d = os.path.dirname(os.path.realpath(lib_path))
    for p in (os.path.join(d, "..", "include", "cublasLt.h"), "/usr/local/cuda/include/cublasLt.h"):
        if os.path.exists(p):
            return os.path.normpath(p)
    return None


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
    t0 = time.perf_counter()
    try:  # a bad argument or shapes file is a message, not a traceback
        n_time = int(argv[argv.index("--time") + 1]) if "--time" in argv else 12
        with open(shapes_path) as f:
            shapes = [tuple(int(x) for x in s) for s in json.load(f)]
        if not all(len(s) == 3 and min(s) > 0 for s in shapes):
            raise ValueError("every shape must be [m, n, k] of positive integers")
    except (OSError, ValueError, TypeError, IndexError) as e:
        raise SystemExit(f"cublaslt-heuristics: {shapes_path}: {e}") from None
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
    out = {"format": PROBE_FORMAT, "format_version": PROBE_VERSION, "library": lt.path, "found_by": lt.how,
           "version": lt.version, "device": device, "header": checked,
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
