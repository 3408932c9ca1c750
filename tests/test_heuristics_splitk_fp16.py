"""Split-K's fp16 split-1 correction (splitk.FP16_SPLIT1_FILE): a bagged forest of log(recorded / plain
model) over the fp16 split-1 times of the H200 recordings and of three training evaluations, checked as
a file, held out one training seed at a time, and on the live seeds nothing was fitted on (26-41).

Measured (CPU replays of the H200 recordings of 2026-12-01..04): the single tree of session 11, fitted
on the 29 recordings A-25, took the memory-bound median of the live seeds 26-31 from 5.40-6.85% under
5%; live with it, seeds 32-41 scored 3.50-5.73% (35, 36, 38, 39 above 5%). The forest, fitted also on
split-K alone over seeds 1000-1002 (3000 problems, bench/results/2026-12-04-h200-splitk-training/)
and on seeds 42-54 (live with the first forests, then added), takes the fp16 rows of 32-41 from
3.21-6.13% to 2.03-4.24% with every other row as recorded.
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
from h200_recordings import FOLDERS, TRAINING, R, read_json, recordings  # noqa: E402
from test_heuristics_live_h200 import SHIPPED, UNSEEN  # noqa: E402

ROOT = R.parents[1]
CALL = R / "2026-12-02-h200-session6-call1"
PROBES = (ROOT / SK.LT_PROBE_FILE, R / "2026-12-02-h200-heuristics-s4c4/cublaslt-s4c4.json.gz",
          R / "2026-12-02-h200-heuristics-s5c5/cublaslt-s5c5.json.gz", CALL / "cublaslt-s6c1.json.gz",
          ROOT / SK.BATCHED_PROBE_FILE, CALL / "cublaslt-batched-s6c1.json.gz",
          R / "2026-12-02-h200-heuristics-s7c1/cublaslt-s7c1.json.gz",
          R / "2026-12-02-h200-heuristics-s7c1/cublaslt-batched-s7c1.json.gz")


@pytest.fixture(autouse=True)
def fresh_state(fresh_cublaslt_state):
    """Every test here starts with cuBLASLt's state empty (conftest.fresh_cublaslt_state)."""


@pytest.fixture(scope="module")
def oracle():
    out = {}
    for p in PROBES:
        out.update(CL.load_probe(p))
    return out


def _loaded(recs):
    return fit_splitk_forests.loaded(recs)


def test_the_correction_file_is_the_fit_of_the_recordings_it_names():
    doc = SK.load_fp16_split1()
    assert doc["device"] == "NVIDIA H200" and doc["version"] == SK.FP16_SPLIT1_VERSION and doc["bootstrap_seed"] == 0
    recorded = fit_splitk_forests.software_of(doc["recordings"])
    assert doc["software"] == recorded == {"cuda_runtime": "13.2", "cupy": "14.2.0"}
    assert doc["recordings"] == fit_splitk_forests.recordings()  # FOLDERS, then TRAINING
    assert len(doc["recordings"]) == len(FOLDERS) + len(TRAINING)
    assert len(doc["trees"]) == SK.FOREST_TREES
    assert SK.fit_fp16_split1_trees(_loaded(doc["recordings"])) == doc["trees"]


