"""Heuristic layers, the empty-profile fallback, the parameters each heuristic reads, the
predictor's interval coverage and the evaluation's arithmetic, on the simulated device."""

import json
import math
import re
import threading
import warnings

import numpy as np
import pytest

from calib import heuristics as H
from calib.autotune import descriptor_key
from calib.errors import CalibError
from calib.heuristics import evaluate as E
from calib.heuristics import pointwise as PW
from calib.heuristics import predictor as P
from calib.profile import Profile

D = {"op": "add", "n": 1 << 24, "dtype": "float16"}


pytestmark = pytest.mark.usefixtures("heuristic_layers_cleared")


def test_builtin_answers_a_launch_from_the_space(sim_prof):
    k = H.choose("pointwise", D, sim_prof)
    assert k in PW.space(PW.descriptor(D))


def test_override_wins_over_every_layer(sim_prof):
    H.register("pointwise", lambda d, p: {"vec": 1, "ept": 1, "block": 64, "grid": "cover"})
    H.set_overrides({descriptor_key(PW.descriptor(D)): {"vec": 2, "ept": 1, "block": 1024, "grid": "cover"}})
    used = []
    assert H.choose("pointwise", PW.descriptor(D), sim_prof, layers_used=used)["block"] == 1024
    assert used == ["override"]
    other = dict(D, n=1000)
    assert H.choose("pointwise", other, sim_prof)["block"] == 64  # other problems: the user's layer


def test_wrapper_sees_the_builtins_answer_and_replacer_does_not_call_it(sim_prof):
    seen = []

    def wrap(d, prof, below):
        seen.append(dict(below))
        return {**below, "block": 999}

    H.register("pointwise", wrap, wrap=True)
    out = H.choose("pointwise", D, sim_prof)
    assert seen == [H.builtin("pointwise", D, sim_prof)]
    assert out == {**seen[0], "block": 999}
    undo = H.register("pointwise", lambda d, p: {"mine": 1})
    assert H.choose("pointwise", D, sim_prof) == {"mine": 1}
    undo()
    assert H.choose("pointwise", D, sim_prof)["block"] == 999


def test_with_block_is_scoped_and_restored_on_exception(sim_prof):
    base = H.choose("pointwise", D, sim_prof)
    with H.using("pointwise", lambda d, p: {"inner": 1}):
        assert H.choose("pointwise", D, sim_prof) == {"inner": 1}
        with H.using("pointwise", lambda d, p, b: {**b, "x": 2}, wrap=True):
            assert H.choose("pointwise", D, sim_prof) == {"inner": 1, "x": 2}
        assert H.layers("pointwise")[0] == "<lambda>"
    assert H.choose("pointwise", D, sim_prof) == base
    with pytest.raises(ZeroDivisionError):
        with H.using("pointwise", lambda d, p: {"inner": 1}):
            raise ZeroDivisionError
    assert H.choose("pointwise", D, sim_prof) == base
    assert H.layers("pointwise") == ["builtin"]


def test_with_block_does_not_leak_into_other_threads(sim_prof):
    base = H.choose("pointwise", D, sim_prof)
    inside, other = threading.Event(), {}
    done = threading.Event()

    def worker():
        inside.wait(5)
        other["answer"] = H.choose("pointwise", D, sim_prof)
        done.set()

    t = threading.Thread(target=worker)
    t.start()
    with H.using("pointwise", lambda d, p: {"mine": 1}):
        inside.set()
        done.wait(5)
    t.join(5)
    assert other["answer"] == base


def test_bad_kind_and_bad_answers_are_calib_errors(sim_prof):
    with pytest.raises(CalibError, match="no scheduler kind"):
        H.register("gemm", lambda d, p: {})
    H.register("pointwise", lambda d, p: [1, 2])
    with pytest.raises(H.HeuristicError, match="not a dict"):
        H.choose("pointwise", D, sim_prof)


_LOOKUP = {}


