"""The H200 runs of 2026-12-07 (session 22; bench/results/2026-12-07-h200-s22/): every kind on seeds 124
and 136 and normalization alone on seeds 125-135 and 137-147, none in any model's, correction's or
model-error band's fit, with the shipped H200 profile. Two calls on one freshly started NVIDIA H200
(driver 580.159.04, CUDA runtime 13.2, CuPy 14.2.0), commit 95d3918: normalization with each dtype's own
few-rows bias (session 20) and the narrow (2-byte) persistent kernels timed at their compiled register
count (session 22), neither live on an H200 before.

Pinned: the CPU replay under the rules the runs had (h200_recordings.fp16_scalar_kernels_as_they_ran) gives
every live choice, summary and predictor median back (so a later change to a model shows what it does here), and
what timing every scalar-load kernel at its compiled register count (fp32's too) changed since; which of issue
14's bars held (all of them but normalization's worst case on seeds 129, 136 and 141 and split-K's on 136); how
often the model-error band (pi95) held the choice on recordings it was not fitted on."""

from __future__ import annotations

import contextlib
import gzip
import json
import sys
import warnings
from pathlib import Path

import pytest

from calib.heuristics import evaluate as E
from calib.heuristics import learned as L
from calib.heuristics import learned_eval
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_recordings import fp16_scalar_kernels_as_they_ran  # noqa: E402

# The model as these runs chose with it: the corrected model and the strategy biases, without the residual forest
# (2026-12-07, session 24), which tests/test_heuristics_normalization_residual.py judges on these recordings.
pytestmark = pytest.mark.usefixtures("before_the_normalization_forest")

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "bench" / "results" / "2026-12-07-h200-s22"
PROFILE = ROOT / "profiles" / "nvidia-h200.json"
README_AND_TEST = "bench/results/2026-12-07-h200-s22/README.md and tests/test_heuristics_live_h200_s22.py"
MOVED = ("the replay no longer gives the live numbers, so a model changed since the recording; if on purpose, keep "
         "the live numbers pinned under the rules they ran with and say what the change does in " + README_AND_TEST)
EVERY_KIND = (124, 136)
NORM_SEEDS = [s for s in range(125, 148) if s != 136]
RUNS = ([(f"heuristics-seed{s}", k) for s in EVERY_KIND for k in ("pointwise", "normalization", "matmul_splitk")]
        + [(f"norm-seed{s}", "normalization") for s in NORM_SEEDS])
# the live misses of the worst-case bar (0.85): (run, kind) -> (descriptor, chosen, measured best, efficiency)
MISSES = {
    ("norm-seed129", "normalization"): (
        {"op": "layernorm", "rows": 5664, "cols": 14701, "dtype": "float32"},
        {"strategy": "multipass", "threads": 512, "vec": 1, "buffer": 0},
        {"strategy": "multipass", "threads": 1024, "vec": 1, "buffer": 0}, 0.840),
    ("heuristics-seed136", "normalization"): (
        {"op": "softmax", "rows": 1748, "cols": 5723, "dtype": "float32"},
        {"strategy": "multipass", "threads": 512, "vec": 1, "buffer": 0},
        {"strategy": "persistent", "threads": 512, "vec": 1, "buffer": 16}, 0.792),
    ("norm-seed141", "normalization"): (
        {"op": "softmax", "rows": 212, "cols": 25216, "dtype": "float32"},
        {"strategy": "persistent", "threads": 1024, "vec": 4, "buffer": 32},
        {"strategy": "multipass", "threads": 1024, "vec": 4, "buffer": 0}, 0.803),
    ("heuristics-seed136", "matmul_splitk"): (
        {"m": 48, "n": 1056, "k": 7424, "dtype": "float32"}, {"split": 32}, {"split": 16}, 0.821),
}


@pytest.fixture(autouse=True)
def fresh_state(fresh_cublaslt_state):
    """Every test here starts with cuBLASLt's state empty (conftest.fresh_cublaslt_state)."""


def _live(run: str, kind: str) -> dict:
    return json.loads(gzip.decompress((FOLDER / run / f"heuristics-{kind}.json.gz").read_bytes()))


def _replay(run: str, kind: str, as_ran: bool = False) -> dict:
    """The CPU replay; ``as_ran``: with normalization's model and corrections as the run had them (commit
    95d3918: the fp16 scalar-load kernels alone timed at their compiled register count, fp32's over the
    spread, and the corrections fitted so; every scalar-load kernel at its count since)."""
    with warnings.catch_warnings(), (fp16_scalar_kernels_as_they_ran() if as_ran else contextlib.nullcontext()):
        # split-K replays the recording's own cuBLASLt answers, and every parameter read is in the
        # profile: no warning is expected
        warnings.simplefilter("error", RuntimeWarning)
        return E.evaluate(kind, backend=f"replay:{FOLDER / run / f'heuristics-{kind}.json.gz'}",
                          profile=load_profile(PROFILE, device=None, software=None))


