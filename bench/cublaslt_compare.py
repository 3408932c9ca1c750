"""Does cuBLASLt's heuristic name the kernel cuBLAS ran? (issue 14, split-K groundwork; offline)

    python3 bench/cublaslt_compare.py PROBE.json bench/results/2026-12-02-h200-splitk-kernels/kernels.json.gz
    python3 bench/cublaslt_compare.py --selftest

PROBE.json from ``bench/probes.py cublaslt-heuristics`` (or PROBE.json.gz: the committed probes are stored
gzip-compressed, and a path ending in .gz is read decompressed); kernels.json from ``bench/probes.py splitk-kernels``
(torch.profiler over cupy.matmul(a.T, b), H200, 2026-12-02). Per shape, Lt's first result (tile, split-K)
against the traced GEMM kernel: its tile from the name (cutlass ``sgemm_128x32_8x5``, xmma
``tilesize128x32x8``), its split from grid z, and how the split was reduced (a separate
``splitKreduce_kernel``, xmma's ``execute_split_k_kernel``, or neither: in the kernel). Both name tiles in
cuBLAS's own m x n (rows of C' = the n of the (m, n, k) shape; see Lt.descriptors in cublaslt_probe.py),
so a tile that agrees only when swapped is reported apart. Where the probe also logged what cuBLAS
executed, that is compared too (with the trace, as a check of the log, and with Lt's first choice)."""

from __future__ import annotations

import gzip
import json
import re
import sys
import zlib
from collections import Counter

TILE_RX = (re.compile(r"sgemm_(\d+)x(\d+)_"), re.compile(r"tilesize(\d+)x(\d+)x\d+"))


def is_reduce(name: str) -> bool:
    return "splitKreduce" in name or "split_k_kernel" in name


def traced_config(launches: list[dict]) -> dict | None:
    """Tile, split and reduction of the GEMM kernel in one shape's traced launches (several calls each)."""
    gemm = [e for e in launches if not is_reduce(e["name"])]
    if not gemm:
        return None
    name = gemm[0]["name"]
    tile = next((f"{m.group(1)}x{m.group(2)}" for rx in TILE_RX for m in [rx.search(name)] if m), None)
    split = int(gemm[0]["grid"][2])
    if any("splitKreduce" in e["name"] for e in launches):
        reduction = "splitKreduce kernel"
    elif any("split_k_kernel" in e["name"] for e in launches):
        reduction = "xmma split_k kernel"
    else:
        reduction = "in kernel" if split > 1 else "none"
    family = "cutlass simt" if "cutlass" in name else "xmma" if "xmma" in name else "other"
    return {"tile": tile, "split": split, "reduction": reduction, "family": family,
            "kernels": len({re.sub(r"\(.*", "", e["name"]) for e in gemm})}


def swapped(tile: str | None) -> str | None:
    return "x".join(reversed(tile.split("x"))) if tile and "x" in tile else None


def compare(probe: dict, kernels: dict) -> dict:
    """Counts of agreement of Lt's first result with the traced kernel, and the disagreements."""
    rows, tile_pairs, split_pairs = [], Counter(), Counter()
    n = {"shapes": 0, "tile": 0, "split": 0, "both": 0, "tile_swapped_only": 0, "in_top8_both": 0,
         "no_trace": 0, "no_result": 0, "mixed_trace": 0}
    for key, shape in probe["shapes"].items():
        if key not in kernels:
            n["no_trace"] += 1
            continue
        traced = traced_config(kernels[key])
        if not shape.get("results") or traced is None:
            n["no_result"] += 1
            continue
        n["shapes"] += 1
        n["mixed_trace"] += traced["kernels"] > 1
        first = shape["results"][0]
        t_ok, s_ok = first["tile"] == traced["tile"], first["splitk"] == traced["split"]
        n["tile"] += t_ok
        n["split"] += s_ok
        n["both"] += t_ok and s_ok
        n["tile_swapped_only"] += (not t_ok) and first["tile"] == swapped(traced["tile"])
        rank = next((i for i, r in enumerate(shape["results"])
                     if r["tile"] == traced["tile"] and r["splitk"] == traced["split"]), None)
        n["in_top8_both"] += rank is not None
        if not (t_ok and s_ok):
            tile_pairs[(traced["tile"], first["tile"])] += not t_ok
            split_pairs[(traced["split"], first["splitk"])] += not s_ok
            rows.append({"shape": key, "traced": traced, "lt_first": {k: first[k] for k in ("tile", "splitk",
                         "reduction_name", "stages", "waves")}, "traced_rank_in_lt": rank})
    return {"counts": n, "disagree": rows, "tile_pairs": tile_pairs, "split_pairs": split_pairs,
            "executed": compare_executed(probe, kernels)}


