"""An H200 probe that explains heuristic misses (issue 14); it prints a table and writes JSON.

    python3 bench/probes.py splitk-kernels OUT.json [SHAPES.json]   # which kernels cuBLAS runs for fp32 GEMMs
    python3 bench/probes.py cublaslt-heuristics SHAPES.json OUT.json [--time N] [--no-log]   # what Lt would pick
    python3 bench/probes.py splitk-batched-kernels OUT.json [SHAPES.json] [--start I] [--max N]   # split > 1's kernels
    python3 bench/probes.py cublaslt-batched OUT.json [SHAPES.json] [--all]   # what Lt would pick for them
    python3 bench/probes.py shapes SPLIT1.json BATCHED.json [--recordings QRS] [--seeds 16,17] [--tiny]   # their lists
    python3 bench/probes.py norm-registers OUT.json   # what the normalization kernels compiled to

splitk-kernels: the fp32 GEMMs whose split-1 time the split-K model missed by 9-81% in the recordings
(and well-predicted controls), ``cupy.matmul(a.T, b)`` as the evaluation calls it, traced with
torch.profiler (it sees CuPy's kernels too): kernel names, grids, blocks, durations. The split-K
model assumes cuBLAS's fastest configuration; the names say what it ran. SHAPES.json: a list of
[m, n, k] to trace instead (e.g. every fp32 problem of the recorded evaluations).

cublaslt-heuristics: cublasLtMatmulAlgoGetHeuristic's ranked algos for the same GEMMs (bench/cublaslt_probe.py
says how), what cuBLAS's gemm executed (Lt's trace log) and, for N shapes, cupy.matmul against Lt's first
algo; bench/cublaslt_compare.py sets it against the traced kernels.

splitk-batched-kernels: the split > 1 path exactly as the evaluation runs it (splitk.GpuCase.run: CuPy's
copy of the transposed K-slices, its strided-batched FP32 GEMM of ``split`` products of K/split, the
``splitk_sum`` reduction), traced the same way: every kernel's name, grid, block and duration, per split.
The split-K model times the batched GEMM as its fastest SIMT configuration, which the recordings
contradict for 16-row outputs (fp32 splits within 1.3x of the best ran a median 0.93x, p10 0.78x their
prediction on A-P; 0.99x for outputs of more than 128 rows), and the misses below 0.85 are splits that
won while predicted at most 1.19x faster than split 1. The names say which tile cuBLAS batched with.
SHAPES.json: a list of [m, n, k, split]; by default every fp32 problem of the recorded evaluations
(tests/h200_recordings.py, A-P) with each split that ran within 1.3x of its best (``batched_shapes``).

cublaslt-batched: cublasLtMatmulAlgoGetHeuristic's ranked algos for the same batched GEMMs, described as
CuPy hands them to cuBLAS (calib.heuristics.cublaslt.Lt.batched_descriptors: op N/N, m' = n, n' = m,
k' = K/split, batch count and strides), 32 MiB workspace; keyed "MxNxK/split", each with its ranked
results as cublaslt-heuristics writes them (format calib.cublaslt-batched-probe v1). Whether Lt's first
result is what the batched gemm ran is for splitk-batched-kernels' names to say (as
bench/cublaslt_compare.py did for split 1: on the H200, 571 of 571 traced pairs, 2026-12-02). ``--all``:
every split > 1 of every recorded fp32 problem (2416 pairs of A-P), so that a replay with the file as
oracle times every split of a problem from its kernel, not only the splits near the best (with the
571, a problem's other splits fall back to the fastest SIMT configuration and look faster than
they ran: calib/heuristics/splitk/batched.py, BATCHED_PROBE_FILE).

shapes: writes the two lists the probes above take, without a GPU: SPLIT1.json, [m, n, k] of the fp32
problems of the named recordings (``--recordings``, letters of tests/h200_recordings.py) and of the
problem sets of ``--seeds`` (the evaluation's own generator, 100 problems each, as bench/heuristics_h200.sh
draws them; nothing of them is measured or read), plus with ``--tiny`` the small-GEMM grid
(:data:`TINY_GRID`); BATCHED.json, [m, n, k, split] for every split > 1 of the same recorded and
generated problems (not the grid).

norm-registers: every normalization kernel of the family (calib.heuristics.normalization._names: the
persistent and multi-pass templates per dtype, op, vector and buffer) compiled as the evaluation compiles
it (CuPy's NVRTC, the same options), with the driver's register count, local (spill) bytes and the most
threads a block of it can launch, beside the register rule the model uses (normalization.registers from
the shipped profile's normalization.additional_registers) and whether that rule, with REGS_SPREAD, lets
256, 512 and 1024 threads launch. The rule kept out the 1024-thread blocks that won T's and W's misses
(v1 x 16: 62.7 registers by the rule, so 66.7 with the spread, over 64)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPLITK_SHAPES = [(1168, 288, 3328), (320, 1424, 29440), (320, 560, 2304), (64, 1056, 19200), (288, 832, 1280),
                 (144, 272, 1792), (16, 720, 3584), (16, 5216, 5632), (16, 896, 38400), (4688, 48, 17152),
                 (1360, 48, 25600), (912, 96, 12544), (432, 352, 9216), (128, 960, 21504), (3088, 1808, 2560),
                 (720, 2800, 1536), (64, 544, 42496), (16, 1264, 9216), (48, 496, 22016), (48, 880, 2048)]


def splitk_kernels(out_path: str, shapes_path: str | None = None) -> None:
    import cupy as cp
    import torch

    shapes = [tuple(s) for s in json.load(open(shapes_path))] if shapes_path else SPLITK_SHAPES
    torch.zeros(1, device="cuda")
    out = {}
    for m, n, k in shapes:
        at = cp.random.rand(k, m, dtype=cp.float32)
        b = cp.random.rand(k, n, dtype=cp.float32)
        ev = out[f"{m}x{n}x{k}"] = _trace(lambda at=at, b=b: cp.matmul(at.T, b))
        first = ev[: max(1, len(ev) // 5)]
        if len(shapes) <= 40:
            print(f"{m}x{n}x{k}: " + "; ".join(f"{e['name'][:70]} grid {e['grid']} {e['dur_us']} us" for e in first))
        json.dump(out, open(out_path, "w"), indent=1)  # after every shape: a call cut short keeps what ran
    print(f"{len(out)} of {len(shapes)} shapes traced into {out_path}")


def batched_shapes(within: float = 1.3, names=None) -> list:
    """[m, n, k, split] of the recordings' fp32 problems for every split > 1 that ran within ``within`` of
    the problem's best (math.inf: every split that ran), read from the committed evaluations (``names``
    of tests/h200_recordings.py, every one by default; no unseen seed), without duplicates."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tests"))
    from h200_recordings import R, read_json, recordings

    out = set()
    for rec, _ in recordings("matmul_splitk", names=names).values():
        for r in read_json(R / rec)["rows"]:
            d, t = r["descriptor"], r["times_us"]
            if d["dtype"] != "float32":
                continue
            for key, us in t.items():
                split = int(key.split("=")[1])
                if split > 1 and us is not None and us <= within * r["best_us"]:
                    out.add((d["m"], d["n"], d["k"], split))
    return [list(x) for x in sorted(out)]