def _inside(rows) -> tuple[int, int]:
    """(choices whose measured time fell inside their pi95, choices with a pi95)."""
    held = [r["predicted_pi95"][0] <= r["heuristic_us"] <= r["predicted_pi95"][1] for r in rows
            if r.get("predicted_pi95") and r.get("heuristic_us")]
    return sum(held), len(held)


@pytest.mark.parametrize("run,kind", RUNS)
def test_the_h200_run_replays_as_it_ran(run, kind):
    live, res = _live(run, kind), _replay(run, kind, as_ran=True)
    assert live["device"]["name"] == "NVIDIA H200" and live["profile"].endswith("profiles/nvidia-h200.json")
    assert live["software"]["cuda_runtime"] == "13.2" and live["software"]["cupy"] == "14.2.0"
    # normalization's first step on a fresh machine spends its budget compiling: 79 of 100 on seed 124
    stopped = (run, kind) == ("heuristics-seed124", "normalization")
    assert live["evaluated"] == (79 if stopped else 100) and bool(live["stopped_early"]) == stopped
    assert res["evaluated"] == live["evaluated"] and live["failed"] == 0
    assert [(r["descriptor"], r["heuristic"]) for r in res["rows"]] == [
        (r["descriptor"], r["heuristic"]) for r in live["rows"]], MOVED
    for who in ("heuristic", "baseline", "library"):
        for key in ("geomean_efficiency", "worst_efficiency"):
            assert res["summary"][who][key] == pytest.approx(live["summary"][who][key], rel=1e-9), (who, key, MOVED)
    for key in ("all", "memory_bound"):
        assert res["prediction"][key]["median_abs_rel_error"] == pytest.approx(
            live["prediction"][key]["median_abs_rel_error"], rel=1e-9), (key, MOVED)
    assert res["parameters_read"] == live["parameters_read"]
    # normalization's band has since been refitted, on these runs among others, for the model with the
    # residual forest (2026-12-07, session 24): a replay reads today's band, the live rows the one they ran with
    if kind != "normalization":
        assert _inside(res["rows"]) == _inside(live["rows"]), MOVED


def _k(strategy: str, threads: int, vec: int, buffer: int) -> dict:
    return {"strategy": strategy, "threads": threads, "vec": vec, "buffer": buffer}


# What timing every scalar-load (vec 1) persistent kernel at its compiled register count (fp32's too, not only
# fp16's; normalization.scalar_access) and the corrections refitted so do to these runs: run -> the choices it
# moves, (descriptor, chosen live, chosen now, efficiency live, efficiency now); every other choice stays.
# 136's miss is mended (fp32 v1 x 16 at 512 threads: 63-64 registers, two blocks per SM, where the spread
# gave a third of the weight to 72 and one), and so is 141's, through the refitted fp32 few-rows bias
# (0.1454 -> 0.1491); 127 loses 0.6% of its worst case through the pair bias (0.1182 -> 0.1104).
SCALAR_MOVED = {
    "norm-seed127": [({"op": "softmax", "rows": 1061, "cols": 8552, "dtype": "float16"},
                      _k("multipass", 256, 8, 0), _k("persistent", 512, 8, 32), 0.994, 0.948)],
    "norm-seed128": [({"op": "layernorm", "rows": 596, "cols": 9464, "dtype": "float32"},
                      _k("multipass", 256, 4, 0), _k("persistent", 256, 4, 64), 0.927, 0.988)],
    "heuristics-seed136": [({"op": "softmax", "rows": 1748, "cols": 5723, "dtype": "float32"},
                            _k("multipass", 512, 1, 0), _k("persistent", 512, 1, 16), 0.792, 1.0)],
    "norm-seed137": [({"op": "layernorm", "rows": 42599, "cols": 319, "dtype": "float32"},
                      _k("persistent", 32, 1, 16), _k("persistent", 64, 1, 8), 1.0, 0.957)],
    "norm-seed138": [({"op": "layernorm", "rows": 3744, "cols": 781, "dtype": "float32"},
                      _k("persistent", 64, 1, 16), _k("persistent", 128, 1, 8), 0.993, 1.0)],
    "norm-seed139": [({"op": "layernorm", "rows": 24025, "cols": 289, "dtype": "float32"},
                      _k("persistent", 32, 1, 16), _k("persistent", 64, 1, 8), 1.0, 0.947)],
    "norm-seed141": [({"op": "softmax", "rows": 212, "cols": 25216, "dtype": "float32"},
                      _k("persistent", 1024, 4, 32), _k("multipass", 1024, 4, 0), 0.803, 1.0)],
}
# worst case live -> now where it moves (elsewhere it is the live one)
SCALAR_WORST = {"norm-seed127": (0.9543, 0.9479), "heuristics-seed136": (0.7917, 0.9453),
                "norm-seed141": (0.8029, 0.8816)}


