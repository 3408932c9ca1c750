"""What the heuristics surface does with input an outside checker would try: sizes no GPU holds,
numbers JSON can spell but Python cannot convert, override files whose descriptors leave out
defaults or whose parameters name no launch, a user's choice that no kernel could take, a replay
of no named device, and an --out that cannot be written. Each is a clear error or a skipped line,
never a traceback and never an override that silently does nothing."""

import json
import math
import os
import warnings

import pytest

from calib import heuristics as H
from calib.autotune import descriptor_key
from calib.cli import main
from calib.heuristics import evaluate as E
from calib.heuristics import pointwise as PW
from calib.heuristics import predictor as P
from calib.heuristics.families import family
from calib.heuristics.knobs import MAX_COUNT

BIG = {"pointwise": [{"op": "add", "n": MAX_COUNT}],
       "normalization": [{"op": "softmax", "rows": MAX_COUNT, "cols": MAX_COUNT}],
       "matmul_splitk": [{"m": MAX_COUNT, "n": MAX_COUNT, "k": MAX_COUNT}, {"m": 1, "n": 1, "k": MAX_COUNT}]}
FIELD = {"pointwise": "n", "normalization": "cols", "matmul_splitk": "k"}


pytestmark = pytest.mark.usefixtures("heuristic_layers_cleared")