@pytest.mark.parametrize(("edit", "message"), [
    ({"format": SK.SPLIT1_FORMAT}, "format"), ({"version": 99}, "version"), ({"device": ""}, "device"),
    ({"software": None}, "software"), ({"software": {"cuda_runtime": "13.2"}}, "software"),
    ({"software": {"cuda_runtime": "13.2", "cupy": 14}}, "software"),
    ({"recordings": []}, "recordings"), ({"recordings": [["a.json"]]}, "recordings"),
    ({"recordings": "a.json"}, "recordings"), ({"trees": []}, "trees"), ({"trees": {"log_ratio": 0}}, "trees"),
    ({"trees": [{"log_ratio": 4.0}]}, "log_ratio"),
    ({"trees": [{"log_ratio": 0.1}, {"feature": "log2_m", "threshold": "1", "le": {"log_ratio": 0},
                                     "gt": {"log_ratio": 0}}]}, "threshold"),
    ({"trees": [{"feature": "log2_q", "threshold": 1, "le": {"log_ratio": 0}, "gt": {"log_ratio": 0}}]}, "feature"),
    ({"trees": [{"log_ratio": 0}] * (SK.FOREST_MAX_TREES + 1)}, "trees"),
    ({"bootstrap_seed": "0"}, "bootstrap_seed"), ({"bootstrap_seed": True}, "bootstrap_seed"),
    ({"version": 1}, "tree node"),  # version 1 holds one "tree": here there is none
])
def test_the_correction_file_is_checked_field_by_field(tmp_path, edit, message):
    doc = dict(SK._read_split1(SK.FP16_SPLIT1_FILE, "fp16 forest"), **edit)
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SK.HeuristicError, match=message):
        SK.load_fp16_split1(p)


def test_a_version_1_file_reads_as_a_forest_of_its_one_tree(tmp_path):
    """Session 11's file (one "tree", version 1) is read forward: the same corrections it gave."""
    shipped = SK._read_split1(SK.FP16_SPLIT1_FILE, "fp16 forest")
    doc = {k: v for k, v in shipped.items() if k not in ("trees", "bootstrap_seed")}
    tree = {"feature": "log2_k", "threshold": 12.0, "le": {"log_ratio": -0.05}, "gt": {"log_ratio": 0.08}}
    p = tmp_path / "v1.json"
    p.write_text(json.dumps(dict(doc, version=1, tree=tree)))
    got = SK.load_fp16_split1(p)
    assert got["version"] == SK.FP16_SPLIT1_VERSION and got["trees"] == [tree] and got["bootstrap_seed"] is None
    assert got["software"] is None  # version 1 did not record it: applied under any software, as then


@pytest.mark.parametrize(("text", "message"), [
    ('{"format": ' + "1" * 5000 + "}", "not JSON"),  # more digits than Python converts: a ValueError
    ("SHIPPED_WITH", "version"),
    ("SHIPPED_WITH", "log_ratio"),
    ("SHIPPED_WITH", "threshold"),
])
def test_a_number_python_cannot_take_or_an_unhashable_version_is_named_not_a_traceback(tmp_path, text, message):
    """A 5000-digit integer, a version of [] (unhashable: looked up among the older versions) and a leaf
    or threshold of 400 digits (math.isfinite overflows) had each escaped as ValueError, TypeError or
    OverflowError."""
    if text == "SHIPPED_WITH":
        doc = SK._read_split1(SK.FP16_SPLIT1_FILE, "fp16 forest")
        edit = {"version": {"version": []}, "log_ratio": {"trees": [{"log_ratio": 10**400}]},
                "threshold": {"trees": [{"feature": "log2_m", "threshold": 10**400, "le": {"log_ratio": 0},
                                         "gt": {"log_ratio": 0}}]}}[message]
        text = json.dumps(dict(doc, **edit))
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(SK.HeuristicError, match=message):
        SK.load_fp16_split1(p)


