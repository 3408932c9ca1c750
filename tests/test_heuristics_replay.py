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


def test_the_replay_uses_the_recorded_times_not_its_own(recorded, tmp_path):
    """Every candidate's time is read back from the file: make one candidate of the first problem
    100x faster in the file and the replay's best for that problem is it, at that time."""
    res, _ = recorded
    edited = json.loads(json.dumps(res))
    row = edited["rows"][0]
    slowest = max(row["times_us"], key=row["times_us"].get)
    row["times_us"][slowest] = min(row["times_us"].values()) / 100
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(edited))
    again = E.evaluate("pointwise", backend=f"replay:{p}")
    assert again["rows"][0]["best_us"] == pytest.approx(row["times_us"][slowest])
    assert again["rows"][1]["best_us"] == pytest.approx(res["rows"][1]["best_us"])


def test_the_replay_keeps_the_recordings_seed_simulated_mark_and_failed_problems(recorded, tmp_path):
    res, _ = recorded
    rec = json.loads(json.dumps(res))
    rec["seed"] = 7
    rec["rows"].append({"descriptor": {"op": "add", "n": 999, "dtype": "float32"}, "error": "out of memory: x"})
    p = tmp_path / "with-failure.json"
    p.write_text(json.dumps(rec))
    again = E.evaluate("pointwise", backend=f"replay:{p}")
    assert again["seed"] == 7 and again["simulated"] is True and "SIMULATED" in E.to_markdown(again)
    assert again["failed"] == 1 and again["problems"] == again["evaluated"] + 1
    assert any("failed when recorded: out of memory" in r.get("error", "") for r in again["rows"])


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


def test_a_gzip_compressed_recording_replays_as_the_plain_one(recorded, tmp_path, capsys):
    """bench/results stores its recordings gzip-compressed (FILE.json.gz): the replay and
    `calib heuristics evaluate --backend replay:FILE.json.gz` read one decompressed, to the same
    evaluation as the plain file; a .gz that is no gzip file is one line and exit 2."""
    import gzip

    _, path = recorded
    gz = tmp_path / "pointwise.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
    assert R.load(gz, "pointwise") == R.load(path, "pointwise")
    plain = E.evaluate("pointwise", backend=f"replay:{path}")
    again = E.evaluate("pointwise", backend=f"replay:{gz}")
    assert again["rows"] == plain["rows"] and again["summary"] == plain["summary"]
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--backend", f"replay:{gz}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == json.loads(json.dumps(plain["rows"], default=str))
    bad = tmp_path / "plain.json.gz"
    bad.write_bytes(path.read_bytes())
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--backend", f"replay:{bad}"]) == 2
    err = capsys.readouterr().err
    assert "not a gzip file" in err and "plain.json.gz" in err and "Traceback" not in err


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
    ('{"format": "calib.heuristics.evaluation", "version": 1, "kind": "pointwise", "device": {"name": "X"}, '
     '"software": {}, "rows": [{"descriptor": {}}]}', "times_us"),
    ('{"format": "calib.heuristics.evaluation", "version": 1, "kind": "pointwise", "device": {}, "software": {}, '
     '"rows": [{"descriptor": {}}]}', "fingerprint has no name"),
    ('{"format": "calib.heuristics.evaluation", "version": 1, "kind": "pointwise", "rows": []}', "no device"),
    ('{"format": "calib.heuristics.evaluation", "version": 1, "kind": "pointwise", "device": null, "rows": []}',
     "no device"),
    ("[" * 100_000 + "]" * 100_000, "nests deeper"),
])
def test_a_bad_recording_is_one_line_and_exit_2(tmp_path, capsys, content, words):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(R.ReplayError, match=words):
        R.load(p, "pointwise")
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--backend", f"replay:{p}"]) == 2
    err = capsys.readouterr().err
    assert words.split()[-1].strip("'") in err and "Traceback" not in err