def _cli(capsys, *argv):
    code = main(["heuristics", "evaluate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("kind", sorted(BIG))
def test_the_largest_size_a_64_bit_index_counts_is_chosen_and_predicted_finitely(kind, sim_prof):
    for obj in BIG[kind]:
        d = H.descriptor(kind, obj)
        k = H.choose(kind, d, sim_prof)
        pred = P.predict_model(family(kind).model_us, d, k, sim_prof)
        assert math.isfinite(pred.time_us) and all(math.isfinite(x) for x in pred.ci95), (obj, pred)


@pytest.mark.parametrize("kind", sorted(BIG))
@pytest.mark.parametrize("size", [MAX_COUNT + 1, 1e300, 10**400])
def test_a_size_past_a_64_bit_index_is_refused_by_name(kind, size):
    obj = dict(BIG[kind][0], **{FIELD[kind]: size})
    with pytest.raises(H.HeuristicError, match=f"{FIELD[kind]} is .*more than a 64-bit index counts"):
        H.descriptor(kind, obj)


@pytest.mark.parametrize("kind", sorted(BIG))
def test_a_huge_problem_first_in_the_file_is_a_skipped_line_whatever_the_order(kind, tmp_path, capsys):
    small = {"pointwise": {"op": "add", "n": 4096}, "normalization": {"op": "softmax", "rows": 8, "cols": 256},
             "matmul_splitk": {"m": 64, "n": 64, "k": 1024}}[kind]
    huge = dict(small, **{FIELD[kind]: 1e300})
    for order in ([huge, small], [small, huge]):
        f = tmp_path / "p.jsonl"
        f.write_text("".join(json.dumps(o) + "\n" for o in order))
        code, out, err = _cli(capsys, "--kind", kind, "--problems", str(f), "--backend", "sim", "--json")
        assert code == 0, err
        res = json.loads(out)
        assert res["evaluated"] == 1 and res["problems"] == 1
        assert f"p.jsonl:{order.index(huge) + 1}" in err and "64-bit index" in err
        assert res["parameters_read"]  # asked of the problem that evaluated


def test_an_integer_of_more_digits_than_python_converts_is_a_bad_line_not_a_traceback(tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text('{"op": "add", "n": 4096}\n{"op": "add", "n": ' + "1" * 5000 + "}\n")
    code, out, err = _cli(capsys, "--kind", "pointwise", "--problems", str(f), "--backend", "sim", "--json")
    assert code == 0 and json.loads(out)["evaluated"] == 1
    assert "p.jsonl:2: not JSON" in err
    o = tmp_path / "o.jsonl"
    o.write_text('{"key": "' + "0" * 64 + '", "params": {"split": ' + "9" * 5000 + "}}\n")
    with pytest.raises(H.OverrideFileError, match="o.jsonl:1: not JSON"):
        H.load_overrides(o)
    o.write_text('{"' + "0" * 64 + '": {"split": ' + "9" * 5000 + "}}")
    with pytest.raises(H.OverrideFileError, match="not JSON"):
        H.load_overrides(o)


def test_an_infinite_interval_is_written_as_null_and_the_json_stays_strict(monkeypatch):
    real = P.predict_model

    def wide(*a, **kw):
        p = real(*a, **kw)
        return P.Prediction(time_us=p.time_us, ci95=(p.ci95[0], math.inf), **{
            f: getattr(p, f) for f in p.__dataclass_fields__ if f not in ("time_us", "ci95")})

    monkeypatch.setattr(P, "predict_model", wide)
    res = E.evaluate("pointwise", [{"op": "add", "n": 4096}], backend="sim")
    row = res["rows"][0]
    assert row["predicted_ci95"] is None and math.isfinite(row["predicted_us"])
    json.dumps(res, allow_nan=False)


def test_an_override_keyed_by_a_descriptor_with_defaults_left_out_applies_to_the_problem(tmp_path, sim_prof):
    o = tmp_path / "o.jsonl"
    o.write_text(json.dumps({"descriptor": {"op": "add", "n": 1e3},
                             "params": {"vec": 2, "ept": 1, "block": 1024.0, "grid": "cover"}}) + "\n")
    assert H.load_overrides(o) == 1
    for asked in (PW.descriptor({"op": "add", "n": 1000, "dtype": "float32"}), {"op": "add", "n": 1000}):
        used = []
        got = H.choose("pointwise", asked, sim_prof, layers_used=used)
        assert used == ["override"] and got == {"vec": 2, "ept": 1, "block": 1024, "grid": "cover"}
        assert type(got["block"]) is int  # 1024.0 in the file names the same candidate as 1024
    assert H.override_for("pointwise", {"op": "add", "n": 1000, "dtype": "float16"}) is None
    # the same through set_overrides, keyed by a frozen descriptor
    H.set_overrides({H.descriptor("matmul_splitk", {"m": 8, "n": 8, "k": 4096}): {"split": 4}},
                    kind="matmul_splitk")
    assert H.choose("matmul_splitk", {"m": 8, "n": 8, "k": 4096, "dtype": "float16"}, sim_prof) == {"split": 4}
    assert H.override_for("matmul_splitk", {"m": 8, "n": 8, "k": 4096, "dtype": "float32"}) is None


BAD_LINES = [
    ({"kind": "pointwise", "descriptor": {"op": "add", "n": 10}, "params": {}}, "lack vec, ept, block, grid"),
    ({"kind": "pointwise", "descriptor": {"op": "add", "n": 10},
      "params": {"vec": 1, "ept": 1, "block": -5, "grid": "cover"}}, "block is -5"),
    ({"kind": "pointwise", "descriptor": {"op": "add", "n": 10},
      "params": {"vec": "x", "ept": 1, "block": 5, "grid": "cover"}}, "vec is 'x'"),
    ({"kind": "normalization", "descriptor": {"op": "softmax", "rows": 1, "cols": 8},
      "params": {"strategy": "fast", "threads": 32, "vec": 1, "buffer": 8}}, "strategy is 'fast'"),
    ({"descriptor": [1, 2], "params": {"split": 2}}, "bad descriptor"),
    ({"descriptor": {"op": "add", "rows": 3}, "params": {"split": 2}}, "no kind's descriptor"),
    ({"descriptor": {"m": 1, "n": 1, "k": 256}, "params": {"vec": 1}}, "lack split"),
    ({"key": "abc", "params": {"split": 2}}, "not a descriptor key"),
    ({"key": "0" * 64, "params": {"nothing": 1}}, "no kind's launch"),
]


def test_override_files_are_checked_against_the_familys_knobs_and_a_bad_one_changes_nothing(tmp_path, sim_prof):
    good = {"kind": "matmul_splitk", "descriptor": {"m": 8, "n": 8, "k": 4096}, "params": {"split": 8}}
    keep = tmp_path / "keep.jsonl"
    keep.write_text(json.dumps(good) + "\n")
    assert H.load_overrides(keep) == 1
    for n, (line, why) in enumerate(BAD_LINES):
        f = tmp_path / f"bad{n}.jsonl"
        f.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
        with pytest.raises(H.OverrideFileError, match=f"bad{n}.jsonl:2: .*{why}"):
            H.load_overrides(f, replace=True)
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"kind": "matmul_splitk", "key": "' + "1" * 64 + '", "params": {"split": NaN}}\n')
    with pytest.raises(H.OverrideFileError, match="split is nan"):
        H.load_overrides(nan, replace=True)
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps({"abc": {"split": 2}}))
    with pytest.raises(H.OverrideFileError, match="key abc: .*not a descriptor key"):
        H.load_overrides(whole, replace=True)
    for text in ("", "# only a comment\n", "{}"):
        (tmp_path / "empty.json").write_text(text)
        with pytest.raises(H.OverrideFileError, match="has no override.*nothing was replaced"):
            H.load_overrides(tmp_path / "empty.json", replace=True)
    # every refusal above left the first file's override in place
    assert H.choose("matmul_splitk", {"m": 8, "n": 8, "k": 4096}, sim_prof) == {"split": 8}
    with pytest.raises(H.HeuristicError, match="override for .*lack split"):
        H.set_overrides({"2" * 64: {}}, kind="matmul_splitk")


@pytest.mark.parametrize("kind, d, params, why", [
    ("matmul_splitk", {"m": 8, "n": 8, "k": 4096}, {"split": 3}, "split 3 does not divide K = 4096"),
    ("pointwise", {"op": "add", "n": 10, "dtype": "float64"}, {"vec": 8, "ept": 1, "block": 256, "grid": "cover"},
     "vec 8 of float64 is 64 bytes"),
    ("normalization", {"op": "softmax", "rows": 1, "cols": 8},
     {"strategy": "multipass", "threads": 2048, "vec": 1, "buffer": 0}, "more than the 1024 threads"),
])
def test_an_override_for_a_descriptor_is_checked_as_a_launch_of_that_problem(kind, d, params, why, tmp_path):
    """It loaded, and choose() then answered a launch no kernel of the family could run."""
    f = tmp_path / "o.jsonl"
    f.write_text(json.dumps({"descriptor": d, "params": params}) + "\n")
    with pytest.raises(H.OverrideFileError, match=f"o.jsonl:1: .*{why}"):
        H.load_overrides(f)
    with pytest.raises(H.HeuristicError, match=why):
        H.set_overrides({H.descriptor(kind, d): params})
    assert H.override_for(kind, d) is None


@pytest.mark.parametrize("params, why", [
    ({"strategy": "persistent", "threads": 1024, "vec": 4, "buffer": 1}, "buffer 1 is not compiled"),
    ({"strategy": "persistent", "threads": 1024, "vec": 4, "buffer": 0}, "buffer 0 is not compiled"),
    ({"strategy": "persistent", "threads": 1024, "vec": 4, "buffer": 6}, "buffer 6 is not compiled"),
    ({"strategy": "persistent", "threads": 1024, "vec": 4, "buffer": 32}, "holds 32768 of the row's 100000 columns"),
    ({"strategy": "multipass", "threads": 48, "vec": 4, "buffer": 0}, "threads 48 is not a whole number of"),
    ({"strategy": "persistent", "threads": 1000, "vec": 4, "buffer": 128}, "threads 1000 is not a whole number"),
    ({"strategy": "multipass", "threads": 256, "vec": 4, "buffer": 0}, None),
    ({"strategy": "multipass", "threads": 256, "vec": 2, "buffer": 0}, None),
])
def test_a_persistent_buffer_that_cannot_hold_the_row_is_no_launch_to_predict_or_override(params, why, tmp_path):
    """The persistent kernel reads ``buffer`` elements per thread and is compiled for BUFFERS alone: a
    buffer of 1 for a 100000-column row was predicted at 796 us and loaded as an override, a launch that
    leaves most of the row unread. A vector that does not divide the row leaves its tail out the same way,
    and a block of part of a warp (48 threads) reduces through undefined shuffles."""
    from calib import predict

    d = {"op": "softmax", "rows": 4096, "cols": 100000, "dtype": "float32"}
    odd = dict(d, cols=100002)  # vec 4 does not divide it
    if why is None:
        assert predict.predict("normalization", d, params).time_us > 0
        if params["vec"] == 4:
            with pytest.raises(H.HeuristicError, match="vec 4 does not divide the row's 100002 columns"):
                predict.predict("normalization", odd, params)
        return
    with pytest.raises(H.HeuristicError, match=why):
        predict.predict("normalization", d, params)
    f = tmp_path / "o.jsonl"
    f.write_text(json.dumps({"descriptor": d, "params": params}) + "\n")
    with pytest.raises(H.OverrideFileError, match=f"o.jsonl:1: .*{why}"):
        H.load_overrides(f)
    assert H.override_for("normalization", d) is None


def test_every_candidate_and_the_baselines_choice_is_a_launch_of_its_normalization_problem():
    from calib.heuristics import baselines
    from calib.heuristics import normalization as N

    for d in N.generate(500, 0):
        for k in [*N.space(d), baselines.normalization(d)]:
            assert N.launch_problem(d, k) is None, (d, k)


def test_a_line_separator_inside_a_json_string_does_not_split_its_line(tmp_path):
    """str.splitlines cut a line at U+2028 (which JSON allows raw in a string) and numbered the halves
    as lines 1 and 2, neither JSON: a good override file was refused."""
    line = {"descriptor": {"op": "add", "n": 1000}, "params": {"vec": 4, "ept": 1, "block": 256, "grid": "cover",
                                                                 "note": "from\u2028bench\x85\x0c"}}
    f = tmp_path / "o.jsonl"
    f.write_text(json.dumps(line, ensure_ascii=False) + "\r\n# a comment\r\n", encoding="utf-8")
    assert H.load_overrides(f) == 1
    assert H.override_for("pointwise", {"op": "add", "n": 1000})["note"] == "from\u2028bench\x85\x0c"
    p = tmp_path / "p.jsonl"
    p.write_text('{"op": "add", "n": 1000}\r{"op": "mul", "n": 1000}\u2028\n{"op": "exp", "n": 10}\n')
    problems, bad = E.read_problems("pointwise", p)
    assert len(problems) == 3 and bad == []


def test_a_key_written_twice_in_one_object_is_named_not_the_last_one_taken(tmp_path, sim_prof):
    """json.loads keeps the last of two equal keys: {"n": 1, "n": 2} was the problem n = 2, and
    {"vec": 4, "vec": 8} an override of vec 8, in silence."""
    f = tmp_path / "p.jsonl"
    f.write_text('{"op": "add", "n": 1, "n": 2}\n{"op": "add", "n": 3}\n')
    probs, bad = E.read_problems("pointwise", f)
    assert [d.n for d in probs] == [3] and bad == [f'{f}:1: key "n" appears twice in one object']
    line = tmp_path / "o.jsonl"
    line.write_text('{"descriptor": {"op": "add", "n": 10}, '
                    '"params": {"vec": 4, "ept": 1, "block": 256, "grid": "cover", "vec": 8}}\n')
    with pytest.raises(H.OverrideFileError, match='o.jsonl:1: key "vec" appears twice'):
        H.load_overrides(line)
    whole = tmp_path / "o.json"
    params = '{"vec": 4, "ept": 1, "block": 256, "grid": "cover"}'
    whole.write_text(f'{{\n "{"0" * 64}": {params},\n "{"0" * 64}": {params}\n}}\n')
    with pytest.raises(H.OverrideFileError, match=f'o.json: key "{"0" * 20}..." appears twice'):
        H.load_overrides(whole)
    assert H.override_for("pointwise", {"op": "add", "n": 10}) is None


def test_one_problem_overridden_twice_with_other_parameters_is_refused(tmp_path):
    line = {"descriptor": {"op": "add", "n": 10}, "params": {"vec": 4, "ept": 1, "block": 256, "grid": "cover"}}
    f = tmp_path / "o.jsonl"
    f.write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    assert H.load_overrides(f) == 1  # the same line twice is one override
    other = dict(line, descriptor={"op": "add", "n": 10.0, "dtype": "float32"}, params={**line["params"], "vec": 2})
    f.write_text(json.dumps(line) + "\n" + json.dumps(other) + "\n")
    with pytest.raises(H.OverrideFileError, match="o.jsonl:2: the same problem as line 1, with other parameters"):
        H.load_overrides(f, replace=True)
    assert H.override_for("pointwise", {"op": "add", "n": 10})["vec"] == 4  # the refusal changed nothing


@pytest.mark.parametrize("key, why", [(5, '"key" is int; a descriptor key is a string'),
                                      ("0" * 64, '"key" 0{20}... is not the key of its "descriptor"')])
def test_an_override_line_with_a_key_that_is_not_its_descriptors_is_refused(key, why, tmp_path):
    """The key had won over the descriptor in silence (or, not a string, been called missing)."""
    f = tmp_path / "o.jsonl"
    f.write_text(json.dumps({"key": key, "descriptor": {"op": "add", "n": 10},
                             "params": {"vec": 4, "ept": 1, "block": 256, "grid": "cover"}}) + "\n")
    with pytest.raises(H.OverrideFileError, match=f"o.jsonl:1: {why}"):
        H.load_overrides(f)
    d = {"op": "add", "n": 10}  # a row of `evaluate --json` pasted whole: its key and its descriptor agree
    for k in (descriptor_key(H.descriptor("pointwise", d)), descriptor_key(d)):
        f.write_text(json.dumps({"key": k, "descriptor": d, "params": {"vec": 4, "ept": 1, "block": 256,
                                                                        "grid": "cover"}}) + "\n")
        assert H.load_overrides(f) == 1


@pytest.mark.parametrize("content, why", [
    (b"\x00\xff\xfe", "is not UTF-8 text"),
    (b'{"op": "add", "n": 5}\n{"op": "add", "n": 6}\n', "is not JSON"),
    (b'{"op": "add", "n": 5}', "is not a calib heuristics evaluation"),
    (b'{"format": "calib.heuristics.evaluation", "version": 9}', "has version 9"),
    (b'{"format": "calib.heuristics.evaluation", "version": 1, "kind": "pointwise", "rows": {}}',
     "lacks device, summary, prediction, rows"),
    (None, "is a directory"),
])
def test_the_review_names_a_file_that_is_no_evaluation(content, why, tmp_path):
    """The notebook's review.load had raised UnicodeDecodeError, IsADirectoryError or KeyError 'kind'."""
    from calib.heuristics import review

    f = tmp_path / "res.json"
    f.mkdir() if content is None else f.write_bytes(content)
    with pytest.raises(review.ReviewError, match=f"res.json.*{why}"):
        review.load(f)


@pytest.fixture(scope="module")
def evaluation_file(tmp_path_factory):
    """A small evaluation as `calib heuristics evaluate --out` writes it (strict JSON)."""
    res = E.evaluate("pointwise", count=6, seed=4)
    return json.loads(json.dumps(res, allow_nan=False, default=str))


@pytest.mark.parametrize("edit, why", [
    (lambda r: r["rows"][0].update(best_us="x"), r"rows\[0\].best_us is 'x', not a positive number"),
    (lambda r: r["rows"][1].update(heuristic_us=0), r"rows\[1\].heuristic_us is 0, not a positive number"),
    (lambda r: r["rows"][0].update(heuristic_us=True), r"rows\[0\].heuristic_us is True"),
    (lambda r: r["rows"].insert(0, 5), r"rows\[0\] is not a problem's row"),
    (lambda r: r["rows"][0].update(predicted_ci95=[1.0]), r"rows\[0\].predicted_ci95 is \[1.0\], not a pair"),
    (lambda r: r["rows"][0].update(predicted_pi95=[9.0, 1.0]), "predicted_pi95 is .*not a pair"),
    (lambda r: r["rows"][0].update(best_us=None), r"rows\[0\] times the heuristic's choice but has no best_us"),
    (lambda r: r["rows"][0].update(predicted_us="INF"), "Infinity is not a number JSON allows"),
    (lambda r: r["summary"].pop("heuristic"), "summary.heuristic is None, not an object"),
    (lambda r: r["summary"]["baseline"].update(geomean_efficiency="high"), "summary.baseline has n = .* numbers"),
    (lambda r: r["prediction"]["all"].update(median_abs_rel_error=None), "prediction.all has n = .* numbers"),
    (lambda r: r["prediction"]["memory_bound"].update(pi95_contains_measured="most"), "coverage that is no number"),
    (lambda r: r.pop("wall_s"), "lacks wall_s"),
    (lambda r: r.update(evaluated=True), "lacks evaluated"),
])
def test_the_review_names_what_is_wrong_inside_an_evaluation_never_a_traceback(evaluation_file, tmp_path, edit,
                                                                                why):
    """The notebook's figures and to_markdown had ended in a TypeError, KeyError, AttributeError or
    IndexError on such a file (a time that is a string, a row that is no object, a one-sided interval,
    a summary or a top-level field left out): each is now one ReviewError naming the field."""
    from calib.heuristics import review

    bad = json.loads(json.dumps(evaluation_file))
    edit(bad)
    f = tmp_path / "res.json"
    f.write_text(json.dumps(bad).replace('"INF"', "Infinity"))
    with pytest.raises(review.ReviewError, match=f"res.json.*{why}"):
        review.load(f)


def test_an_evaluation_the_review_accepts_it_also_draws_and_prints(evaluation_file, tmp_path):
    """The checks let through what evaluate writes (a problem with no timed choice, null times, a coverage of
    None), and the figures and to_markdown read such a file without error."""
    from calib.heuristics import review

    good = json.loads(json.dumps(evaluation_file))
    good["rows"][0].update(heuristic_us=None, baseline_us=None, predicted_ci95=None)
    good["prediction"]["all"]["interval_contains_measured"] = None
    f = tmp_path / "res.json"
    f.write_text(json.dumps(good))
    res = review.load(f)
    assert review.efficiency_figure(res).axes and review.prediction_figure(res).axes
    assert "no finite 95% interval" in E.to_markdown(res)


def test_every_committed_recording_passes_the_reviews_checks():
    """The checks are of what evaluate and learned_eval write: every evaluation under bench/results loads, and
    every learned one of a versioned format (the first ten, of 2026-12-01/02, have none and are refused by
    version, as before)."""
    from pathlib import Path

    from calib.heuristics import review

    root = Path(__file__).resolve().parents[1] / "bench" / "results"
    files = sorted(root.glob("**/heuristics-*.json.gz"))
    unversioned = []
    for f in files:
        if "learned" not in f.name:
            assert review.load(f)["rows"], f
            continue
        try:
            assert review.load_learned(f)["ops"], f
        except review.ReviewError as exc:
            assert "has version None" in str(exc), exc
            unversioned.append(f)
    assert len(files) > 300 and len(unversioned) == 10


def test_a_byte_order_mark_does_not_spoil_the_first_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + b'{"op": "add", "n": 4096}\n')
    probs, bad = E.read_problems("pointwise", f)
    assert probs == [PW.descriptor({"op": "add", "n": 4096})] and bad == []