def test_a_damaged_correction_file_is_named_in_the_error(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"format": ')
    with pytest.raises(SK.HeuristicError, match="not JSON"):
        SK.load_fp16_split1(p)


def test_the_correction_applies_on_its_architecture_only_and_both_ways():
    q = q_of(load_profile(SHIPPED, device=None, software=None))
    rows = read_json(R / recordings("matmul_splitk", names="Z")["Z"][0])["rows"]
    factors = [SK.fp16_split1_log_factor(q, r["descriptor"]["m"], r["descriptor"]["n"], r["descriptor"]["k"])
               for r in rows if r["descriptor"]["dtype"] == "float16"]
    assert min(factors) < -0.05 and max(factors) > 0.05  # it lowers and raises
    doc, x = SK.load_fp16_split1(), SK._features(16, 128, 4096)
    mean = sum(SK._tree_value(t, x) for t in doc["trees"]) / len(doc["trees"])  # the forest's mean
    assert SK.fp16_split1_log_factor(q, 16, 128, 4096) == pytest.approx(mean, rel=1e-12)
    d = SK.SplitKDescriptor(16, 128, 4096, "float16")
    plain = SK.gemm_us(q, 16, 128, 4096, 2, 2, "tensor")
    factor = math.exp(SK.fp16_split1_log_factor(q, 16, 128, 4096))
    assert factor != 1.0 and SK.model_us(d, {"split": 1}, q) == pytest.approx(plain * factor)
    q.device_name = "NVIDIA H100 80GB HBM3"  # another GPU of compute capability 9.0: the same kernels
    assert SK.fp16_split1_log_factor(q, 16, 128, 4096) == pytest.approx(mean, rel=1e-12)
    q.device_name, q.device_arch = "NVIDIA A100-SXM4-80GB", "8.0"
    assert SK.fp16_split1_log_factor(q, 16, 128, 4096) == 0.0
    assert SK.model_us(d, {"split": 1}, q) == plain


def test_the_simulated_device_is_not_corrected():
    from calib.backends.sim import SimBackend
    from calib.heuristics.simdevice import sim_profile

    q = q_of(sim_profile(SimBackend(seed=1)))
    assert SK.fp16_split1_log_factor(q, 16, 128, 4096) == 0.0


def _evaluate(name, oracle):
    rec, prof = (R / p for p in recordings("matmul_splitk", names=name)[name])
    with warnings.catch_warnings(), CL.use_oracle(oracle):
        warnings.simplefilter("ignore", RuntimeWarning)
        return E.evaluate("matmul_splitk", backend=f"replay:{rec}", profile=load_profile(prof, device=None,
                                                                                           software=None))


def test_no_choice_moves_and_no_fp16_problem_is_split(oracle, monkeypatch):
    """On every recording of FOLDERS, with and without the forest: the same choices (fp16 never wins a
    split, so no fp16 prediction can move one) and no fp16 problem split."""
    for name in FOLDERS:
        got = {}
        for arm, d in (("without", None), ("with", SK.load_fp16_split1())):
            monkeypatch.setitem(SK._fp16_split1, "doc", d)
            res = _evaluate(name, oracle)
            assert all(r["heuristic"] == {"split": 1} for r in res["rows"] if r["descriptor"]["dtype"] == "float16")
            got[arm] = [r["heuristic"] for r in res["rows"]]
        assert got["with"] == got["without"], name


def _fp16_memory_bound_median(rows, doc, monkeypatch, q) -> float:
    monkeypatch.setitem(SK._fp16_split1, "doc", doc)
    errs = []
    for r in rows:
        d = SK.descriptor(r["descriptor"])
        if d.dtype == "float16" and d.memory_bound:
            errs.append(abs(math.log(r["times_us"]["split=1"] / SK.model_us(d, {"split": 1}, q))))
    return statistics.median(errs)


FOLD_SEEDS = ("1000", "1001", "1002")  # the 1000-problem training evaluations


def test_left_out_one_training_seed_at_a_time(monkeypatch):
    """The protocol that chose the forest's size: fitted on the 29 recordings and two training seeds,
    judged on the third's memory-bound fp16 problems (about 370 each), with the rest of TRAINING (seeds
    42-54) in the fit too. The forest misses them by a median below 3.3% on each (first measured
    without seeds 42-54: 2.92, 2.95, 3.00%), below the single tree of session 11 (fitted on the 29
    recordings: 3.79, 3.64, 4.04%) on each."""
    doc = SK.load_fp16_split1()
    folders = _loaded(doc["recordings"][:len(FOLDERS)])
    training = dict(zip(TRAINING, _loaded(doc["recordings"][len(FOLDERS):])))
    old = dict(doc, trees=[SK._fit_tree(*_examples(folders), 6, 10)])  # session 11's tree, refitted
    for name in FOLD_SEEDS:
        rows, q = training[name]
        held_out = dict(doc, trees=SK.fit_fp16_split1_trees(folders + [v for n, v in training.items() if n != name]))
        forest = _fp16_memory_bound_median(rows, held_out, monkeypatch, q)
        single = _fp16_memory_bound_median(rows, old, monkeypatch, q)
        assert forest < 0.033 and forest < single - 0.005, (name, forest, single)


def _examples(loaded):
    xs, ys = [], []
    for rows, q in loaded:
        x, y = SK.fp16_split1_examples(rows, q)
        xs += x
        ys += y
    return xs, ys


@pytest.mark.parametrize("seed", ["26", "27", "28", "29", "30", "31"])
def test_the_live_seeds_memory_bound_median_meets_5_percent_with_it(seed):
    """On each live seed that ran before the correction (its rows as recorded: every choice and every
    other prediction the live run's), the fp16 split-1 predictions of the shipped model bring the
    memory-bound median under 5%, where it was 5.4-6.9% live. (Seeds 32-37 ran with it: 3.5-5.7%.)"""
    folder, prof = UNSEEN[seed]
    q = q_of(load_profile(prof, device=None, software=None))
    rows = read_json(R / folder / "heuristics-matmul_splitk.json.gz")["rows"]
    live, now = [], []
    for r in rows:
        if not r["memory_bound"] or not r.get("predicted_us"):
            continue
        d = SK.descriptor(r["descriptor"])
        predicted = r["predicted_us"]
        live.append(abs(predicted / r["heuristic_us"] - 1))
        if d.dtype == "float16" and r["heuristic"] == {"split": 1}:
            predicted = SK.model_us(d, {"split": 1}, q)
        now.append(abs(predicted / r["heuristic_us"] - 1))
    assert len(now) >= 40
    assert statistics.median(live) > 0.05 >= statistics.median(now), (statistics.median(live), statistics.median(now))


def test_the_live_seeds_that_ran_with_the_single_tree_gain_on_their_fp16_rows(monkeypatch):
    """Seeds 32-41 ran live with session 11's tree. With the forest (every other row as recorded) the
    memory-bound fp16 rows' median falls on each (live 3.21-6.13%, now 2.03-4.24%), and the memory-bound
    median of all rows meets 5% on all but 35, whose fp32 rows this does not touch (their median 10.9%;
    the fp32 forest, tests/test_heuristics_splitk_fp32_recorded.py, takes 35 to 3.2%)."""
    monkeypatch.setitem(SK._fp16_split1, "doc", SK.load_fp16_split1())
    fell, over = [], []
    for seed in [str(s) for s in range(32, 42)]:
        folder, prof = UNSEEN[seed]
        q = q_of(load_profile(prof, device=None, software=None))
        rows = read_json(R / folder / "heuristics-matmul_splitk.json.gz")["rows"]
        now, live16, now16 = [], [], []
        for r in rows:
            if not r["memory_bound"] or not r.get("predicted_us"):
                continue
            d = SK.descriptor(r["descriptor"])
            predicted = r["predicted_us"]
            if d.dtype == "float16":
                live16.append(abs(predicted / r["heuristic_us"] - 1))
                predicted = SK.model_us(d, {"split": 1}, q)
                now16.append(abs(predicted / r["heuristic_us"] - 1))
            now.append(abs(predicted / r["heuristic_us"] - 1))
        assert statistics.median(now16) <= 0.043, (seed, statistics.median(now16))
        if statistics.median(now16) < statistics.median(live16):
            fell.append(seed)
        if statistics.median(now) > 0.05:
            over.append(seed)
    assert len(fell) == 10 and over == ["35"], (fell, over)


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["--chek"], 2)])
def test_fit_script_refits_only_when_asked(argv, code, monkeypatch):
    """--help or a misspelt flag must not refit (and rewrite) the shipped forests: argparse exits
    before any recording is read."""
    monkeypatch.setattr(fit_splitk_forests, "fp32_recordings", lambda: pytest.fail("read recordings"))
    with pytest.raises(SystemExit) as exc:
        fit_splitk_forests.main(argv)
    assert exc.value.code == code