def compare_executed(probe: dict, kernels: dict) -> dict | None:
    """What cuBLAS logged as executed, against the trace (does the log tell the truth?) and Lt's first."""
    executed = probe.get("executed")
    if not executed:
        return None
    n = Counter()
    for key, v in executed.items():
        ex, traced = v.get("executed"), traced_config(kernels.get(key, []))
        first = (probe["shapes"].get(key, {}).get("results") or [None])[0]
        if not ex:
            n["not_logged"] += 1
            continue
        n["logged"] += 1
        if traced:
            n["vs_trace_shapes"] += 1
            n["tile_as_traced"] += ex["tile"] == traced["tile"]
            n["split_as_traced"] += ex.get("splitk", 1) == traced["split"]
        if first:
            n["vs_lt_shapes"] += 1
            n["same_algo_tile_split_as_lt_first"] += (ex["algo_id"] == first["algo_id"] and ex["tile"] == first["tile"]
                                                     and ex.get("splitk", 1) == first["splitk"])
    return dict(n)


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else f"{a}/0"


def report(res: dict, top: int = 25) -> None:
    n = res["counts"]
    s = n["shapes"]
    print(f"{s} shapes with both a trace and an Lt result ({n['no_trace']} without trace, {n['no_result']} "
          f"without result; {n['mixed_trace']} whose 5 traced calls ran more than one GEMM kernel)")
    print(f"Lt's first result vs the traced kernel: tile {pct(n['tile'], s)}, split {pct(n['split'], s)}, "
          f"both {pct(n['both'], s)}; traced (tile, split) among Lt's ranked results {pct(n['in_top8_both'], s)}; "
          f"tile equal only when swapped {n['tile_swapped_only']}")
    if res["tile_pairs"]:
        print("tile disagreements, traced -> Lt first: " + ", ".join(
            f"{a}->{b} x{c}" for (a, b), c in res["tile_pairs"].most_common() if c))
    if res["split_pairs"]:
        print("split disagreements, traced -> Lt first: " + ", ".join(
            f"{a}->{b} x{c}" for (a, b), c in res["split_pairs"].most_common() if c))
    for r in res["disagree"][:top]:
        t, f = r["traced"], r["lt_first"]
        print(f"  {r['shape']:>16}: traced {t['family']} {t['tile']} split {t['split']} ({t['reduction']}); "
              f"Lt {f['tile']} split {f['splitk']} {f['reduction_name']} stages {f['stages']} waves {f['waves']}; "
              f"traced at Lt rank {r['traced_rank_in_lt']}")
    if len(res["disagree"]) > top:
        print(f"  ... {len(res['disagree']) - top} more")
    if res["executed"]:
        e = res["executed"]
        print(f"cuBLAS's logged executed algo: logged for {e.get('logged', 0)} shapes; tile as traced "
              f"{pct(e.get('tile_as_traced', 0), e.get('vs_trace_shapes', 0))}, split as traced "
              f"{pct(e.get('split_as_traced', 0), e.get('vs_trace_shapes', 0))}; same algo, tile and split as "
              f"Lt's first {pct(e.get('same_algo_tile_split_as_lt_first', 0), e.get('vs_lt_shapes', 0))}")