# The small fp32 GEMMs where cuBLAS's kernel is furthest from the model: recording R's 16x80x768 ran
# 28.5 us where Lt's choice (the sm80 xmma 32x32 kernel, its K split 176 ways inside one launch)
# was modelled at 10, S's 16x144x256 ran 54.7 us. The grid spans the outputs and Ks around them.
TINY_GRID = [(m, n, k) for m in (16, 32, 48, 64) for n in (16, 32, 80, 144, 208, 400)
             for k in (256, 512, 768, 1024, 2048)]


def probe_shapes(split1_path: str, batched_path: str, *args: str) -> None:
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from calib.heuristics import splitk as SK

    opts = {"--recordings": "", "--seeds": ""}
    for flag in opts:
        if flag in args:
            opts[flag] = args[args.index(flag) + 1]
    split1, batched = set(), set()
    problems = [SK.SplitKDescriptor(**r["descriptor"]) for rec in _recorded(opts["--recordings"]) for r in rec]
    for seed in filter(None, opts["--seeds"].split(",")):
        problems += SK.generate(100, int(seed), max_bytes=1.0e9)
    for d in problems:
        if d.dtype == "float32":
            split1.add((d.m, d.n, d.k))
            batched.update((d.m, d.n, d.k, k["split"]) for k in SK.space(d) if k["split"] > 1)
    if "--tiny" in args:
        split1.update(TINY_GRID)
    json.dump([list(x) for x in sorted(split1)], open(split1_path, "w"))
    json.dump([list(x) for x in sorted(batched)], open(batched_path, "w"))
    print(f"{len(split1)} fp32 GEMMs into {split1_path}, {len(batched)} batched into {batched_path}")