@pytest.mark.parametrize("answer, why", [({"block": 256}, "lack vec, ept, grid"), ([1, 2], "not a dict"),
                                         ({"vec": 1, "ept": 1, "block": 128, "grid": "all"}, "grid is 'all'"),
                                         ({"vec": 1, "ept": 3, "block": 128, "grid": "cover"}, "ept 3 is not")])
def test_a_user_choice_no_kernel_could_take_fails_its_row_not_the_evaluation(answer, why):
    H.register("pointwise", lambda d, p: answer)
    res = E.evaluate("pointwise", [{"op": "add", "n": 4096}, {"op": "mul", "n": 100000}], backend="sim")
    assert res["evaluated"] == 2 and res["summary"]["heuristic"] == {"n": 0, "choice_failed": 2}
    assert res["summary"]["baseline"]["n"] == 2  # the rest of each row was measured
    for row in res["rows"]:
        assert row["heuristic"] is None and row["predicted_us"] is None and why in row["heuristic_error"]
    assert "| 2 |" in E.to_markdown(res)


def test_evaluate_takes_descriptors_as_mappings_from_python():
    res = E.evaluate("normalization", [{"op": "softmax", "rows": 16, "cols": 512}], backend="sim")
    assert res["evaluated"] == 1 and res["rows"][0]["descriptor"]["dtype"] == "float32"
    with pytest.raises(H.HeuristicError, match="missing field"):
        E.evaluate("normalization", [{"op": "softmax"}], backend="sim")


