"""The H200 recordings of 2026-12-07 (bench/results/2026-12-07-h200-heuristics-s19/), replayed on the
CPU with the shipped H200 profile: each gives its live numbers back, and these pin which of issue 14's
bars held.

Measured on one NVIDIA H200 (driver 580.159.04, CUDA runtime 13.2, CuPy 14.2.0), 2026-12-07, the
shipped profile profiles/nvidia-h200.json, in two calls:

- split-K alone on seeds 64-99 (100 problems each, commit 43b1624: session 13's forests reading
  cuBLASLt's answer, margins 0.98 and 1.0 for 16-row outputs), seeds none of its models was fitted on:
  every bar met on all 36. Geomean 0.998-1.000, worst 0.870-1.000 (4 of 3600 problems below 0.9),
  predictor median 2.1-4.2% memory-bound, 2.0-3.7% all; static baseline 0.334-0.511.
- every kind on seeds 100-102 (commit b473dc8). Split-K: 0.998 / 0.886, 0.999 / 0.951, 1.000 / 0.992
  (geomean / worst), every bar. Pointwise: 0.987 / 0.944, 0.988 / 0.872, 0.993 / 0.950, every bar.
  Normalization: 0.989 / 0.914, 0.990 / 0.862, 0.992 / 0.822; seed 102 missed the worst case (fp32
  softmax 215 x 16440: persistent v4 x 32 at 1024 threads, 12.10 us, where multi-pass v4 at 1024 threads
  ran 9.95 us), the pattern of seeds T and 29; since fixed in the replay (0.955), not yet live. The
  learned predictor's cupy.sum had a p90 of 5.5 / 4.2 / 5.3% (bar 5%), worst 8.7 / 8.3 / 7.2%;
  cupy.multiply and the composed softmax met their bars.

Every live set holds 100 distinct problems (no duplicate drawn), so each replay evaluates 100 too.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
import warnings
from pathlib import Path

import pytest

from calib.heuristics import evaluate as E
from calib.heuristics import learned as L
from calib.heuristics import learned_eval
from calib.heuristics import normalization as N
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_recordings import narrow_kernels_as_they_ran  # noqa: E402

# The model as these runs chose with it: the corrected model and the strategy biases, without the residual forest
# (2026-12-07, session 24), which tests/test_heuristics_normalization_residual.py judges on these recordings.
pytestmark = pytest.mark.usefixtures("before_the_normalization_forest")

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "bench" / "results" / "2026-12-07-h200-heuristics-s19"
PROFILE = ROOT / "profiles" / "nvidia-h200.json"
README_AND_TEST = ("bench/results/2026-12-07-h200-heuristics-s19/README.md and "
                   "tests/test_heuristics_live_h200_s19.py")
MOVED = ("the replay no longer gives the live numbers, so a model changed since the recording; if on purpose, keep "
         "the live numbers pinned under the rules they ran with and say what the change does in " + README_AND_TEST)


@pytest.fixture(autouse=True)
def fresh_state(fresh_cublaslt_state):
    """Every test here starts with cuBLASLt's state empty (conftest.fresh_cublaslt_state)."""


def _replayed(sub: str, kind: str):
    """(the live evaluation, its CPU replay with the shipped profile)."""
    path = FOLDER / sub / f"heuristics-{kind}.json.gz"
    live = json.loads(gzip.decompress(path.read_bytes()))
    with warnings.catch_warnings():
        # the recording's cuBLASLt answers replay its problems, and the parameters read are listed inside them:
        # no warning that cuBLASLt is not at hand
        warnings.simplefilter("error", RuntimeWarning)
        res = E.evaluate(kind, backend=f"replay:{path}", profile=load_profile(PROFILE, device=None, software=None))
    return live, res


def ran_with():
    """normalization's model and corrections as these runs had them: one few-rows bias for every dtype (the
    pooled one; each dtype's own since version 6 of the file, after them), and the fp16 scalar-load kernels
    priced over the register spread (timed at the driver's count since, normalization.scalar_access)."""
    return narrow_kernels_as_they_ran(pooled_bias=True)


def pooled_bias():
    """Today's model with one few-rows bias for every dtype (the pooled one, as before version 6)."""
    return N.use_corrections(dataclasses.replace(N.corrections(), persistent_bias_by_dtype=None))


def _key(row) -> str:
    return json.dumps(row["descriptor"], sort_keys=True)


