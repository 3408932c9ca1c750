"""A recorded evaluation replays: every candidate's time read back from the JSON the GPU run wrote,
so heuristics change and are judged offline; a bad file is one clear error."""

import json

import pytest

from calib.cli import main
from calib.heuristics import evaluate as E
from calib.heuristics import replay as R


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A small evaluation on the simulated device, written as the GPU run writes it."""
    res = E.evaluate("pointwise", count=12, seed=3)
    path = tmp_path_factory.mktemp("rec") / "pointwise.json"
    path.write_text(json.dumps(res, allow_nan=False, default=str))
    return res, path


def test_every_usable_candidate_time_is_recorded(recorded):
    res, _ = recorded
    for row in res["rows"]:
        assert len(row["times_us"]) == row["usable"]
        assert min(row["times_us"].values()) == pytest.approx(row["best_us"]) and row["winner"] in row["times_us"]


def test_replay_reproduces_the_recorded_choices_and_their_times(recorded):
    res, path = recorded
    from calib.heuristics.simdevice import sim_profile
    from calib.backends.sim import SimBackend

    again = E.evaluate("pointwise", backend=f"replay:{path}", profile=sim_profile(SimBackend(seed=3), seed=3))
    assert again["replayed"] and again["evaluated"] == res["evaluated"]
    for a, b in zip(res["rows"], again["rows"]):
        assert a["descriptor"] == b["descriptor"] and a["heuristic"] == b["heuristic"]
        assert a["heuristic_us"] == pytest.approx(b["heuristic_us"])
        assert a["best_us"] == pytest.approx(b["best_us"]) and a["library_us"] == pytest.approx(b["library_us"])
    assert "REPLAYED" in E.to_markdown(again)


def test_a_choice_outside_the_recorded_candidates_counts_as_failed(recorded, tmp_path):
    res, _ = recorded
    cut = json.loads(json.dumps(res))
    for row in cut["rows"]:
        row["times_us"] = {row["winner"]: row["best_us"]}  # only the winner was recorded
    p = tmp_path / "cut.json"
    p.write_text(json.dumps(cut))
    again = E.evaluate("pointwise", backend=f"replay:{p}")
    failed = again["summary"]["heuristic"]["choice_failed"]
    assert failed == sum(1 for r in again["rows"] if r["heuristic_us"] is None) and failed > 0


@pytest.mark.parametrize("content,words", [
    ("not json", "is not JSON"),
    ('{"format": "something else"}', "is not a calib heuristics evaluation"),
    ('{"format": "calib.heuristics.evaluation", "version": 99, "kind": "pointwise", "rows": []}', "version 99"),
    ('{"format": "calib.heuristics.evaluation", "version": 1, "kind": "normalization", "rows": []}',
     "not 'pointwise'"),
    ('{"format": "calib.heuristics.evaluation", "version": 1, "kind": "pointwise", "rows": [{"descriptor": {}}]}',
     "times_us"),
])
def test_a_bad_recording_is_one_line_and_exit_2(tmp_path, capsys, content, words):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(R.ReplayError, match=words):
        R.load(p, "pointwise")
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--backend", f"replay:{p}"]) == 2
    err = capsys.readouterr().err
    assert words.split()[-1].strip("'") in err and "Traceback" not in err


def test_negative_recorded_times_are_refused(recorded, tmp_path):
    res, _ = recorded
    bad = json.loads(json.dumps(res))
    first = next(iter(bad["rows"][0]["times_us"]))
    bad["rows"][0]["times_us"][first] = -1.0
    p = tmp_path / "neg.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(R.ReplayError, match="not positive numbers"):
        R.load(p, "pointwise")