@pytest.mark.parametrize("run", [r for r, k in RUNS if k == "normalization"])
def test_timing_every_scalar_load_kernel_at_its_count_mends_136_and_moves_only_these_choices(run):
    live, res = _live(run, "normalization"), _replay(run, "normalization")
    moved = [(n["descriptor"], o["heuristic"], n["heuristic"], round(o["best_us"] / o["heuristic_us"], 3),
              round(n["best_us"] / n["heuristic_us"], 3))
             for o, n in zip(live["rows"], res["rows"]) if o["heuristic"] != n["heuristic"]]
    assert moved == SCALAR_MOVED.get(run, [])
    if run == "heuristics-seed136":
        assert moved[0][2] == MISSES[(run, "normalization")][2]  # the measured best
    was, now = (live["summary"]["heuristic"]["worst_efficiency"], res["summary"]["heuristic"]["worst_efficiency"])
    assert (round(was, 4), round(now, 4)) == SCALAR_WORST.get(run, (round(was, 4), round(was, 4)))
    assert now >= 0.85 or was < 0.85  # no worst case falls below the bar
    assert res["summary"]["heuristic"]["geomean_efficiency"] >= 0.97


@pytest.mark.parametrize("run,kind", RUNS)
def test_every_bar_held_live_but_four_worst_cases(run, kind):
    """Issue 14's bars as the live files have them (on the problems evaluated: seed 124's normalization
    stopped at 79): geomean >= 0.97 and above the static baseline's, no choice failed, predictor median
    within 5% memory-bound and 10% overall, and worst >= 0.85 but on the four problems of MISSES."""
    live = _live(run, kind)
    miss = MISSES.get((run, kind))
    below = [r for r in live["rows"] if r["best_us"] / r["heuristic_us"] < 0.85]
    assert [(r["descriptor"], r["heuristic"], r["best"]) for r in below] == ([miss[:3]] if miss else [])
    if miss:
        assert below[0]["best_us"] / below[0]["heuristic_us"] == pytest.approx(miss[3], abs=5e-4)
    h, b = live["summary"]["heuristic"], live["summary"]["baseline"]
    assert h["choice_failed"] == 0 and live["failed"] == 0, h
    assert h["geomean_efficiency"] >= 0.97 and h["geomean_efficiency"] > b["geomean_efficiency"], (h, b)
    assert live["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05, live["prediction"]
    assert live["prediction"]["all"]["median_abs_rel_error"] <= 0.10, live["prediction"]


def test_the_model_error_band_held_the_choices_on_runs_it_was_not_fitted_on():
    """pi95 (calib/heuristics/model_error.json, fitted on older recordings) live: 196 of 200 split-K
    choices, 199 of 200 pointwise, 2215 of 2379 normalization (93.1%; 92.8% in sample). Normalization's
    choice is the candidate the model ranks fastest, so its misses lean slow, as in sample."""
    got = {}
    for run, kind in RUNS:
        k, n = _inside(_live(run, kind)["rows"])
        got[kind] = (got.get(kind, (0, 0))[0] + k, got.get(kind, (0, 0))[1] + n)
    assert got == {"pointwise": (199, 200), "normalization": (2215, 2379), "matmul_splitk": (196, 200)}


LEARNED_P90 = {124: {"cupy_multiply": 0.0284, "cupy_sum": 0.0425, "cupy_softmax_rows4096": 0.0279},
               136: {"cupy_multiply": 0.0265, "cupy_sum": 0.0450, "cupy_softmax_rows4096": 0.0281}}


@pytest.mark.parametrize("seed", EVERY_KIND)
def test_the_learned_predictor_refits_as_it_ran_and_met_its_bars(seed):
    """Each op learned from three sizes, predicted at the other 34: today's fit with the shipped profile
    predicts what the run did, and every op met p90 <= 5% and worst <= 20% (cupy.sum 4.25% and 4.50%,
    where it had been over 5% on about half of the H200 runs)."""
    d = json.loads(gzip.decompress((FOLDER / f"heuristics-seed{seed}" / "heuristics-learned.json.gz").read_bytes()))
    prof = load_profile(PROFILE, device=None, software=None)
    assert d["learning_points_bytes"] == L.learning_points(L.default_sizes(prof)) and len(d["sizes_bytes"]) == 34
    for op, o in d["ops"].items():
        pred = [L.fit(op, d["learning_points_bytes"], o["learning_samples_us"], prof).predict_us(b)
                for b in d["sizes_bytes"]]
        assert pred == pytest.approx(o["predicted_us"], rel=1e-6), (op, MOVED)
        err = learned_eval._errors(pred, o["measured_us"])
        assert err["p90"] == pytest.approx(LEARNED_P90[seed][op], abs=1e-4), (op, err)
        assert err["p90"] <= 0.05 and err["worst"] <= 0.20, (op, err)
