"""cuBLASLt's live answers travel with a split-K evaluation made on a GPU ("cublaslt" in its JSON), and a
replay of that file predicts with them: without them a replay fell back to the plain model wherever
the fp32 time takes Lt's kernel, so it reported another model's predictions than the GPU did."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

from calib.heuristics import cublaslt as CL
from calib.heuristics import evaluate as E
from calib.heuristics.registry import HeuristicError
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_recordings import R, read_json, recordings  # noqa: E402

S4C4 = R / "2026-12-02-h200-heuristics-s4c4"


@pytest.fixture(autouse=True)
def fresh_state(fresh_cublaslt_state):
    """Every test starts with cuBLASLt's state empty (conftest.fresh_cublaslt_state)."""


def _choices():
    return {
        (16, 816, 6656, "float32"): CL.Choice(20, 32, 128, 16, "INPLACE", "live", 0.6, "NVIDIA H200", 0),
        CL.batched_key(16, 80, 192, 4): CL.Choice(11, 0, 0, 1, "NONE", "live", 0.1, "NVIDIA H200", 0),
        (64, 64, 512, "float32"): None,  # Lt offered nothing
    }


def test_the_answers_asked_live_come_back_as_the_same_oracle():
    for key, c in _choices().items():
        CL._state["cache"][(*key, "NVIDIA H200")] = c
    rows = json.loads(json.dumps(CL.asked()))  # through JSON, as the evaluation file holds them
    assert len(rows) == 3 and {r["device"] for r in rows} == {"NVIDIA H200"}
    back = CL.oracle_from_asked(rows, "test")
    want = {k: c for k, c in _choices().items() if c is not None}
    assert set(back) == set(want)
    for key, c in want.items():  # every field that predicts, the source aside
        got = back[key]
        assert (got.algo_id, got.tile_m, got.tile_n, got.split, got.reduction, got.waves, got.device,
                got.custom_option) == (c.algo_id, c.tile_m, c.tile_n, c.split, c.reduction, c.waves, c.device,
                                       c.custom_option)


@pytest.mark.parametrize("rows, says", [
    ("not a list", "must be a list"),
    ([{"key": "16x16x16"}], "row 0"),
    ([{"key": [16, 16, 16]}], "key must be"),
    ([{"key": [16, 0, 16, "float32"], "choice": None}], "positive integers"),
    ([{"key": [16, True, 16, "float32"], "choice": None}], "positive integers"),
    ([{"key": [16, 16, 16, "int8"], "choice": None}], "int8"),
    ([{"key": ["batched", 16, 16, 16, "float32"], "choice": None}], "key must be"),
    ([{"key": [16, 16, 16, "float32"], "device": 7, "choice": None}], "device"),
    ([{"key": [16, 16, 16, "float32"], "choice": [1, 2]}], "choice must be"),
    ([{"key": [16, 16, 16, "float32"], "choice": {"algo_id": 20, "tile": "big", "splitk": 1}}], "tile"),
    ([{"key": [16, 16, 16, "float32"], "choice": {"algo_id": 20, "tile": "UNDEFINED", "splitk": 1}}], "tile"),
    ([{"key": [16, 16, 16, "float32"], "choice": {"algo_id": -1, "tile": "64x64", "splitk": 1}}], "algo_id"),
    ([{"key": [16, 16, 16, "float32"], "choice": {"algo_id": 20, "tile": "64x64", "splitk": 0}}], "splitk"),
])
def test_a_bad_recorded_answer_is_named(rows, says):
    with pytest.raises(HeuristicError, match="cublaslt") as err:
        CL.oracle_from_asked(rows, "recorded evaluation x.json")
    assert says in str(err.value) and "x.json" in str(err.value)


def _replay(path, profile, oracle=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if oracle is None:
            return E.evaluate("matmul_splitk", backend=f"replay:{path}", profile=profile)
        with CL.use_oracle(oracle):
            return E.evaluate("matmul_splitk", backend=f"replay:{path}", profile=profile)


def test_a_recording_that_carries_its_answers_replays_as_with_the_probe_of_its_shapes(tmp_path):
    """Recording O (seed 11) ran with Lt asked live; the probe of its shapes (cublaslt-s4c4.json.gz) holds
    those answers. Carried in the file as the evaluation now writes them, the replay's choices and
    predictions are the probe's, and not the plain model's (which differ on this recording)."""
    rec, prof = (R / p for p in recordings("matmul_splitk", names="O")["O"])
    profile = load_profile(prof, device=None, software=None)
    probe = CL.load_probe(S4C4 / "cublaslt-s4c4.json.gz")
    with_probe = _replay(rec, profile, probe)
    plain = _replay(rec, profile)
    for key, c in probe.items():
        CL._state["cache"][(*key, c.device)] = c
    doc = read_json(rec)
    doc["cublaslt"] = CL.asked()
    CL._state["cache"].clear()
    carried = tmp_path / "seed11-with-answers.json"
    carried.write_text(json.dumps(doc))
    got = _replay(carried, profile)

    def preds(res):
        return [(r["heuristic"], r["predicted_us"]) for r in res["rows"]]

    assert preds(got) == preds(with_probe)
    assert preds(plain) != preds(with_probe)


def test_a_recording_with_a_bad_answer_is_refused_naming_the_file(tmp_path):
    rec, prof = (R / p for p in recordings("matmul_splitk", names="O")["O"])
    doc = read_json(rec)
    doc["cublaslt"] = [{"key": [16, 16], "choice": None}]
    bad = tmp_path / "bad-answers.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(HeuristicError, match="bad-answers.json: cublaslt row 0"):
        _replay(bad, load_profile(prof, device=None, software=None))


def test_an_evaluation_off_the_gpu_carries_no_answers():
    res = E.evaluate("matmul_splitk", count=3, seed=0)
    assert "cublaslt" not in res
    assert E._lt_answers("matmul_splitk", "sim") == {}
    assert E._lt_answers("matmul_splitk", "cupy") == {"cublaslt": []}  # asked nothing live here
    assert E._lt_answers("pointwise", "cupy") == {}