def test_a_problem_written_twice_is_evaluated_once(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"op": "add", "n": 1000}\n{"op": "add", "n": 1e3, "dtype": "float32"}\n{"op": "add", "n": 1001}\n')
    probs, bad = E.read_problems("pointwise", f)
    assert [d.n for d in probs] == [1000, 1001] and bad == [f"{f}:2: the same problem as line 1"]


def test_a_problem_of_no_known_kind_says_so(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"kind": null, "op": "add", "n": 10}\n{"kind": "normalization", "op": "add", "n": 10}\n'
                 '{"op": "add", "n": 10}\n')
    _, bad = E.read_problems("pointwise", f)
    assert bad == [f"{f}:1: kind null is none of pointwise, normalization, matmul_splitk",
                   f"{f}:2: a normalization problem, not pointwise"]


def test_a_replay_of_no_named_device_is_refused_in_one_line(tmp_path, capsys):
    res = E.evaluate("pointwise", [{"op": "add", "n": 4096}], backend="sim")
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(dict(res, device={})))
    code, _, err = _cli(capsys, "--kind", "pointwise", "--backend", f"replay:{rec}")
    assert code == 2 and "device fingerprint has no name" in err and "Traceback" not in err
    res["rows"][0]["descriptor"]["n"] = 1e300
    rec.write_text(json.dumps(res))
    code, _, err = _cli(capsys, "--kind", "pointwise", "--backend", f"replay:{rec}")
    assert code == 2 and "a recorded row's problem" in err and "64-bit index" in err