def _rule_from_a_table(d, prof):
    """A user's heuristic with a bug of the commonest kind: a shape its table lacks."""
    return {"vec": 1, "ept": 1, "block": _LOOKUP[d.n], "grid": "cover"}


def test_a_user_heuristic_that_raises_is_named_with_its_layer(sim_prof):
    """It had come out as the bare KeyError, from deep in a choice or an evaluation, naming neither
    the heuristic nor the problem."""
    H.register("pointwise", _rule_from_a_table)
    d = PW.descriptor(D)
    with pytest.raises(H.UserHeuristicError) as caught:
        H.choose("pointwise", d, sim_prof)
    e = caught.value
    assert isinstance(e, CalibError) and isinstance(e.__cause__, KeyError) and e.__cause__.args == (1 << 24,)
    msg = str(e)
    assert "\n" not in msg
    assert msg.startswith(f"the user heuristic {__name__}._rule_from_a_table, a replacement layer for "
                          "pointwise registered for the process, raised KeyError: 16777216 at "), msg
    assert f"test_heuristics.py:{_rule_from_a_table.__code__.co_firstlineno + 2}" in msg, msg
    assert f"(key {descriptor_key(d)})" in msg and '"op": "add"' in msg
    assert (e.kind, e.layer, e.wrap, e.problem_key) == ("pointwise", "_rule_from_a_table", False, descriptor_key(d))


def test_a_user_wrapper_in_a_with_block_that_raises_is_named_as_a_wrapper(sim_prof):
    def adjust(d, prof, below):
        return {**below, "block": below["threads"]}  # no such knob: KeyError

    with H.using("pointwise", adjust, wrap=True, name="my block rule"):
        with pytest.raises(H.UserHeuristicError, match=rf"^the user heuristic 'my block rule' \({re.escape(__name__)}"
                           r"\.test_a_user_wrapper_in_a_with_block_that_raises_is_named_as_a_wrapper\.<locals>\.adjust"
                           r"\), a wrapper layer for pointwise in a `with using\(\.\.\.\)` block, raised KeyError: "
                           r"'threads' at ") as caught:
            H.choose("pointwise", D, sim_prof)
    assert isinstance(caught.value.__cause__, KeyError) and caught.value.wrap


def test_the_innermost_user_heuristic_that_raised_is_the_one_named(sim_prof):
    H.register("pointwise", _rule_from_a_table)
    with H.using("pointwise", lambda d, p, below: below, wrap=True, name="outer"):
        with pytest.raises(H.UserHeuristicError, match="_rule_from_a_table, a replacement layer") as caught:
            H.choose("pointwise", PW.descriptor(D), sim_prof)
    assert isinstance(caught.value.__cause__, KeyError)


def test_a_builtin_heuristic_that_raises_is_not_dressed_as_a_user_error(sim_prof, monkeypatch):
    """calib's own bug keeps its own exception, even with a user's wrapper above the built-in."""
    from calib.heuristics import registry

    def broken_builtin(d, prof):
        raise ZeroDivisionError("calib's own bug")

    monkeypatch.setitem(registry._builtins, "pointwise", broken_builtin)
    H.register("pointwise", lambda d, p, below: below, wrap=True)
    with pytest.raises(ZeroDivisionError, match="calib's own bug"):
        H.choose("pointwise", D, sim_prof)


def test_the_builtin_called_from_a_users_replacement_keeps_its_own_exception(sim_prof, monkeypatch):
    """A replacing layer that asks H.builtin for its answer is not named for the built-in's bug."""
    from calib.heuristics import pointwise

    def broken(d, prof):
        raise ZeroDivisionError("calib's own bug")

    monkeypatch.setattr(pointwise, "heuristic", broken)
    H.register("pointwise", lambda d, prof: H.builtin("pointwise", d, prof))
    with pytest.raises(ZeroDivisionError, match="calib's own bug"):
        H.choose("pointwise", D, sim_prof)


