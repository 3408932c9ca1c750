"""Split-K's fp32 forests: log(recorded / model) for split 1 (splitk.FP32_RECORDED_FILE) and for every
split s > 1 (splitk.FP32_SPLITS_FILE), on the shape and cuBLASLt's answer, fitted on the training
evaluations and the focused ones (fp32 outputs of at most 64 rows), and the margins chosen with them.
Checked as files, held out, and on the live seeds none was fitted on.

Measured (CPU replays of H200 recordings, each with its own cuBLASLt answers as oracle; 2026-12-06):
held out one group at a time (bench/splitk_margins.py, bench/results/2026-12-06-h200-splitk-focus/
margins-held-out.md: each 1000-problem training seed, seeds 42-54, each focused seed), problems below
0.85 of the best went from 12 of 2073 seeded fp32 problems (session 12's forest, in sample there) and 53
of 3000 focused ones (out of sample) to 1 and 3 at the margins chosen (0.98, and 1.0 for 16-row outputs
timed from cuBLAS's kernel); geomean 0.9959 -> 0.9987 and 0.9848 -> 0.9954. On seeds 55-63 (live in
session 12, in no fit): worst case 0.838-1.000 -> 0.882-0.980, every bar of issue 14 met on all nine;
on the 29 recordings A-25 (in no fit, every probe as oracle) below 0.85 4 -> 0, worst 0.887-1.000.

Session 12's forest (version 1: the shape alone, fitted on the training evaluations, margins 0.90 and
0.86; conftest.session12_splitk) is kept beside the runs it made, which replay as they ran.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import warnings
from pathlib import Path

import pytest

from calib.heuristics import cublaslt as CL
from calib.heuristics import evaluate as E
from calib.heuristics import splitk as SK
from calib.heuristics.predictor import q_of
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import fit_splitk_forests  # noqa: E402
from conftest import SESSION12_FP32_FOREST  # noqa: E402
from h200_recordings import FOCUS, FOLDERS, TRAINING, R, assert_meets_every_bar, read_json, recordings  # noqa: E402

ROOT = R.parents[1]


@pytest.fixture(autouse=True)
def fresh_state(fresh_cublaslt_state):
    """Every test here starts with cuBLASLt's state empty (conftest.fresh_cublaslt_state)."""


FILES = {"split1": (SK.FP32_RECORDED_FILE, SK.load_fp32_recorded, SK.fit_fp32_recorded_trees, SK.FP32_SPLIT1_FEATURES),
         "splits": (SK.FP32_SPLITS_FILE, SK.load_fp32_splits, SK.fit_fp32_splits_trees, SK.FP32_SPLITS_FEATURES)}


@pytest.fixture(scope="module")
def recorded():
    """(rows, q, oracle) of every recording both forests are fitted on, by name."""
    F = fit_splitk_forests
    return dict(zip([*TRAINING, *FOCUS], F.loaded_with_answers(F.fp32_recordings())))


@pytest.mark.parametrize("which", FILES)
def test_each_forest_file_is_the_fit_of_its_recordings(which, recorded):
    """The file names the training and focused evaluations and its first trees are their fit (each tree
    is fitted on its own bootstrap sample, drawn in turn: the first two are refitted here, bench/
    fit_splitk_forests.py --check refits all fifty)."""
    path, load, fit, features = FILES[which]
    doc = load()
    assert doc["device"] == "NVIDIA H200" and doc["bootstrap_seed"] == 0 and len(doc["trees"]) == SK.FOREST_TREES
    assert doc["recordings"] == fit_splitk_forests.fp32_recordings()
    assert len(doc["recordings"]) == len(TRAINING) + len(FOCUS) and doc["features"] == list(features)
    assert json.loads(json.dumps(fit(list(recorded.values()), n_trees=2))) == doc["trees"][:2]
    used = set()

    def walk(node):
        if "feature" in node:
            used.add(node["feature"])
            walk(node["le"]), walk(node["gt"])
    for t in doc["trees"]:
        walk(t)
    assert used & set(SK.LT_FEATURES), "cuBLASLt's answer is what the shape did not tell"


@pytest.mark.parametrize("which", FILES)
@pytest.mark.parametrize(("edit", "message"), [
    ({"format": SK.FP16_SPLIT1_FORMAT}, "format"), ({"version": 99}, "version"),
    ({"version": 0, "tree": {"log_ratio": 0}}, "version"),  # no one-tree version to read forward
    ({"software": None}, "software"), ({"software": {"cupy": "14.2.0"}}, "software"),
    ({"trees": []}, "trees"), ({"trees": [{"log_ratio": "0"}]}, "log_ratio"), ({"recordings": []}, "recordings"),
    ({"features": ["log2_m"]}, "features"), ({"bootstrap_seed": 1.5}, "bootstrap_seed"),
    ({"trees": [{"feature": "lt_colour", "threshold": 0, "le": {"log_ratio": 0}, "gt": {"log_ratio": 0}}]},
     "feature"),
])
def test_each_forest_file_is_checked_field_by_field(tmp_path, which, edit, message):
    path, load, _fit, _features = FILES[which]
    p = tmp_path / "f.json"
    p.write_text(json.dumps(dict(load(), **edit)))
    with pytest.raises(SK.HeuristicError, match=message):
        load(p)