def test_a_generated_problem_set_holds_no_problem_twice():
    """Normalization's seed 65 draws softmax of one row of 1296 halves twice (the H100 run of
    2026-12-07 evaluated it twice); the set keeps the generator's order and draws one more instead."""
    from calib.heuristics import normalization as N

    drawn = N.generate(100, 65)
    assert len(set(drawn)) == 99
    problems = E.distinct_problems(N.generate, 100, 65, {})
    assert len(problems) == len(set(problems)) == 100
    assert problems[:99] == list(dict.fromkeys(drawn)) and problems[99] not in drawn
    assert E.distinct_problems(PW.generate, 100, 0, {}) == PW.generate(100, 0)  # a seed without one is unchanged
    res = E.evaluate("normalization", count=100, seed=65, backend="sim")
    assert res["evaluated"] == 100 and len({json.dumps(r["descriptor"], sort_keys=True) for r in res["rows"]}) == 100
    assert res["fewer_problems"] is None


def test_pointwise_problems_stay_within_a_bound_below_a_thousand_elements():
    """``max_bytes`` under 1000 elements' worth: the sizes were drawn from 1000 down to the bound,
    every one of them past it."""
    for max_bytes in (12, 4000, 11999):
        drawn = PW.generate(50, 0, max_bytes=max_bytes)
        assert all(d.n * d.itemsize_bytes * (d.inputs + 1) <= max(max_bytes, 24) for d in drawn), max_bytes