@pytest.mark.parametrize("value", [-1.0, 0, True, "3.2", None, float("inf")])
def test_recorded_times_that_are_not_positive_finite_numbers_are_refused(recorded, tmp_path, value):
    res, _ = recorded
    bad = json.loads(json.dumps(res))
    first = next(iter(bad["rows"][0]["times_us"]))
    bad["rows"][0]["times_us"][first] = value
    p = tmp_path / "bad-time.json"
    p.write_text(json.dumps(bad))  # inf is written as Infinity, which no evaluation writes: refused as JSON
    words = "Infinity is not a number JSON allows" if value == float("inf") else "not positive numbers"
    with pytest.raises(R.ReplayError, match=words):
        R.load(p, "pointwise")


@pytest.mark.parametrize("edit, words", [
    (lambda r: r["rows"][0]["times_us"].update({next(iter(r["rows"][0]["times_us"])): 10**400}),
     "not positive numbers"),
    (lambda r: r["rows"][0].update(library_us=10**400), None),
    (lambda r: r["rows"][0].update(library_us="INF"), "Infinity is not a number"),
    (lambda r: r["device"].update(l2_bytes="NAN"), "NaN is not a number"),
    (lambda r: r["device"].update(l2_bytes="BIG"), "beyond a float's range"),
])
def test_a_recorded_number_of_400_digits_nan_or_infinity_is_one_line_or_a_failed_row_never_a_traceback(
        recorded, tmp_path, capsys, edit, words):
    """An integer float() cannot take ended the replay in an OverflowError; NaN, Infinity or 1e400 in a
    row or the device fingerprint ended it, after every problem, in the strict JSON of its result."""
    res, _ = recorded
    bad = json.loads(json.dumps(res))
    edit(bad)
    p = tmp_path / "hostile.json"
    p.write_text(json.dumps(bad).replace('"INF"', "Infinity").replace('"NAN"', "NaN").replace('"BIG"', "1e400"))
    code = main(["heuristics", "evaluate", "--kind", "pointwise", "--backend", f"replay:{p}", "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if words is None:  # the row without a library time fails alone; the others evaluate
        assert code == 0 and json.loads(out)["failed"] == 1
    else:
        assert code == 2 and words in err


def test_a_replay_refuses_a_database(recorded, capsys):
    _, path = recorded
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--backend", f"replay:{path}", "--db",
                 "sqlite:///x.sqlite"]) == 2
    assert "records nothing" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["x", [132], 1.5, 0, True, 2**70])
def test_a_recorded_sm_count_that_is_no_whole_number_is_one_line_and_exit_2(recorded, tmp_path, capsys, value):
    """"x" or a list ended the replay in a traceback from the tuning cache's device key; 1.5 was 1."""
    res, _ = recorded
    bad = json.loads(json.dumps(res))
    bad["device"]["sm_count"] = value
    p = tmp_path / "bad-sms.json"
    p.write_text(json.dumps(bad))
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--backend", f"replay:{p}"]) == 2
    err = capsys.readouterr().err
    assert "bad-sms.json: its device fingerprint's sm_count is" in err and "Traceback" not in err


def test_a_candidate_timed_twice_in_one_row_is_refused_not_read_last_wins(recorded, tmp_path, capsys):
    """json keeps the last of two equal keys in silence: a row holding one candidate's time twice (a hand
    merge of two runs) replayed whichever came last. Refused, naming the key, exit 2."""
    res, _ = recorded
    text = json.dumps(res)
    row = res["rows"][0]
    cand, t = next(iter(row["times_us"].items()))
    pair = f"{json.dumps(cand)}: {json.dumps(t)}"
    assert text.count(pair) >= 1
    p = tmp_path / "twice.json"
    p.write_text(text.replace(pair, f"{json.dumps(cand)}: {json.dumps(t / 100)}, {pair}", 1))
    with pytest.raises(R.ReplayError, match="appears twice in one object"):
        R.load(p, "pointwise")
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--backend", f"replay:{p}"]) == 2
    err = capsys.readouterr().err
    assert json.dumps(cand) in err and "Traceback" not in err
