"""Choose split-K's margins with its fp32 forests held out: each group of the fp32 forests' recordings
(a 1000-problem training seed, the live seeds 42-54 together, a focused seed) is replayed with both
forests fitted on the other groups, at every pair of margins on a grid.

    python3 bench/splitk_margins.py [--margins 0.86,0.90,...] [--trees 50]

Prints, per margin pair (SPLIT_MARGIN, SPLIT_MARGIN_FROM_CHOICE), the problems below 0.85 and 0.9 of
the exhaustive best and the geometric mean, over the seeded training groups (the evaluation's own
distribution) and over the focused ones (fp32 outputs of at most 64 rows) apart. The choice rule is
splitk.choose_split, as splitk.heuristic's; the held-out forests are splitk.fit_forest's, as the shipped ones."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from calib.heuristics import cublaslt as CL  # noqa: E402
from calib.heuristics import splitk as SK  # noqa: E402
from calib.heuristics.forest import forest_value  # noqa: E402
import fit_splitk_forests as F  # noqa: E402
from h200_recordings import FOCUS, TRAINING  # noqa: E402


def group_of(name: str) -> str:
    return name if name in ("1000", "1001", "1002") or name in FOCUS else "42-54"


def problems(recorded: dict) -> list[dict]:
    """Per fp32 problem: its group, times, the models before the forests, both forests' features and
    the margin class (16-row output whose best split's batched GEMM is timed from Lt's kernel)."""
    out = []
    for name, (rows, q, oracle) in recorded.items():
        with CL.use_oracle(oracle):
            for r in rows:
                d = r["descriptor"]
                if d["dtype"] != "float32":
                    continue
                desc = SK.SplitKDescriptor(d["m"], d["n"], d["k"], "float32")
                times = {int(c.split("=")[1]): t for c, t in r["times_us"].items()}
                splits = [s for s in times if s > 1]
                out.append({
                    "group": group_of(name), "times": times,
                    "base": {1: SK.split1_fp32_us(q, desc.m, desc.n, desc.k),
                             **{s: SK.split_path_us(desc, s, q) for s in splits}},
                    "x": {1: SK.fp32_split1_features(q, desc.m, desc.n, desc.k),
                          **{s: SK.fp32_split_features(q, desc.m, desc.n, desc.k, s) for s in splits}},
                    "from_choice": {s: SK.margin_from_choice(desc, s, q) for s in splits}})
    return out


def fit(rows: list[dict], n_trees: int) -> tuple[list, list]:
    x1 = [r["x"][1] for r in rows]
    y1 = [math.log(r["times"][1] / r["base"][1]) for r in rows]
    xs = [r["x"][s] for r in rows for s in r["base"] if s > 1]
    ys = [math.log(r["times"][s] / r["base"][s]) for r in rows for s in r["base"] if s > 1]
    return (SK.fit_forest(x1, y1, n_trees, 0, SK.FP32_SPLIT1_FEATURES),
            SK.fit_forest(xs, ys, n_trees, 0, SK.FP32_SPLITS_FEATURES))


def chosen(r: dict, predicted_us: dict, margin: float, margin_from_choice: float) -> int:
    """splitk.choose_split at these margins, each split's class as the shipped margin() gives it."""
    return SK.choose_split(predicted_us, lambda s: margin_from_choice if r["from_choice"][s] else margin)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--margins", default="0.86,0.90,0.94,0.96,0.98,1.0")
    ap.add_argument("--trees", type=int, default=SK.FOREST_TREES)
    a = ap.parse_args(argv)
    grid = [float(v) for v in a.margins.split(",")]
    warnings.simplefilter("ignore", RuntimeWarning)
    names = list(TRAINING) + list(FOCUS)
    recorded = dict(zip(names, F.loaded_with_answers(F.fp32_recordings())))
    rows = problems(recorded)
    preds = {}
    for g in sorted({r["group"] for r in rows}):
        f1, fs = fit([r for r in rows if r["group"] != g], a.trees)
        for r in rows:
            if r["group"] == g:
                preds[id(r)] = {s: b * math.exp(forest_value(f1 if s == 1 else fs, r["x"][s]))
                                for s, b in r["base"].items()}
        print(f"held out {g}", file=sys.stderr, flush=True)
    print("| SPLIT_MARGIN | FROM_CHOICE | seeded: below 0.85 / 0.9, geomean | focused: below 0.85 / 0.9, geomean |")
    print("|---|---|---|---|")
    for m in grid:
        for mc in grid:
            cells = []
            for focused in (False, True):
                eff = [min(r["times"].values()) / r["times"][chosen(r, preds[id(r)], m, mc)]
                       for r in rows if (r["group"] in FOCUS) == focused]
                gm = math.exp(statistics.fmean(math.log(e) for e in eff))
                cells.append(f"{sum(e < 0.85 for e in eff)} / {sum(e < 0.9 for e in eff)} of {len(eff)}, {gm:.4f}")
            print(f"| {m:.2f} | {mc:.2f} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