def _synthetic() -> tuple[dict, dict]:
    """Four shapes: agree (cutlass, splitKreduce), tile differs (xmma), split differs (in-kernel reduction),
    tile swapped; one probe shape without trace."""
    def launch(name, z):
        return {"name": name, "grid": [1, 1, z], "block": [128, 1, 1], "dur_us": 1.0}

    cut = "void cutlass::Kernel2<cutlass_80_simt_sgemm_{}_8x5_nt_align1>(x)"
    xm = "sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize{}x8_stage3_warpsize2x2x1_ffma_execute_kernel__5x_cublas"
    red = "void cublasLt::splitKreduce_kernel<32, 16, int, float>(x)"
    kernels = {"16x16x2560": [launch(cut.format("64x64"), 36), launch(red, 1)] * 5,
               "48x880x2048": [launch(xm.format("128x32"), 1)] * 5,
               "16x784x33536": [launch(xm.format("32x32"), 33)] * 5,
               "320x560x2304": [launch(cut.format("128x64"), 1)] * 5}

    def res(tile, split, algo=1):
        return {"algo_id": algo, "tile": tile, "splitk": split, "reduction_name": "NONE", "stages": "8x5",
                "waves": 1.0}
    probe = {"shapes": {"16x16x2560": {"results": [res("64x64", 36)]},
                        "48x880x2048": {"results": [res("64x64", 1), res("128x32", 1)]},
                        "16x784x33536": {"results": [res("32x32", 16)]},
                        "320x560x2304": {"results": [res("64x128", 1)]},
                        "1x1x1": {"results": [res("8x8", 1)]}},
             "executed": {"16x16x2560": {"executed": {"algo_id": 1, "tile": "64x64", "splitk": 36}},
                          "48x880x2048": {"executed": {"algo_id": 1, "tile": "128x32"}},
                          "16x784x33536": {"executed": None}}}
    return probe, kernels


def selftest() -> None:
    probe, kernels = _synthetic()
    res = compare(probe, kernels)
    n = res["counts"]
    expect = {"shapes": 4, "tile": 2, "split": 3, "both": 1, "tile_swapped_only": 1, "in_top8_both": 2,
              "no_trace": 1, "no_result": 0, "mixed_trace": 0}
    assert n == expect, n
    assert traced_config(kernels["16x16x2560"])["reduction"] == "splitKreduce kernel"
    assert traced_config(kernels["16x784x33536"])["reduction"] == "in kernel"
    assert res["tile_pairs"][("128x32", "64x64")] == 1 and res["split_pairs"][(33, 16)] == 1
    assert [r["traced_rank_in_lt"] for r in res["disagree"]] == [1, None, None]
    e = res["executed"]
    assert (e["logged"], e["not_logged"], e["tile_as_traced"], e["split_as_traced"]) == (2, 1, 2, 2), e
    assert e["same_algo_tile_split_as_lt_first"] == 1, e
    report(res)
    print("selftest passed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        selftest()
    elif len(sys.argv) == 3:
        docs = []
        for path in sys.argv[1:]:
            try:  # a missing or broken file is a message, not a traceback
                with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path)) as f:
                    docs.append(json.load(f))
            except (OSError, ValueError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
                raise SystemExit(f"{path}: {e}") from None
        if not isinstance(docs[0], dict) or not isinstance(docs[0].get("shapes"), dict):
            raise SystemExit(f"{sys.argv[1]}: not a cublaslt-heuristics probe (no 'shapes' object)")
        if not isinstance(docs[1], dict):
            raise SystemExit(f"{sys.argv[2]}: not a splitk-kernels trace (not an object)")
        report(compare(*docs))
    else:
        raise SystemExit(__doc__.split("\n\n")[1])