def test_a_version_1_split1_forest_is_read_forward_over_the_shape_alone(tmp_path):
    """Session 12's file (version 1, the six shape features) loads as the current version over its own
    features, recording no software; a version 2 or 3 file must name Lt's features too."""
    doc = SK.load_fp32_recorded(SESSION12_FP32_FOREST)
    assert doc["version"] == SK.FP32_RECORDED_VERSION and doc["features"] == list(SK.SPLIT1_FEATURES)
    assert doc["software"] is None
    for version, software in ((2, None), (3, {"cuda_runtime": "13.2", "cupy": "14.2.0"})):
        p = tmp_path / f"v{version}-shape-only.json"
        p.write_text(json.dumps(dict(doc, version=version, software=software)))
        with pytest.raises(SK.HeuristicError, match="features"):
            SK.load_fp32_recorded(p)


def test_the_forests_apply_on_their_gpus_architecture_only():
    q = q_of(load_profile(R / TRAINING["1000"][2], device=None, software=None))
    d = SK.SplitKDescriptor(16, 816, 6656, "float32")
    with warnings.catch_warnings(), CL.use_oracle({}):
        warnings.simplefilter("ignore", RuntimeWarning)
        base1, base8 = SK.split1_fp32_us(q, 16, 816, 6656), SK.split_path_us(d, 8, q)
        f1, f8 = SK.fp32_recorded_log_factor(q, 16, 816, 6656), SK.fp32_splits_log_factor(q, 16, 816, 6656, 8)
        assert f1 != 0.0 and SK.model_us(d, {"split": 1}, q) == pytest.approx(base1 * math.exp(f1))
        assert f8 != 0.0 and SK.model_us(d, {"split": 8}, q) == pytest.approx(base8 * math.exp(f8))
        q.device_name = "NVIDIA H100 80GB HBM3"  # compute capability 9.0, as the H200
        assert SK.fp32_recorded_log_factor(q, 16, 816, 6656) == f1
        assert SK.fp32_splits_log_factor(q, 16, 816, 6656, 8) == f8
        q.device_arch = "8.0"
        assert SK.fp32_recorded_log_factor(q, 16, 816, 6656) == 0.0 == SK.fp32_splits_log_factor(q, 16, 816, 6656, 8)
        assert SK.model_us(d, {"split": 1}, q) == base1 and SK.model_us(d, {"split": 8}, q) == base8


def test_the_simulated_device_is_not_corrected():
    from calib.backends.sim import SimBackend
    from calib.heuristics.simdevice import sim_profile

    q = q_of(sim_profile(SimBackend(seed=2)))
    assert SK.fp32_recorded_log_factor(q, 16, 816, 6656) == 0.0 == SK.fp32_splits_log_factor(q, 16, 816, 6656, 8)


def _replay(path, profile):
    res = E.evaluate("matmul_splitk", backend=f"replay:{path}", profile=profile)
    eff = [r["best_us"] / r["heuristic_us"] for r in res["rows"]]
    mb32 = [abs(r["predicted_us"] / r["heuristic_us"] - 1) for r in res["rows"]
            if r["memory_bound"] and r["descriptor"]["dtype"] == "float32"]
    return {"below_085": sum(e < 0.85 for e in eff), "below_09": sum(e < 0.9 for e in eff),
            "geomean": math.exp(statistics.fmean(math.log(e) for e in eff)), "mb32": statistics.median(mb32)}