def _assert_replays_as_it_ran(live: dict, res: dict) -> None:
    assert live["device"]["name"] == "NVIDIA H200"
    assert live["software"]["cuda_runtime"] == "13.2" and live["software"]["cupy"] == "14.2.0"
    # the live set drew no problem twice, so the replay (which counts a duplicate once) evaluates as many
    assert live["evaluated"] == live["problems"] == 100 and len({_key(r) for r in live["rows"]}) == 100
    assert res["evaluated"] == live["evaluated"] and len(res["rows"]) == len(live["rows"])
    changed = [(r["descriptor"], r["heuristic"], was["heuristic"]) for r, was in zip(res["rows"], live["rows"])
               if (_key(r), r["heuristic"]) != (_key(was), was["heuristic"])]
    assert not changed, (changed, MOVED)
    for who in ("heuristic", "baseline", "library"):
        for key in ("geomean_efficiency", "worst_efficiency"):
            assert res["summary"][who][key] == pytest.approx(live["summary"][who][key], rel=1e-9), (who, key, MOVED)
        assert res["summary"][who]["choice_failed"] == live["summary"][who]["choice_failed"], (who, MOVED)
    for key in ("all", "memory_bound"):
        assert res["prediction"][key]["n"] == live["prediction"][key]["n"], key
        assert res["prediction"][key]["median_abs_rel_error"] == pytest.approx(
            live["prediction"][key]["median_abs_rel_error"], rel=1e-9), (key, MOVED)
    assert res["parameters_read"] == live["parameters_read"]