def test_bounds_that_leave_fewer_problems_than_asked_say_so():
    """Split-K within 1 MiB has about 1600 distinct problems: asked for 3000, the set is what there is
    (found in a few draws of at most six times as many, not by drawing ever more) and the report says
    it fell short."""
    from calib.heuristics import splitk as SK

    calls = []

    def counted(n, seed, **kw):
        calls.append(n)
        return SK.generate(n, seed, **kw)

    problems = E.distinct_problems(counted, 3000, 0, {"max_bytes": 2**20})
    assert 1000 < len(problems) == len(set(problems)) < 3000 and len(calls) <= 5 and max(calls) <= 6 * 3000
    res = E.evaluate("matmul_splitk", count=300, seed=0, backend="sim", max_bytes=40000)
    assert res["problems"] < 300 and f"{res['problems']} distinct problems, not the 300 asked" in res["fewer_problems"]
    assert res["fewer_problems"] in E.to_markdown(res)


def test_an_empty_problems_path_is_an_error_not_the_generator(capsys):
    code, out, err = _cli(capsys, "--kind", "pointwise", "--problems", "", "--backend", "sim")
    assert code == 2 and "--problems: the path is empty" in err and out == ""


@pytest.mark.parametrize("option", ["--out", "--profile", "--db"])
def test_an_empty_out_or_profile_path_is_an_error_not_the_option_left_out(option, capsys):
    """An empty --out wrote nothing and exited 0; an empty --profile evaluated on the default profile;
    an empty --db (``--db "$UNSET"``) recorded the simulated searches in the user's autotune database."""
    code, out, err = _cli(capsys, "--kind", "pointwise", "--count", "1", "--backend", "sim", option, " ")
    assert code == 2 and f"{option}: the path is empty" in err and out == "" and len(err.splitlines()) == 1