def test_a_focused_seed_held_out_loses_fewer_problems_than_with_session_12s_forest(monkeypatch, recorded):
    """f2002 (1000 fp32 problems of at most 64 rows) replayed with both forests fitted without it (ten
    trees each, to keep the test short) and the shipped margins, against session 12's forest and
    margins (fitted on neither focused seed): fewer problems below 0.85 and below 0.9, a higher geomean,
    a memory-bound fp32 median no higher."""
    monkeypatch.setitem(SK._fp16_split1, "doc", None)  # no fp16 here
    rest = [v for n, v in recorded.items() if n != "f2002"]
    path, prof = (ROOT / p for p in fit_splitk_forests.fp32_recordings()[[*TRAINING, *FOCUS].index("f2002")])
    profile = load_profile(prof, device=None, software=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name, (_path, load, fit, _f) in FILES.items():
            cache = SK._fp32_recorded if name == "split1" else SK._fp32_splits
            monkeypatch.setitem(cache, "doc", dict(load(), trees=fit(rest, n_trees=10)))
        new = _replay(path, profile)
        monkeypatch.setitem(SK._fp32_recorded, "doc", SK.load_fp32_recorded(SESSION12_FP32_FOREST))
        monkeypatch.setitem(SK._fp32_splits, "doc", None)
        monkeypatch.setattr(SK.margins, "SPLIT_MARGIN", 0.90)
        monkeypatch.setattr(SK.margins, "SPLIT_MARGIN_FROM_CHOICE", 0.86)
        old = _replay(path, profile)
    assert new["below_085"] < old["below_085"] and new["below_09"] < old["below_09"], (new, old)
    assert new["geomean"] > old["geomean"] and new["mb32"] <= old["mb32"], (new, old)


S12C4 = "2026-12-04-h200-heuristics-s12c4"


@pytest.mark.parametrize("seed", range(55, 64))
def test_the_live_seeds_after_the_refit_replay_as_they_ran_and_meet_the_bars(seed, session12_splitk):
    """Seeds 55-63 (session 12 call 4, split-K alone, unseen when they ran with the forests of 42-54 in
    the fit): replayed with their own cuBLASLt answers, the live numbers; every bar of issue 14 met on
    each but 63's worst case (0.838: fp32 32 x 2928 x 29184, split 1 against split 16)."""
    path = R / S12C4 / f"splitk-seed{seed}" / "heuristics-matmul_splitk.json.gz"
    live = read_json(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = E.evaluate("matmul_splitk", backend=f"replay:{path}",
                         profile=load_profile(ROOT / "profiles" / "nvidia-h200.json", device=None, software=None))
    for key in ("geomean_efficiency", "worst_efficiency"):
        assert res["summary"]["heuristic"][key] == pytest.approx(live["summary"]["heuristic"][key], rel=1e-9)
    for key in ("all", "memory_bound"):
        assert res["prediction"][key]["median_abs_rel_error"] == pytest.approx(
            live["prediction"][key]["median_abs_rel_error"], rel=1e-9)
    assert [r["heuristic"] for r in res["rows"]] == [r["heuristic"] for r in live["rows"]]
    h, b = res["summary"]["heuristic"], res["summary"]["baseline"]
    assert res["evaluated"] == 100 and h["choice_failed"] == 0
    assert h["geomean_efficiency"] >= 0.97 and h["geomean_efficiency"] > b["geomean_efficiency"]
    assert res["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05
    assert res["prediction"]["all"]["median_abs_rel_error"] <= 0.10
    assert (h["worst_efficiency"] >= 0.85) == (seed != 63), h["worst_efficiency"]


@pytest.mark.parametrize("seed", range(55, 64))
def test_the_live_seeds_no_forest_was_fitted_on_meet_every_bar_with_the_new_forests(seed):
    """Seeds 55-63 replayed with the shipped forests and margins (neither fitted on them) and their own
    cuBLASLt answers: every bar of issue 14 on each, 63's worst case included (0.838 -> 0.924)."""
    path = R / S12C4 / f"splitk-seed{seed}" / "heuristics-matmul_splitk.json.gz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = E.evaluate("matmul_splitk", backend=f"replay:{path}",
                         profile=load_profile(ROOT / "profiles" / "nvidia-h200.json", device=None, software=None))
    assert res["evaluated"] == 100
    assert_meets_every_bar(res)


@pytest.fixture(scope="module")
def every_probe():
    """cuBLASLt's answers from every probe of 2026-12-02 (tests/test_heuristics_splitk_serial.PROBES):
    the older recordings were made before evaluations recorded their own."""
    from test_heuristics_splitk_serial import PROBES

    out = {}
    for p in PROBES:
        out.update(CL.load_probe(p))
    return out


@pytest.mark.parametrize("name", list(FOLDERS))
def test_the_older_recordings_none_of_the_forests_saw_meet_every_bar(name, every_probe):
    """The 29 recordings A-25 (seeds 0-25, 2026-12-01/02), in neither forest's fit, replayed with every
    probe as oracle: every bar of issue 14 for split-K on each. Measured 2026-12-06: worst 0.887-1.000
    (session 12's forest and margins: 0.795-1.000, four below 0.85: H, M, R, 25), geomean 0.996-1.000,
    memory-bound predictor median 1.4-3.4%."""
    rec, prof = (R / p for p in recordings("matmul_splitk", names=name)[name])
    profile = load_profile(prof, device=None, software=None)
    with warnings.catch_warnings(), CL.use_oracle(every_probe):
        warnings.simplefilter("ignore", RuntimeWarning)
        res = E.evaluate("matmul_splitk", backend=f"replay:{rec}", profile=profile)
    assert_meets_every_bar(res)