def test_a_heuristic_error_a_user_raises_declines_the_problem_as_it_is(sim_prof):
    """Raised on purpose (this problem is not the rule's), a HeuristicError passes unwrapped: the
    caller sees the user's own error, and an evaluation counts that choice as failed, not stopped."""
    from calib.heuristics import evaluate as E

    class NotMine(H.HeuristicError):
        pass

    def picky(d, prof):
        raise NotMine(f"not my problem: {d}")

    with H.using("pointwise", picky):
        with pytest.raises(NotMine):
            H.choose("pointwise", D, sim_prof)
        res = E.evaluate("pointwise", count=3, seed=0, backend="sim")
    assert res["evaluated"] == 3 and res["summary"]["heuristic"]["choice_failed"] == 3


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_inside_a_user_heuristic_is_not_caught(sim_prof, stop):
    def interrupted(d, prof):
        raise stop

    H.register("pointwise", interrupted)
    with pytest.raises(stop):
        H.choose("pointwise", D, sim_prof)


def test_an_evaluation_stops_at_a_user_heuristic_that_raises_and_the_cli_says_so_in_one_line(tmp_path, capsys):
    """Not a row's failed choice (that is an answer no kernel can take): a bug in the user's code,
    named, with the cause's traceback for the Python caller; the CLI prints one line and exits 2."""
    H.register("pointwise", _rule_from_a_table)
    with pytest.raises(H.UserHeuristicError, match="raised KeyError: 4096 at ") as caught:
        E.evaluate("pointwise", [{"op": "add", "n": 4096}], backend="sim")
    assert isinstance(caught.value.__cause__, KeyError)
    from calib.cli import main

    f = tmp_path / "p.jsonl"
    f.write_text('{"op": "add", "n": 4096}\n')
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--problems", str(f), "--backend", "sim"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith(f"calib heuristics: error: the user heuristic {__name__}._rule_from_a_table, "
                             "a replacement layer for pointwise registered for the process, raised KeyError: 4096"), err


def test_overrides_from_json_and_json_lines_and_bad_files(tmp_path, sim_prof):
    d = PW.descriptor(D)
    f = tmp_path / "o.json"
    f.write_text(json.dumps({descriptor_key(d): {"vec": 8, "ept": 4, "block": 512, "grid": 4}}))
    assert H.load_overrides(f) == 1
    assert H.choose("pointwise", d, sim_prof)["grid"] == 4
    lines = tmp_path / "o.jsonl"
    lines.write_text("# mine\n" + json.dumps({"kind": "pointwise", "descriptor": dict(D, n=5000),
                                             "params": {"vec": 1, "ept": 1, "block": 32, "grid": "cover"}}) + "\n")
    assert H.load_overrides(lines, replace=True) == 1
    assert H.choose("pointwise", dict(D, n=5000), sim_prof)["block"] == 32
    # replaced: the first file's entry is gone, and the built-in answers for that problem again
    assert H.override_for("pointwise", d) is None
    used = []
    assert H.choose("pointwise", d, sim_prof, layers_used=used) == H.builtin("pointwise", d, sim_prof)
    assert used == ["builtin"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "abc", "params": {"vec": 1}}\nnot json\n{"descriptor": {"op": "add"}}\n[1]\n'
                   '{"key": "x", "params": {}, "kind": "gemm"}\n')
    with pytest.raises(H.OverrideFileError) as err:
        H.load_overrides(bad)
    msg = str(err.value)
    assert f"{bad}:2: not JSON" in msg and f"{bad}:3: needs \"params\"" in msg and f"{bad}:4:" in msg
    assert "kind 'gemm'" in msg
    with pytest.raises(H.OverrideFileError, match="does not exist"):
        H.load_overrides(tmp_path / "nothing.json")
    with pytest.raises(H.OverrideFileError, match="directory"):
        H.load_overrides(tmp_path)


def test_empty_profile_falls_back_with_warnings():
    empty = Profile({})
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        k = H.choose("pointwise", D, empty)
    assert k in PW.space(PW.descriptor(D))
    assert any("default" in str(x.message) for x in w)


