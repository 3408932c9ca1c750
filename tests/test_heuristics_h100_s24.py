"""Session 24's live run (2026-12-07): asked for an H200, the device tool gave an NVIDIA H100 80GB HBM3
(driver 580.159.04, CUDA 13.2, CuPy 14.2.0); the shipped H100 profile, found by the lookup. Seeds 176 and
177 every kind, 178-191 normalization alone (192 was cut at the call's end; 176's normalization stopped at
its budget after 37 problems). Normalization chose with the first residual forest (one round of fitting,
kept beside the recordings as normalization_residual-s24-call1.json.gz), the first live run of it.

Live: every normalization set's geomean 0.990-0.997 (0.989-0.994 replayed without the forest), worst
below 0.85 on two sets: 178 (0.849, fp16 softmax 5419 x 5030, the same choice without the forest) and 180
(0.735: fp16 layer norm 3514 x 24934, persistent v2 x 128 at 256 threads, 0.938 without the forest). 180
is why the shipped forest is fitted in two rounds (residual.fit_trees); it judges these sets in
tests/test_heuristics_normalization_residual.py (180 0.735 -> 0.938, 178 0.849 -> 0.920).
Pointwise and split-K met their bars as on session 23's H100 run (pointwise's predictor 12-13%, the launch
floor); cupy.sum's learned p90 6.6 and 6.1%."""

from __future__ import annotations

import pytest
from live_runs import ROOT, assert_live_bars, assert_replays_as_it_ran, live, replay

FOLDER = ROOT / "bench" / "results" / "2026-12-07-h100-s24"
FOREST_AS_RAN = FOLDER / "normalization_residual-s24-call1.json.gz"
EVERY_KIND = (176, 177)
RUNS = ([(f"heuristics-seed{s}", k) for s in EVERY_KIND for k in ("pointwise", "normalization", "matmul_splitk")]
        + [(f"norm-seed{s}", "normalization") for s in range(178, 192)])
# the live misses of the worst-case bar (0.85): run -> (descriptor, chosen, efficiency)
MISSES = {"norm-seed178": ({"op": "softmax", "rows": 5419, "cols": 5030, "dtype": "float16"},
                           {"strategy": "multipass", "threads": 256, "vec": 2, "buffer": 0}, 0.849),
          "norm-seed180": ({"op": "layernorm", "rows": 3514, "cols": 24934, "dtype": "float16"},
                           {"strategy": "persistent", "threads": 256, "vec": 2, "buffer": 128}, 0.735)}


@pytest.mark.parametrize("run,kind", RUNS)
def test_the_h100_run_replays_as_it_ran(run, kind):
    evaluated = 37 if (run, kind) == ("heuristics-seed176", "normalization") else 100
    assert_replays_as_it_ran(live(FOLDER, run, kind), replay(FOLDER, run, kind, FOREST_AS_RAN),
                             "NVIDIA H100 80GB HBM3", evaluated)


@pytest.mark.parametrize("run,kind", RUNS)
def test_the_live_bars(run, kind):
    assert_live_bars(live(FOLDER, run, kind), MISSES.get(run) if kind == "normalization" else None)


def test_the_two_round_forest_mends_both_misses():
    """The shipped forest (two rounds) takes 180's layer norm off the v2 x 128 block (0.735 -> 0.938) and
    178's softmax to 0.920 (0.849 live, the same without any forest)."""
    shipped = {run: replay(FOLDER, run, "normalization", "shipped")["summary"]["heuristic"]["worst_efficiency"]
               for run in MISSES}
    none = replay(FOLDER, "norm-seed178", "normalization", None)["summary"]["heuristic"]["worst_efficiency"]
    assert none == pytest.approx(0.849, abs=5e-4)
    assert shipped == pytest.approx({"norm-seed178": 0.920, "norm-seed180": 0.938}, abs=5e-4)