def _recorded(names: str) -> list:
    """The rows of the named recordings' split-K evaluations (tests/h200_recordings.py)."""
    if not names:
        return []
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tests"))
    from h200_recordings import R, read_json, recordings

    return [read_json(R / rec)["rows"] for rec, _ in recordings("matmul_splitk", names=names).values()]


def _trace(fn, calls: int = 5) -> list:
    """The CUDA kernels of ``calls`` calls of ``fn`` (after three untraced), from torch.profiler."""
    import os
    import tempfile

    import cupy as cp
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        cp.cuda.Device().synchronize()
    fd, f = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(f)
    ev = [e for e in json.load(open(f))["traceEvents"] if e.get("cat") == "kernel"]
    os.remove(f)
    return [{"name": e["name"][:160], "grid": e["args"].get("grid"), "block": e["args"].get("block"),
             "dur_us": round(e["dur"], 2)} for e in ev]


def splitk_batched_kernels(out_path: str, *args: str) -> None:
    import cupy as cp
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from calib.heuristics import splitk as SK

    opts = {}
    for flag in ("--start", "--max"):  # a part of the list per call: --start 300 --max 300
        if flag in args:
            i = args.index(flag)
            opts[flag], args = int(args[i + 1]), args[:i] + args[i + 2:]
    shapes = [tuple(s) for s in json.load(open(args[0]))] if args else batched_shapes()
    start = opts.get("--start", 0)
    shapes = shapes[start:start + opts["--max"] if "--max" in opts else None]
    torch.zeros(1, device="cuda")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    out = {"format": "calib.splitk-batched-kernels", "format_version": 1,
           "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "calls": 5, "shapes": {}}
    for m, n, k, split in shapes:
        case = SK.GpuCase(SK.SplitKDescriptor(m, n, k, "float32"), sms)
        out["shapes"][f"{m}x{n}x{k}/{split}"] = _trace(lambda c=case, s=split: c.run({"split": s}))
        case.free()
        json.dump(out, open(out_path, "w"), indent=1)  # after every shape: a call cut short keeps what ran
    print(f"{len(out['shapes'])} of {len(shapes)} (shape, split) pairs traced into {out_path}")


def cublaslt_batched(out_path: str, *args: str) -> None:
    import math
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import cupy as cp

    from calib.heuristics.cublaslt import WORKSPACE_HOPPER_BYTES, Lt, LtError

    every = "--all" in args
    args = [a for a in args if a != "--all"]
    shapes = [tuple(s) for s in json.load(open(args[0]))] if args else batched_shapes(math.inf if every else 1.3)
    cp.cuda.device.get_cublas_handle()  # CuPy's cuBLAS loaded: Lt takes the libcublasLt it mapped
    lt = Lt()
    lt.create()
    pref = lt.preference(WORKSPACE_HOPPER_BYTES)
    out = {"format": "calib.cublaslt-batched-probe", "format_version": 1,
           "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "library": lt.path,
           "version": lt.version, "workspace_bytes": WORKSPACE_HOPPER_BYTES, "shapes": {}}
    t0 = time.perf_counter()
    for m, n, k, split in shapes:
        descs = lt.batched_descriptors(m, n, k // split, split)
        entry = {"m": m, "n": n, "k": k, "split": split}
        try:
            entry["results"] = [lt.config(r) for r in lt.heuristic(descs, pref)]
        except LtError as e:  # one shape Lt cannot describe must not stop the rest
            entry["error"] = str(e)
        finally:
            lt.destroy(*descs)
        out["shapes"][f"{m}x{n}x{k}/{split}"] = entry
    json.dump(out, open(out_path, "w"), indent=1)
    print(f"{len(shapes)} batched GEMMs asked in {time.perf_counter() - t0:.2f} s into {out_path}")


def norm_registers(out_path: str) -> None:
    import re

    import cupy as cp

    from calib.heuristics import normalization as N
    from calib.heuristics.knobs import Knobs
    from calib.heuristics.predictor import q_of
    from calib.profile import load_profile

    q = q_of(load_profile(Path(__file__).resolve().parents[1] / "profiles" / "nvidia-h200.json",
                          device=None, software=None))
    rows = []
    for dtype in N.DTYPES:
        for name in dict.fromkeys(N._names(dtype)):  # each compiled kernel once
            m = re.match(r"(persistent|multipass)_norm<[^,]+,(\d+),?(\d+)?,(\d)>", name)
            strategy, a, b, op = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
            buf, vec = (a, int(b)) if strategy == "persistent" else (0, a)
            k = Knobs(strategy=strategy, threads=1024, vec=vec, buffer=buf)
            fn = N.kernel(dtype, k, N.OPS[op])
            # cupy.RawKernel's attribute properties compile the kernel and ask the driver
            # (cuFuncGetAttribute): what the launch will see, not what a local nvcc says
            regs, local, max_threads = fn.num_regs, fn.local_size_bytes, fn.max_threads_per_block
            d = N.descriptor({"op": N.OPS[op], "rows": 1, "cols": 4096, "dtype": dtype})
            rule = N.registers(d, k, q)[0]
            rows.append({"kernel": name, "dtype": dtype, "op": N.OPS[op], "strategy": strategy, "vec": vec,
                         "buffer": buf, "num_regs": regs, "local_bytes": local, "max_threads_per_block": max_threads,
                         "rule_registers": round(rule, 2),
                         "rule_launches": {t: N.blocks_per_sm(t, rule + (N.REGS_SPREAD if strategy == "persistent"
                                                                            else 0.0)) > 0
                                           for t in (256, 512, 1024)}})
    print(f"{'kernel':<44} {'regs':>5} {'rule':>6} {'local':>6} {'max thr':>7}  rule launches 1024")
    for r in rows:
        flag = "" if r["rule_launches"][1024] == (r["max_threads_per_block"] >= 1024) else "  <- differs"
        print(f"{r['kernel']:<44} {r['num_regs']:>5} {r['rule_registers']:>6} {r['local_bytes']:>6} "
              f"{r['max_threads_per_block']:>7}  {r['rule_launches'][1024]}{flag}")
    Path(out_path).write_text(json.dumps({"format": "calib.norm-registers-probe", "version": 1,
                                          "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                          "nvrtc": list(cp.cuda.nvrtc.getVersion()), "kernels": rows}, indent=1))


def cublaslt_heuristics(*args: str) -> None:
    import os

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cublaslt_probe

    cublaslt_probe.main(list(args))


if __name__ == "__main__":
    if sys.argv[1:2] == ["cublaslt-heuristics"]:
        cublaslt_heuristics(*sys.argv[2:])
    elif sys.argv[1:2] == ["cublaslt-batched"] and len(sys.argv) >= 3:
        cublaslt_batched(*sys.argv[2:])
    elif sys.argv[1:2] == ["splitk-batched-kernels"] and len(sys.argv) >= 3:
        splitk_batched_kernels(*sys.argv[2:])
    elif sys.argv[1:2] == ["splitk-kernels"] and len(sys.argv) >= 3:
        splitk_kernels(*sys.argv[2:4])
    elif sys.argv[1:2] == ["norm-registers"] and len(sys.argv) == 3:
        norm_registers(sys.argv[2])
    elif sys.argv[1:2] == ["shapes"] and len(sys.argv) >= 4:
        probe_shapes(*sys.argv[2:])
    else:  # was a KeyError or IndexError traceback
        raise SystemExit(__doc__.split("\n\n")[1])