def test_out_writes_both_files_or_neither_and_the_result_still_reaches_stdout(tmp_path, capsys, monkeypatch):
    from calib import cli_args
    from calib.heuristics import cli as HC

    (tmp_path / "r.md").symlink_to(tmp_path / "nowhere")  # a dangling link is replaced, not followed
    code, out, err = _cli(capsys, "--kind", "pointwise", "--count", "2", "--backend", "sim",
                          "--out", str(tmp_path / "r"))
    assert code == 0 and (tmp_path / "r.md").read_text() == out and not (tmp_path / "r.md").is_symlink()
    assert json.loads((tmp_path / "r.json").read_text())["evaluated"] == 2
    with pytest.raises(cli_args.BadArgument, match="cannot write .*missing"):
        HC._write_both({str(tmp_path / "a.json"): "{}", str(tmp_path / "missing" / "a.md"): "x"})
    assert sorted(os.listdir(tmp_path)) == ["r.json", "r.md"]  # no a.json alone, no temporary file
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    code, out, err = _cli(capsys, "--kind", "pointwise", "--count", "2", "--backend", "sim", "--json",
                          "--out", str(tmp_path / "s"))
    monkeypatch.setattr(os, "replace", real)
    assert code == 2 and "No space left on device" in err and json.loads(out)["evaluated"] == 2
    assert sorted(os.listdir(tmp_path)) == ["r.json", "r.md"]