def test_a_profile_path_reads_as_that_file_loaded(sim_prof, tmp_path):
    """choose, builtin and calib.predict take a profile file's path as calib.load_profile opens it (once
    per version of the file), not as an object without query (which read every default)."""
    import os

    import calib
    from calib import predict
    from calib.profile import write_profile

    path = write_profile(tmp_path / "sim.json", sim_prof)
    d, k = {"op": "add", "n": 1 << 27, "dtype": "float32"}, {"vec": 4, "ept": 2, "block": 256, "grid": "cover"}
    norm, splitk = {"op": "softmax", "rows": 4096, "cols": 2048, "dtype": "float16"}, {"m": 16, "n": 2048, "k": 4096}
    loaded = calib.load_profile(path)
    want = predict.predict("pointwise", d, k, loaded).time_us
    for given in (str(path), path):
        assert predict.predict("pointwise", d, k, given).time_us == want
        assert H.choose("normalization", norm, given) == H.choose("normalization", norm, loaded)
        assert H.builtin("matmul_splitk", splitk, given) == H.builtin("matmul_splitk", splitk, loaded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert predict.predict("pointwise", d, k, Profile({})).time_us != pytest.approx(want, rel=0.01)

    doc = json.loads(path.read_text())  # the file rewritten with half the bandwidth: read again
    for w in (4, 8, 16):
        rec = doc["params"][f"memory.dram.copy_bandwidth_gbps.align{w}"]
        rec["value"], rec["ci95"] = rec["value"] / 2, [c / 2 for c in rec["ci95"]]
    write_profile(path, doc)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert predict.predict("pointwise", d, k, str(path)).time_us > 1.5 * want

    with pytest.warns(Warning, match="missing.json"):  # a missing file: a warning naming it, and the defaults
        t = predict.predict("pointwise", d, k, tmp_path / "missing.json").time_us
    assert t > 0


def test_an_evaluation_given_a_profile_path_reads_that_file_and_refuses_a_missing_one(sim_prof, tmp_path):
    from calib.profile import ProfileError, write_profile

    path = write_profile(tmp_path / "sim.json", sim_prof)
    by_object = E.evaluate("pointwise", backend="sim", count=6, profile=sim_prof)
    by_path = E.evaluate("pointwise", backend="sim", count=6, profile=str(path))
    assert [r["heuristic"] for r in by_path["rows"]] == [r["heuristic"] for r in by_object["rows"]]
    assert by_path["summary"] == by_object["summary"]
    with pytest.raises(ProfileError, match="missing.json"):
        E.evaluate("pointwise", backend="sim", count=6, profile=tmp_path / "missing.json")


def _reads(kind, d, profile):
    rec = H.ReadRecorder(profile)
    from calib.heuristics.families import family

    family(kind).heuristic(d, rec)
    return set(rec.names)


def test_pointwise_reads_exactly_these_parameters(sim_prof):
    names = set()
    for dtype in ("float16", "float32", "float64"):
        for n in (1000, 1 << 20, 1 << 28):
            names |= _reads("pointwise", {"op": "mul", "n": n, "dtype": dtype}, sim_prof)
    # not memory.l2.capacity_bytes.ramp_end: a written working set leaves L2 far earlier than the
    # read-only ramp says (H200, 2026-12-01), so the pointwise model places its own ramp; and not the
    # measured capacity either: its scatter over hosts moved choices, so the ramp is a share of the
    # hardware L2 (predictor.l2_scale_bytes, e1cae41)
    assert names == {
        "device.sm_count", "device.l2_bytes", "memory.dram.fixed_cost_us",
        "memory.l2.read_bandwidth_gbps", "memory.bytes_in_flight_per_sm",
        "compute.fp32.fma_tflops", "memory.dram.copy_bandwidth_gbps",
        *(f"memory.dram.copy_bandwidth_gbps.align{w}" for w in (2, 4, 8, 16))}


def test_baseline_reads_no_profile():
    rec = H.ReadRecorder(Profile({}))
    H.baseline("pointwise", D, rec)
    assert rec.names == {}
    assert H.baseline("pointwise", D) == {"vec": 8, "ept": 1, "block": 128, "grid": "cover"}


# -- the predictor ------------------------------------------------------------------------------

def test_predictor_interval_covers_the_planted_truth():
    """Profiles 'calibrated' with 1% errors whose CIs cover the truth at 95%: the prediction's 95%
    interval must contain the time the model gives at the true parameters at about that rate."""
    from calib.backends.sim import SimBackend
    from calib.heuristics.simdevice import sim_profile, truth_q

    sim = SimBackend()
    q_true = truth_q(sim)
    problems = PW.generate(40, seed=3)
    rng = np.random.default_rng(0)
    hits, total = 0, 0
    for seed in range(25):
        prof = sim_profile(sim, rel_se=0.01, seed=seed)
        for d in problems:
            k = PW.space(d)[int(rng.integers(len(PW.space(d))))]
            p = P.predict_model(PW.model_us, d, k, prof)
            truth = PW.model_us(d, k, q_true)
            hits += p.ci95[0] <= truth <= p.ci95[1]
            total += 1
    rate = hits / total
    assert 0.91 <= rate <= 0.99, rate


def test_prediction_names_its_parameters_and_uncertainty(sim_prof):
    from calib import predict

    p = predict.predict("pointwise", {"op": "add", "n": 1 << 27, "dtype": "float32"},
                        {"vec": 4, "ept": 2, "block": 256, "grid": "cover"}, sim_prof)
    assert p.ci95[0] < p.time_us < p.ci95[1]
    assert "memory.dram.copy_bandwidth_gbps.align16" in p.contributions_us
    assert "device.sm_count" in p.without_ci
    # DRAM-bound: about bytes / bandwidth plus the fixed cost
    bw = sim_prof.query("memory.dram.copy_bandwidth_gbps.align16")
    assert p.time_us == pytest.approx(3 * 4 * (1 << 27) / (bw * 1e3) + 4.0, rel=0.05)


# -- the evaluation's arithmetic ------------------------------------------------------------------

def test_summary_arithmetic_by_hand():
    # time/best per problem: 2, 1, 2, 1; a fifth problem's choice failed; a sixth has no best
    s = E.summarize([2.0, 1.0, 4.0, 1.0, None, 5.0], [1.0, 1.0, 2.0, 1.0, 1.0, None])
    assert s["n"] == 4 and s["choice_failed"] == 1
    assert s["geomean_efficiency"] == pytest.approx(0.5 ** 0.5)  # (0.5 * 1 * 0.5 * 1) ** (1/4)
    assert s["geomean_slowdown"] == pytest.approx(2 ** 0.5)
    assert s["worst_efficiency"] == 0.5 and s["worst_slowdown"] == 2.0
    # linear interpolation at h = (n - 1) p over [0.5, 0.5, 1, 1] and [1, 1, 2, 2]
    assert s["efficiency_quantiles"] == pytest.approx({"p5": 0.5, "p10": 0.5, "p25": 0.5, "p50": 0.75, "p75": 1.0,
                                                       "p90": 1.0})
    assert s["slowdown_quantiles"] == pytest.approx({"p5": 1.0, "p10": 1.0, "p25": 1.0, "p50": 1.5, "p75": 2.0,
                                                     "p90": 2.0})
    assert s["within_3pct"] == 0.5
    # slowdowns 4, 2, 1, 1: their quantiles are their own, not 1 / the efficiency's (1 / 0.75 != 1.5)
    s = E.summarize([4.0, 2.0, 1.0, 1.0], [1.0] * 4)
    assert s["geomean_efficiency"] == pytest.approx(0.125 ** 0.25) and s["worst_slowdown"] == 4.0
    assert s["efficiency_quantiles"]["p50"] == pytest.approx(0.75)
    assert s["efficiency_quantiles"]["p10"] == pytest.approx(0.25 + 0.3 * 0.25)  # h = 0.3
    assert s["slowdown_quantiles"]["p50"] == pytest.approx(1.5)
    assert s["slowdown_quantiles"]["p90"] == pytest.approx(2 + 0.7 * 2)  # h = 2.7
    assert s["within_3pct"] == 0.5
    assert E.summarize([None, 0.0], [1.0, 1.0]) == {"n": 0, "choice_failed": 2}
    assert E.summarize([], []) == {"n": 0, "choice_failed": 0}
    q = np.percentile([0.1, 0.4, 0.7, 0.9, 1.0], [5, 10, 25, 50, 75, 90])
    got = E.summarize([1 / x for x in (0.1, 0.4, 0.7, 0.9, 1.0)], [1.0] * 5)["efficiency_quantiles"]
    assert list(got.values()) == pytest.approx(list(q))


def test_evaluation_on_a_hand_computable_family(monkeypatch):
    """Three problems, a space of two candidates with known times and no noise: the ratios are
    exact. The predictor (the model without the hidden effects) says 0.8 of the true time, and on
    the third problem the heuristic picks a candidate outside the space that cannot run."""
    from calib.backends import sim as simmod

    monkeypatch.setitem(simmod.DEFAULT_NOISE, "rel_sd", 0.0)
    monkeypatch.setitem(simmod.DEFAULT_NOISE, "outlier_rate", 0.0)
    times = {"a": 10.0, "b": 20.0, "c": math.inf}
    from calib.heuristics.knobs import Knobs

    monkeypatch.setattr(PW, "space", lambda d: [Knobs(c="a"), Knobs(c="b")])
    monkeypatch.setattr(PW, "KNOB_VALUES", {"c": ("a", "b", "c")})
    monkeypatch.setattr(PW, "launch_problem", lambda d, k: None)
    monkeypatch.setattr(PW, "model_us", lambda d, k, q, hidden=False:
                        times[k["c"]] * (1 if d.n == 1000 else 3) * (1.0 if hidden else 0.8))
    monkeypatch.setattr(PW, "sim_library_us", lambda d, q: 40.0)
    monkeypatch.setattr(PW, "heuristic", lambda d, p: Knobs(c={1000: "b", 2000: "a"}.get(d.n, "c")))
    from calib.heuristics import baselines

    monkeypatch.setitem(baselines.BASELINES, "pointwise", lambda d, p=None: Knobs(c="b"))
    probs = [PW.PointwiseDescriptor("add", n) for n in (1000, 2000, 3000)]
    res = E.evaluate("pointwise", probs, backend="sim")
    h, b, lib = (res["summary"][k] for k in ("heuristic", "baseline", "library"))
    assert [r["best_us"] for r in res["rows"]] == pytest.approx([10.0, 30.0, 30.0])
    assert [r["heuristic_us"] for r in res["rows"]] == pytest.approx([20.0, 30.0, None])
    # heuristic: 10/20 and 30/30; the third problem's choice failed and is counted as such
    assert h["n"] == 2 and h["choice_failed"] == 1
    assert h["geomean_efficiency"] == pytest.approx(math.sqrt(0.5 * 1.0))
    assert h["worst_efficiency"] == pytest.approx(0.5) and h["worst_slowdown"] == pytest.approx(2.0)
    assert h["slowdown_quantiles"]["p50"] == pytest.approx(1.5)
    # baseline: b everywhere, 10/20, 30/60, 30/60
    assert b["n"] == 3 and b["geomean_efficiency"] == pytest.approx(0.5) and b["worst_efficiency"] == pytest.approx(0.5)
    assert lib["geomean_efficiency"] == pytest.approx((10 / 40 * 30 / 40 * 30 / 40) ** (1 / 3))
    assert lib["worst_slowdown"] == pytest.approx(4.0)
    # predicted 0.8 of the measured time: |0.8 - 1| on the two problems whose choice ran
    pred = res["prediction"]["all"]
    assert pred["n"] == 2 and pred["median_abs_rel_error"] == pytest.approx(0.2)
    assert pred["worst_abs_rel_error"] == pytest.approx(0.2)
    assert pred["interval_contains_measured"] == 0.0  # the model read no parameter with a CI: no width
    assert res["rows"][2]["predicted_us"] is None  # an infinite prediction is no number in the JSON
    json.dumps(res, allow_nan=False, default=str)
    assert "| profile-driven heuristic | 0.707 | 0.500 |" in E.to_markdown(res)




def test_problem_file_reports_bad_lines(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"op": "add", "n": 4096, "dtype": "float32"}\nnope\n{"op": "pow", "n": 3}\n'
                 '{"op": "add", "n": -1}\n{"kind": "normalization", "op": "softmax"}\n\n')
    probs, bad = E.read_problems("pointwise", f)
    assert probs == [PW.PointwiseDescriptor("add", 4096, "float32")]
    assert [b.split(":")[1] for b in bad] == ["2", "3", "4", "5"]
    empty = tmp_path / "e.jsonl"
    empty.write_text("nope\n")
    with pytest.raises(E.ProblemFileError, match="no usable"):
        E.read_problems("pointwise", empty)