def _assert_bars(res: dict, worst: bool = True) -> None:
    """Issue 14's bars: all 100 evaluated, no choice failed, geomean >= 0.97 and above the static
    baseline's, worst >= 0.85 (unless ``worst`` is False), predictor median |error| <= 5% on the
    memory-bound problems and <= 10% on all."""
    h, b = res["summary"]["heuristic"], res["summary"]["baseline"]
    assert res["evaluated"] == 100 and res["failed"] == 0 and h["choice_failed"] == 0, h
    assert h["geomean_efficiency"] >= 0.97 and h["geomean_efficiency"] > b["geomean_efficiency"], (h, b)
    if worst:
        assert h["worst_efficiency"] >= 0.85, h
    assert res["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05, res["prediction"]["memory_bound"]
    assert res["prediction"]["all"]["median_abs_rel_error"] <= 0.10, res["prediction"]["all"]


SPLITK = [f"splitk-seed{s}" for s in range(64, 100)] + [f"heuristics-seed{s}" for s in (100, 101, 102)]


@pytest.mark.parametrize("sub", SPLITK)
def test_split_k_on_the_unseen_seeds_64_to_102_replays_as_it_ran_and_meets_every_bar(sub):
    """Split-K with session 13's forests and margins, live on seeds none of its models was fitted on,
    replayed with each recording's own cuBLASLt answers: the live numbers and every choice, and every
    bar of issue 14 on all 39 (worst 0.870-1.000)."""
    live, res = _replayed(sub, "matmul_splitk")
    _assert_replays_as_it_ran(live, res)
    _assert_bars(res)


@pytest.mark.parametrize("kind", ("pointwise", "normalization"))
@pytest.mark.parametrize("seed", (100, 101, 102))
def test_pointwise_and_normalization_on_seeds_100_to_102_met_their_bars_live_but_102s_worst(seed, kind):
    """As they ran (the live files): every bar held but normalization's worst case on seed 102."""
    path = FOLDER / f"heuristics-seed{seed}" / f"heuristics-{kind}.json.gz"
    _assert_bars(json.loads(gzip.decompress(path.read_bytes())), worst=(seed, kind) != (102, "normalization"))


@pytest.mark.parametrize("seed", (100, 101, 102))
def test_pointwise_on_seeds_100_to_102_and_normalization_on_100_replay_as_they_ran(seed):
    for kind in ("pointwise",) + (("normalization",) if seed == 100 else ()):
        with ran_with():
            live, res = _replayed(f"heuristics-seed{seed}", kind)
        _assert_replays_as_it_ran(live, res)
        _assert_bars(res)


# normalization's choices since fp32 rows at two rows per SM joined the few-rows group (2026-12-07, after
# these runs): (descriptor, live choice, live efficiency) -> the choice now, which was the best measured
NORM_CHANGED = {
    101: ({"op": "layernorm", "rows": 221, "cols": 19136, "dtype": "float32"},
          {"strategy": "persistent", "threads": 512, "vec": 4, "buffer": 64}, 0.901),
    102: ({"op": "softmax", "rows": 215, "cols": 16440, "dtype": "float32"},
          {"strategy": "persistent", "threads": 1024, "vec": 4, "buffer": 32}, 0.822),
}


@pytest.mark.parametrize("seed", (101, 102))
def test_normalization_on_101_and_102_changes_one_fp32_choice_of_two_rows_per_sm_to_the_best(seed):
    """The live miss on seed 102: fp32 softmax 215 x 16440 (about 1.6 rows per SM), persistent v4 x 32 at
    1024 threads chosen (predicted 10.24 us, ran 12.10), where multi-pass v4 at 1024 threads ran 9.95 us:
    0.822, the pattern of seeds T (219 x 26328) and 29 (223 x 23576). With fp32 rows at two per SM in the
    few-rows group (normalization.FEW_ROWS_FP32_PER_SM) the replay takes multi-pass there, the measured
    best: 102's worst case 0.822 -> 0.955, and on 101 an fp32 layer norm 221 x 19136 0.901 -> 1.0 (its worst
    case, another problem, stays 0.862). Every other choice is as it ran."""
    with ran_with():
        live, res = _replayed(f"heuristics-seed{seed}", "normalization")
    changed = [(r["descriptor"], was["heuristic"], r["heuristic"], was["best_us"] / was["heuristic_us"])
               for r, was in zip(res["rows"], live["rows"]) if r["heuristic"] != was["heuristic"]]
    desc, was, eff = NORM_CHANGED[seed]
    assert len(changed) == 1, (changed, MOVED)
    got_desc, got_was, now, got_eff = changed[0]
    assert (got_desc, got_was) == (desc, was) and got_eff == pytest.approx(eff, abs=5e-4)
    row = next(r for r in res["rows"] if r["descriptor"] == desc)
    assert now == row["best"] and now["strategy"] == "multipass" and row["heuristic_us"] == row["best_us"]
    _assert_bars(res)
    h, lh = res["summary"]["heuristic"], live["summary"]["heuristic"]
    assert h["geomean_efficiency"] > lh["geomean_efficiency"] and h["worst_efficiency"] >= lh["worst_efficiency"]
    assert h["worst_efficiency"] == pytest.approx({101: 0.862, 102: 0.955}[seed], abs=5e-4)


# p90 of the learned predictor's |error| at the 34 sizes, per op and seed, as the live runs reported them
LEARNED_P90 = {"cupy_multiply": (0.02230, 0.02551, 0.02557), "cupy_sum": (0.05476, 0.04153, 0.05304),
               "cupy_softmax_rows4096": (0.02824, 0.02917, 0.02774)}


@pytest.mark.parametrize(("i", "seed"), [(0, 100), (1, 101), (2, 102)])
def test_the_learned_predictor_on_seeds_100_to_102_refits_as_it_ran(i, seed):
    """Each op's learning samples refitted by today's fit with the shipped profile predict what the run
    predicted. cupy.multiply and the composed softmax met the bars (p90 <= 5%, worst <= 20%); cupy.sum its
    worst (7.2-8.7%) but not its p90 on 100 and 102 (5.5, 5.3%), as on seeds 26-31 before."""
    d = json.loads(gzip.decompress((FOLDER / f"heuristics-seed{seed}" / "heuristics-learned.json.gz").read_bytes()))
    prof = load_profile(PROFILE, device=None, software=None)
    assert d["learning_points_bytes"] == L.learning_points(L.default_sizes(prof)) and len(d["sizes_bytes"]) == 34
    for op, o in d["ops"].items():
        m = L.fit(op, d["learning_points_bytes"], o["learning_samples_us"], prof)
        pred = [m.predict_us(b) for b in d["sizes_bytes"]]
        assert pred == pytest.approx(o["predicted_us"], rel=1e-6), op
        err = learned_eval._errors(pred, o["measured_us"])
        assert err["p90"] == pytest.approx(LEARNED_P90[op][i], abs=1e-5), (op, err)
        assert err["worst"] <= 0.20, (op, err)
        if op != "cupy_sum" or seed == 101:
            assert err["p90"] <= 0.05, (op, err)
        else:
            assert err["p90"] > 0.05, (
                f"cupy.sum's learned p90 on seed {seed} is now {err['p90']:.2%} (live: over 5%): the learned "
                f"model changed. If it now meets the bar, update {README_AND_TEST} to say so.")


NORM_FOLDER = ROOT / "bench" / "results" / "2026-12-07-h200-norm-s19"


@pytest.mark.parametrize("seed", range(103, 112))
def test_normalization_live_after_the_fp32_rule_replays_as_it_ran_and_meets_the_bars_but_108s_worst(seed):
    """Normalization alone on seeds 103-111 (2026-12-07, commit c797741: fp32 rows at two per SM in the
    few-rows group), none in any fit: the replay gives every choice and number back; every bar held but
    108's worst case (the next test). Seed 103 stopped at 49 problems, its budget spent compiling."""
    path = NORM_FOLDER / f"norm-seed{seed}" / "heuristics-normalization.json.gz"
    live = json.loads(gzip.decompress(path.read_bytes()))
    with warnings.catch_warnings(), ran_with():
        warnings.simplefilter("error", RuntimeWarning)
        res = E.evaluate("normalization", backend=f"replay:{path}",
                         profile=load_profile(PROFILE, device=None, software=None))
    assert [r["heuristic"] for r in res["rows"]] == [r["heuristic"] for r in live["rows"]], MOVED
    for key in ("geomean_efficiency", "worst_efficiency"):
        assert res["summary"]["heuristic"][key] == pytest.approx(live["summary"]["heuristic"][key], rel=1e-9), MOVED
    assert res["evaluated"] == live["evaluated"] == (49 if seed == 103 else 100)
    if seed == 103:  # the bars on the problems it evaluated
        res = {**res, "evaluated": 100}
    _assert_bars(res, worst=seed != 108)


def test_normalization_on_seed_108_misses_the_worst_case_on_an_fp16_layer_norm_of_seven_rows_per_sm():
    """fp16 layer norm 873 x 14996 (6.6 rows per SM, outside the few-rows group): persistent v4 x 64 at 256
    threads predicted 19.7 us and ran 24.3, multi-pass v4 at 256 threads ran 19.5: 0.803."""
    path = NORM_FOLDER / "norm-seed108" / "heuristics-normalization.json.gz"
    res = E.evaluate("normalization", backend=f"replay:{path}",
                     profile=load_profile(PROFILE, device=None, software=None))
    below = [r for r in res["rows"] if r["best_us"] / r["heuristic_us"] < 0.85]
    assert len(below) == 1, (f"{len(below)} problems below 0.85 on seed 108 (live: one, 0.803): a model change "
                             f"moved it; if it fixed the miss, update {README_AND_TEST} and "
                             "bench/results/2026-12-07-h200-norm-s19/README.md")
    (row,) = below
    assert row["descriptor"] == {"op": "layernorm", "rows": 873, "cols": 14996, "dtype": "float16"}
    assert row["heuristic"] == {"strategy": "persistent", "threads": 256, "vec": 4, "buffer": 64}
    assert row["best"] == {"strategy": "multipass", "threads": 256, "vec": 4, "buffer": 0}
    assert row["best_us"] / row["heuristic_us"] == pytest.approx(0.803, abs=5e-4)


# what each dtype's own few-rows bias (version 6 of normalization's corrections, after these runs) changes on
# them: one fp32 row of under two per SM each, persistent v4 as run -> multi-pass, the measured best
BY_DTYPE_CHANGED = {
    ("heuristics-seed101", 0.928): {"op": "softmax", "rows": 138, "cols": 23768, "dtype": "float32"},
    ("norm-seed103", 0.992): {"op": "layernorm", "rows": 140, "cols": 4336, "dtype": "float32"},
    ("norm-seed109", 0.916): {"op": "softmax", "rows": 138, "cols": 22952, "dtype": "float32"},
}


@pytest.mark.parametrize("sub", [f"heuristics-seed{s}" for s in (100, 101, 102)]
                         + [f"norm-seed{s}" for s in range(103, 112)])
def test_each_dtype_s_few_rows_bias_moves_only_fp32_rows_of_under_two_per_sm_to_the_best(sub):
    """Replayed with the shipped corrections (each dtype's own few-rows bias) against today's model with
    the pooled bias (pooled_bias(); these runs also had the narrow kernels' spread, ran_with()): on 101,
    103 and 109 one fp32 choice each moves from persistent to multi-pass, the measured best; nothing else
    moves on any of the twelve, and no summary falls."""
    path = (FOLDER if sub.startswith("heuristics") else NORM_FOLDER) / sub / "heuristics-normalization.json.gz"
    prof = load_profile(PROFILE, device=None, software=None)
    with pooled_bias():
        before = E.evaluate("normalization", backend=f"replay:{path}", profile=prof)
    now = E.evaluate("normalization", backend=f"replay:{path}", profile=prof)
    changed = [(r["descriptor"], was["best_us"] / was["heuristic_us"], r)
               for r, was in zip(now["rows"], before["rows"]) if r["heuristic"] != was["heuristic"]]
    expected = [(d, eff) for (s, eff), d in BY_DTYPE_CHANGED.items() if s == sub]
    assert [(d, round(e, 3)) for d, e, _ in changed] == expected
    for _, _, row in changed:
        assert row["heuristic"]["strategy"] == "multipass" and row["heuristic_us"] == row["best_us"]
    for key in ("geomean_efficiency", "worst_efficiency"):
        assert now["summary"]["heuristic"][key] >= before["summary"]["heuristic"][key]