def test_read_never_raises_for_a_name_that_is_not_a_string(sim_prof):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert H.read(sim_prof, None, 7) == 7 and H.read(sim_prof, 5, 8) == 8
    assert any("must be a string" in str(w.message) for w in caught)


def test_an_override_keyed_as_the_readme_shows_applies_whether_or_not_defaults_were_written(sim_prof):
    from calib.autotune import descriptor_key

    partial = {"m": 64, "n": 64, "k": 4096}  # dtype left to its default
    H.set_overrides({descriptor_key(partial): {"split": 4}}, kind="matmul_splitk")
    assert H.choose("matmul_splitk", partial, sim_prof) == {"split": 4}


def test_launch_parameters_computed_with_numpy_are_launch_parameters(sim_prof):
    import numpy as np

    from calib import predict

    k = {"vec": np.int64(8), "ept": np.int32(1), "block": np.float64(256.0), "grid": "cover"}
    p = predict.predict("pointwise", {"op": "add", "n": 1 << 20, "dtype": "float16"}, k, sim_prof)
    assert p.time_us == predict.predict("pointwise", {"op": "add", "n": 1 << 20, "dtype": "float16"},
                                        {"vec": 8, "ept": 1, "block": 256, "grid": "cover"}, sim_prof).time_us
    with pytest.raises(H.HeuristicError, match="vec is"):
        predict.predict("pointwise", {"op": "add", "n": 1 << 20}, dict(k, vec=np.bool_(True)), sim_prof)