def test_cli_evaluate_json_on_the_sim(tmp_path, capsys):
    from calib.cli import main

    f = tmp_path / "p.jsonl"
    f.write_text('{"op": "exp", "n": 100000, "dtype": "float16"}\n{"op": "add", "n": 3e7}\nbad\n')
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--problems", str(f), "--backend", "sim",
                 "--json", "--db", f"sqlite:///{tmp_path}/t.sqlite"]) == 0
    out = capsys.readouterr()
    res = json.loads(out.out)
    assert res["evaluated"] == 2 and "p.jsonl:3" in out.err
    assert res["tuning_database"].endswith("t.sqlite")
    # recorded: a second run times nothing
    assert main(["heuristics", "evaluate", "--kind", "pointwise", "--problems", str(f), "--backend", "sim",
                 "--json", "--db", f"sqlite:///{tmp_path}/t.sqlite"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["autotune_counters"]["benchmarks"] == 0 and again["autotune_counters"]["hits"] == 2


def test_review_figures_and_notebook_cells(tmp_path):
    import nbformat

    from calib.heuristics import review

    res = E.evaluate("pointwise", count=8, seed=9)
    assert review.efficiency_figure(res).axes and review.prediction_figure(res).axes
    from pathlib import Path

    nb = nbformat.read(Path(__file__).parents[1] / "notebooks/review/heuristics_review.ipynb", as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_the_shared_output_check_passes_right_outputs_and_fails_wrong_or_unwritten_ones(monkeypatch):
    """check_output is what every family's GPU case runs before timing; here with NumPy for CuPy."""
    from calib.heuristics import knobs as K

    monkeypatch.setattr(K, "require_cupy", lambda what: np)

    class Case:
        def __init__(self, write):
            self.y, self.write = np.empty(4), write

        def run(self, k):
            self.write(self.y)

        def reference(self):
            return np.array([1.0, -2.0, 3.0, 1000.0])

    def right(y):
        y[:] = [1.0, -2.0, 3.0, 1000.0]

    def off_by_half_at_1000(y):
        y[:] = [1.0, -2.0, 3.0, 1000.5]

    assert K.check_output(Case(right), {}, 1e-12)
    with pytest.raises(AssertionError, match="nan"):
        K.check_output(Case(lambda y: None), {}, 1.0)  # wrote nothing: the NaN fill fails it
    # 0.5 / (1 + 1000) passes an element-relative 1e-3; 0.5 / 1000 fails a max-relative 1e-4
    assert K.check_output(Case(off_by_half_at_1000), {}, 1e-3)
    with pytest.raises(AssertionError, match=re.escape("max |y - ref| / max |ref| = 0.0005")):
        K.check_output(Case(off_by_half_at_1000), {}, 1e-4, relative_to="max")
