"""Issue 14's numbers for a folder of recorded evaluations of one kind, as the markdown table a
results README carries, and whether each meets every bar.

    python3 bench/evaluations_table.py FOLDER [--kind matmul_splitk]

FOLDER holds one sub-folder per run (``splitk-seed64/``, ``seed26/``), each with
``heuristics-KIND.json`` (or ``.json.gz``). Columns in the sub-folders' numeric order. The bars:
every problem evaluated and no choice failed, geomean >= 0.97 and worst >= 0.85 of the exhaustive best,
ahead of the static baseline, the predictor's memory-bound median |error| <= 5% and all problems' <=
10%. Exit 1 if a run misses one (or none is found), so a script can tell."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calib.heuristics.registry import HeuristicError, read_text  # noqa: E402


def runs(folder: Path, kind: str) -> list[tuple[str, dict]]:
    """(sub-folder name, evaluation) of each run under ``folder``, in numeric order of the name."""
    out = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        for name in (f"heuristics-{kind}.json", f"heuristics-{kind}.json.gz"):
            path = sub / name
            if path.exists():
                out.append((sub.name, json.loads(read_text(path, "recorded evaluation", HeuristicError))))
                break
    key = [int(m.group()) if (m := re.search(r"\d+$", n)) else -1 for n, _ in out]
    return [r for _, r in sorted(zip(key, out), key=lambda kr: (kr[0], kr[1][0]))]


def _get(res: dict, *keys):
    """res[k0][k1]..., or None where the evaluation does not record it (a group without problems
    records only its count, a run stopped before any problem no summary)."""
    for k in keys:
        res = res.get(k) if isinstance(res, dict) else None
    return res


def misses(res: dict) -> list[str]:
    """The bars ``res`` misses, each named with its value (a value not recorded misses its bar)."""
    geo = _get(res, "summary", "heuristic", "geomean_efficiency")
    worst = _get(res, "summary", "heuristic", "worst_efficiency")
    base = _get(res, "summary", "baseline", "geomean_efficiency")
    failed = _get(res, "summary", "heuristic", "choice_failed")
    mb = _get(res, "prediction", "memory_bound", "median_abs_rel_error")
    every = _get(res, "prediction", "all", "median_abs_rel_error")
    out = []
    if res.get("evaluated") != res.get("problems") or res.get("failed") or failed or res.get("stopped_early"):
        out.append(f"evaluated {res.get('evaluated')} of {res.get('problems')}, failed {res.get('failed')}, "
                   f"choice failed {failed}{', stopped early' if res.get('stopped_early') else ''}")
    if geo is None or geo < 0.97:
        out.append(f"geomean {_fmt(geo)}")
    if worst is None or worst < 0.85:
        out.append(f"worst {_fmt(worst)}")
    if geo is None or base is None or geo <= base:
        out.append(f"baseline {_fmt(base)} not behind")
    if mb is None or mb > 0.05:
        out.append(f"memory-bound median {_pct(mb)}")
    if every is None or every > 0.10:
        out.append(f"all-problems median {_pct(every)}")
    return out


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def table(rows: list[tuple[str, dict]]) -> str:
    seeds = [re.sub(r"^\D*", "", n) or n for n, _ in rows]
    if len(set(seeds)) < len(seeds):  # splitk-seed64 beside heuristics-seed64: a column each, named whole
        seeds = [n for n, _ in rows]

    def line(label, cells):
        return f"| {label} | " + " | ".join(cells) + " |"

    def worst(r):
        v = _get(r, "summary", "heuristic", "worst_efficiency")
        return f"**{_fmt(v)}**" if v is None or v < 0.85 else _fmt(v)

    out = [line("seed", seeds), "|---" * (len(rows) + 1) + "|"]
    failed = [(r.get("failed") or 0) + (_get(r, "summary", "heuristic", "choice_failed") or 0) for _, r in rows]
    out.append(line("evaluated / failed", [f"{r.get('evaluated')} / {f}" for (_, r), f in zip(rows, failed)]))
    out.append(line("geomean", [_fmt(_get(r, "summary", "heuristic", "geomean_efficiency")) for _, r in rows]))
    out.append(line("worst", [worst(r) for _, r in rows]))
    out.append(line("memory-bound median", [_pct(_get(r, "prediction", "memory_bound", "median_abs_rel_error"))
                                            for _, r in rows]))
    out.append(line("all problems median", [_pct(_get(r, "prediction", "all", "median_abs_rel_error"))
                                            for _, r in rows]))
    out.append(line("static baseline geomean", [_fmt(_get(r, "summary", "baseline", "geomean_efficiency"))
                                                for _, r in rows]))
    pi95 = [_get(r, "prediction", "all", "pi95_contains_measured") for _, r in rows]
    if any(v is not None for v in pi95):  # recorded since 2026-12-07 where a model-error band holds; no bar
        out.append(line("pi95 holds the choice", [_pct(v) for v in pi95]))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--kind", default="matmul_splitk")
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        ap.error(f"{args.folder} is not a folder")
    rows = runs(args.folder, args.kind)
    if not rows:
        print(f"no heuristics-{args.kind}.json(.gz) under {args.folder}/*/", file=sys.stderr)
        return 1
    print(table(rows))
    bad = {name: m for name, r in rows if (m := misses(r))}
    print(f"\n{len(rows) - len(bad)} of {len(rows)} meet every bar"
          + "".join(f"\n  {name}: {'; '.join(m)}" for name, m in bad.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
