"""The autotune cache on the simulated device: keys, hits without benchmarking across processes,
candidates added and removed, wrong candidates, ties and agreement, stale entries and policies,
corrupt entries, shipped entries, early stop, the decorator, and the hit path's cost."""

import dataclasses
import enum
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from calib import autotune
from calib.autotune import AutotuneWarning, EarlyStop, descriptor_key
from calib.keys import descriptor_hash
from calib.store import sqlite_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autotune_helpers import CANDIDATES, Problem, model, run, tuner, workload  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def url(tmp_path):
    return sqlite_url(tmp_path / "autotune.sqlite")


# -- descriptors ---------------------------------------------------------------------------------

class Layout(str, enum.Enum):
    NCHW = "NCHW"


class Mode(enum.Enum):
    TENSOR = object()


@dataclasses.dataclass(frozen=True)
class Conv:
    n: int
    in_dtype: object
    layout: object
    pad: tuple
    _cached: int = 0


def test_equal_problems_have_equal_keys_whatever_their_spelling():
    a = descriptor_key(Conv(np.int64(32), np.float16, Layout.NCHW, (1, 1)))
    b = descriptor_key({"pad": [1, 1], "layout": "NCHW", "in_dtype": "half", "n": 32})
    c = descriptor_key({"n": 32, "in_dtype": np.dtype("float16"), "layout": Layout.NCHW, "pad": (np.int32(1), 1)})
    assert a == b == c
    assert descriptor_key({"n": 32, "in_dtype": "fp16", "layout": "NCHW", "pad": [1, 1], "extra": None}) != a
    assert descriptor_key({"n": 33, "in_dtype": "fp16", "layout": "NCHW", "pad": [1, 1]}) != a  # batch is in the key
    assert descriptor_key({"x": 1}) == descriptor_hash({"x": 1})  # the content-key module's hash
    assert descriptor_key({"x": 1}) != descriptor_key({"x": 1.0})
    assert descriptor_key({"mode": Mode.TENSOR}) == descriptor_key({"mode": "Mode.TENSOR"})


@pytest.mark.parametrize("bad, match", [({"x": {1, 2}}, r"descriptor\['x'\] is a builtins.set"),
                                        ({"in_dtype": "float17"}, "not a data type calib knows"),
                                        ({"x": object()}, "descriptor holds only"),
                                        ({"x": float("nan")}, "NaN"), ("conv", "not 'conv'")])
def test_unsupported_descriptor_fields_are_a_clear_error(bad, match):
    with pytest.raises(autotune.DescriptorError, match=match):
        descriptor_key(bad)


def test_keys_are_the_same_in_another_process():
    code = ("import sys; sys.path.insert(0, 'tests'); from autotune_helpers import Problem; "
            "from calib.autotune import descriptor_key; print(descriptor_key(Problem(8, 3)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == descriptor_key({"m": 8, "n": 3, "dtype": "fp32"})


# -- hits, misses, benchmarks --------------------------------------------------------------------

def test_a_second_process_does_no_benchmarking_and_returns_the_same_choices(url):
    problems = workload(12)
    first, fam, choices = run(url, problems)
    assert first.counters.misses == 12 and first.counters.benchmarks == 36 and first.counters.hits == 0
    code = ("import sys, json; sys.path.insert(0, 'tests'); from autotune_helpers import run, workload; "
            f"t, fam, ch = run({url!r}, workload(12), seed=5); "
            "print(json.dumps({'c': ch, 'n': t.counters.as_dict(), 'timed': fam.timed}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["c"] == choices and got["timed"] == []
    assert got["n"]["benchmarks"] == 0 and got["n"]["misses"] == 0 and got["n"]["hits"] == 12
    # the model's winners: alpha on small m, beta in the middle, gamma for big m
    assert choices[0] == "alpha" and choices[-1] == "gamma" and "beta" in choices


def test_repeated_hits_in_process_are_memo_lookups(url):
    t, fam, _ = run(url, workload(3))
    p = workload(3)[1]
    before = t.counters.benchmarks
    for _ in range(5):
        sel = t.select("toy", p, CANDIDATES)
    assert t.counters.benchmarks == before and t.counters.hits == 5 and sel.source == "tuned"
    assert sel.benchmarks == 0  # this call timed nothing (the first call's count was repeated)
    again = t.select("toy", {"m": p.m, "n": p.n, "dtype": "f4"}, CANDIDATES)  # a dict: by key, still no timing
    assert again.candidate == sel.candidate and t.counters.benchmarks == before


def test_a_repeated_hit_is_one_lookup_that_touches_nothing_else(url, monkeypatch):
    """The hit path's cost (<= 2 us, a dict lookup) is measured by bench/autotune.py, not here: a timed
    test failed on a loaded 2-core CI machine (1.6-2.1 us medians). What it rests on is pinned instead:
    a repeated call with the same descriptor and candidates reaches neither the selection, nor the
    tuning database, nor the shipped entries."""
    t, fam, _ = run(url, workload(1))
    p = workload(1)[0]
    first = t.select("toy", p, CANDIDATES)

    def untouched(*a, **k):
        raise AssertionError("a repeated hit left the lookup")

    monkeypatch.setattr(t, "_select", untouched)
    monkeypatch.setattr(t, "_load", untouched)
    monkeypatch.setattr(type(t), "db", property(untouched))
    hits, timed = t.counters.hits, list(fam.timed)
    for _ in range(1000):
        assert t.select("toy", p, CANDIDATES) is first
    assert t.counters.hits == hits + 1000 and fam.timed == timed


def test_adding_a_candidate_times_only_it_and_removing_one_times_nothing(url):
    problems = workload(6)
    run(url, problems)
    t, fam, choices = run(url, problems, CANDIDATES + ["delta"])
    assert fam.timed == ["delta"] * 6 and t.counters.misses == 6
    assert [c == "delta" for c in choices] == [p.n % 2 == 1 for p in problems]  # it wins where it is fastest
    t2, fam2, fewer = run(url, problems, ["beta", "gamma"])
    assert fam2.timed == [] and t2.counters.benchmarks == 0 and set(fewer) <= {"beta", "gamma"}


def test_a_wrong_candidate_never_wins_and_its_failure_is_recorded(url):
    t, fam, choices = run(url, workload(4), broken={"alpha"})
    assert "alpha" not in choices and "alpha" not in fam.timed and t.counters.failed_checks == 4
    entry = t.entry("toy", workload(4)[0])
    assert entry.timings["alpha"].status == "wrong" and "tolerance" in entry.timings["alpha"].reason
    t2, fam2, again = run(url, workload(4))  # not checked or timed again: the failure is cached
    assert fam2.timed == [] and fam2.checked == [] and again == choices


def test_nothing_survives_is_an_error_naming_the_reasons(url):
    with pytest.raises(autotune.NoCandidateSurvived, match="wrong"):
        run(url, workload(1), broken=set(CANDIDATES))


# -- ties and agreement ---------------------------------------------------------------------------

def test_ties_go_to_the_earliest_in_the_preference_order(url, tmp_path):
    winners = set()
    for seed in range(6):
        _, _, ch = run(sqlite_url(tmp_path / f"s{seed}.sqlite"), workload(1), ["twin", "alpha", "gamma"], seed=seed)
        winners.add(ch[0])
    assert winners == {"twin"}
    _, _, ch = run(sqlite_url(tmp_path / "rev.sqlite"), workload(1), ["alpha", "twin", "gamma"], seed=1)
    assert ch == ["alpha"]


def test_decide_rule():
    T = autotune.Timing
    timings = {"a": T("a", "ok", 10.08, 10.07, 10.09), "b": T("b", "ok", 10.0, 9.99, 10.01),
               "c": T("c", "ok", 9.0, 8.95, 9.05), "d": T("d", "wrong", reason="x")}
    assert autotune.decide(timings, ["d", "a", "b", "c"]).winner == "c"
    assert autotune.decide(timings, ["a", "b"]).winner == "a"  # within 1% of b: tied, a is preferred
    assert autotune.decide(timings, ["a", "b"], tie_rel=0.0).winner == "b"  # CIs apart: b
    assert autotune.decide(timings, ["d"]) is None


def test_two_independent_tunes_agree(tmp_path):
    """The agreement rate of two tunes with different noise seeds, and what disagreeing costs."""
    problems = workload(60)
    cands = ["twin", "alpha", "beta", "gamma"]
    _, _, a = run(sqlite_url(tmp_path / "a.sqlite"), problems, cands, seed=11)
    _, _, b = run(sqlite_url(tmp_path / "b.sqlite"), problems, cands, seed=12)
    agree = sum(x == y for x, y in zip(a, b)) / len(problems)
    gaps = [abs(model(p, x) / model(p, y) - 1) for p, x, y in zip(problems, a, b) if x != y]
    assert agree >= 0.95, (agree, gaps)
    assert all(g <= 0.03 for g in gaps)  # where they disagree, within noise


class _Drifting:
    """Two candidates of equal true time (100 us) timed on a machine with one slow phase: the
    ``slow_call``-th timing in the process runs 50% slow (a clock still ramping, a neighbour)."""

    def __init__(self, slow_call: int, seed: int):
        self.calls, self.slow_call, self.rng = 0, slow_call, np.random.default_rng(seed)

    def time(self, candidate):
        from calib.timing import Measurement

        factor = 1.5 if self.calls == self.slow_call else 1.0
        self.calls += 1
        return Measurement(100.0 * factor * (1 + 0.001 * self.rng.standard_normal(20)))


@pytest.mark.parametrize("rounds, agree", [(1, False), (3, True)])
def test_interleaved_rounds_keep_a_slow_phase_from_picking_the_winner(tmp_path, rounds, agree):
    """Timed one after another, whichever candidate meets the slow phase loses, so two tunes whose
    slow phase falls on different candidates disagree (the H200's conv tunes did, 2026-12-01). In
    interleaved rounds the slow round widens that candidate's CI: the two tie and the preference
    order decides, the same in both tunes."""
    choices, counts = [], []
    for i, slow_call in enumerate((0, 1)):
        t = autotune.Autotuner({"name": "toy GPU", "compute_capability": "9.0", "sm_count": 132}, {"calib": "t"},
                               url=sqlite_url(tmp_path / f"{i}.sqlite"))
        fam = _Drifting(slow_call, seed=i)
        sel = t.select("drift", {"n": 1}, ["first", "second"], time=fam.time, rounds=rounds)
        choices.append(sel.candidate)
        counts.append((t.counters.benchmarks, fam.calls))
    assert (choices[0] == choices[1]) is agree, choices
    if agree:
        assert choices == ["first", "first"]
    assert counts == [(2, 2 * rounds)] * 2  # one benchmark per candidate, `rounds` timings each


def test_rounds_check_each_candidate_once_and_keep_failures(url):
    from calib.backends.base import UnsupportedConfig
    from calib.timing import Measurement

    checked, timed = [], []

    def check(c):
        checked.append(c)
        return c != "wrong"

    def time_(c):
        timed.append(c)
        if c == "unsupported":
            raise UnsupportedConfig("not on this GPU")
        return Measurement(np.full(10, {"fast": 10.0, "slow": 20.0}[c]) * (1 + 1e-4 * np.arange(10)))

    t = autotune.Autotuner({"name": "toy GPU", "compute_capability": "9.0", "sm_count": 132}, url=url)
    sel = t.select("r", {"n": 2}, ["slow", "wrong", "unsupported", "fast"], time=time_, check=check, rounds=3)
    assert sel.candidate == "fast"
    assert checked == ["slow", "wrong", "unsupported", "fast"]
    assert timed.count("fast") == timed.count("slow") == 3 and timed.count("unsupported") == 1
    entry = t.entry("r", {"n": 2})
    assert entry.timings["wrong"].status == "wrong" and entry.timings["unsupported"].status == "unsupported"
    assert entry.timings["fast"].n_samples == 30


def test_rounds_honour_an_early_stop(url):
    from calib.timing import Measurement

    timed = []

    def time_(c):
        timed.append(c)
        return Measurement(np.full(10, {"a": 10.0, "b": 9.0, "c": 8.0}[c]))

    t = autotune.Autotuner({"name": "toy GPU", "compute_capability": "9.0", "sm_count": 132}, url=url)
    sel = t.select("e", {"n": 3}, ["a", "b", "c"], time=time_, rounds=2, early_stop=EarlyStop(bound_us=9.5,
                                                                                               fraction=0.9))
    assert sel.candidate == "a" and "c" not in timed  # a reached 95% of the bound: b and c skipped
    assert t.entry("e", {"n": 3}).timings["c"].status == "skipped"


# -- stale entries and policies -------------------------------------------------------------------

def test_a_stale_entry_is_reported_with_its_fields_and_the_policy_decides(url):
    run(url, workload(3))
    newer = {"driver": "999.1", "calib": "9.9"}
    with pytest.warns(AutotuneWarning, match=r"stale \(driver: .* -> '999.1'"):
        t, fam, _ = run(url, workload(3), software=newer, policy="use")
    assert t.counters.stale == 3 and fam.timed == [] and t.counters.hits == 3
    t, fam, _ = run(url, workload(3), software=newer, policy="retune")
    assert t.counters.stale == 3 and len(fam.timed) == 9
    t, fam, _ = run(url, workload(3), software=newer, policy="use")  # retuned: fresh now
    assert t.counters.stale == 0


def test_verify_retimes_the_winner_once_and_retunes_only_when_it_got_slower(url):
    _, _, choices = run(url, workload(3))
    t, fam, again = run(url, workload(3), software={"driver": "999.1"}, policy="verify")
    assert t.counters.stale == 3 and t.counters.benchmarks == 3 and again == choices
    assert [c for c in fam.timed] == choices  # only the cached winners, once each
    t, fam, _ = run(url, workload(3), software={"driver": "999.1"})
    assert t.counters.stale == 0 and fam.timed == []  # verified entries carry today's fields
    t, fam = tuner(url, software={"driver": "1000"})
    fam.speed = 1.5  # the new driver made everything slower: the winner fails its verification
    for p in workload(3):
        tm, ck = fam.bind(p)
        t.select("toy", p, CANDIDATES, time=tm, check=ck)
    assert t.counters.benchmarks == 3 + 9


# -- robustness -----------------------------------------------------------------------------------

def test_a_corrupt_entry_is_reported_and_retuned_alone(url):
    problems = workload(4)
    run(url, problems)
    engine = create_engine(url)
    with engine.begin() as c:
        c.execute(text("UPDATE autotune_entry SET software = '{not json' WHERE descriptor_key = :k"),
                  {"k": descriptor_key(problems[1])})
        c.execute(text("UPDATE autotune_timing SET status = 'bogus' WHERE entry_id = (SELECT id FROM autotune_entry "
                       "WHERE descriptor_key = :k) AND candidate = 'beta'"), {"k": descriptor_key(problems[2])})
    engine.dispose()
    with pytest.warns(AutotuneWarning, match="is corrupt"):
        t, fam, _ = run(url, problems)
    assert t.counters.corrupt == 2 and t.counters.hits == 2 and t.counters.misses == 2 and len(fam.timed) == 6
    t, fam, _ = run(url, problems)
    assert t.counters.corrupt == 0 and fam.timed == []  # repaired


def test_a_killed_tune_leaves_the_cache_usable_and_is_resumed(url, tmp_path):
    flag = tmp_path / "timed"
    code = ("import sys, os, time; sys.path.insert(0, 'tests'); from autotune_helpers import tuner, workload, "
            f"CANDIDATES; t, fam = tuner({url!r}); p = workload(2)[1]; tm, ck = fam.bind(p)\n"
            "def slow(c):\n"
            "    m = tm(c)\n"
            f"    open({str(flag)!r}, 'a').write(c + '\\n')\n"
            "    if c == 'beta': time.sleep(60)\n"
            "    return m\n"
            "t.select('toy', p, CANDIDATES, time=slow, check=ck)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    deadline = time.time() + 60
    while time.time() < deadline and not (flag.exists() and "beta" in flag.read_text()):
        time.sleep(0.1)
    time.sleep(0.3)
    proc.kill()
    proc.wait()
    t, fam, choices = run(url, workload(2))
    assert fam.timed.count("alpha") == 1 and fam.timed.count("gamma") == 2  # alpha of problem 1 was kept
    assert len(fam.timed) == 3 + 2 and t.counters.corrupt == 0


def test_two_processes_tuning_the_same_keys_leave_one_consistent_entry(url):
    run(url, workload(1))  # create the schema first, as any first user does
    code = ("import sys, json; sys.path.insert(0, 'tests'); from autotune_helpers import run, workload; "
            f"t, fam, ch = run({url!r}, workload(10), seed=int(sys.argv[1])); print(json.dumps(ch))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(s)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for s in (1, 2, 3)]
    outs = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    engine = create_engine(url)
    with engine.connect() as c:
        per_key = c.execute(text("SELECT descriptor_key, count(*) FROM autotune_entry GROUP BY descriptor_key")).all()
        per_timing = c.execute(text("SELECT entry_id, candidate, count(*) FROM autotune_timing "
                                    "GROUP BY entry_id, candidate HAVING count(*) > 1")).all()
    engine.dispose()
    assert len(per_key) == 10 and all(n == 1 for _, n in per_key) and per_timing == []
    t, fam, stored = run(url, workload(10))
    assert fam.timed == [] and outs[0] == outs[1] == outs[2] == stored  # everyone returns what is stored
    for p in workload(10):  # each entry's winner is the rule applied to its stored timings
        e = t.entry("toy", p)
        assert e.winner == autotune.decide(e.timings, CANDIDATES).winner


# -- shipped entries, early stop, the decorator -------------------------------------------------

def test_lookup_order_user_then_shipped_then_tune(url, tmp_path):
    from calib.autotune import jsonl
    from calib.autotune.storage import AutotuneDB

    _, _, choices = run(url, workload(4))
    shipped = tmp_path / "profiles"
    shipped.mkdir()
    jsonl.export(AutotuneDB(url), shipped / "simulated.autotune.jsonl")
    fresh = sqlite_url(tmp_path / "fresh.sqlite")
    t, fam, got = run(fresh, workload(5), shipped_dir=shipped)
    assert got[:4] == choices and t.counters.shipped_hits == 4 and t.counters.misses == 1 and len(fam.timed) == 3
    sel = t.select("toy", workload(4)[0], CANDIDATES)
    assert sel.source == "shipped"


def test_early_stop_skips_the_rest_once_a_candidate_is_near_the_bound(url):
    t, fam = tuner(url)
    p = Problem(8, 2)
    tm, ck = fam.bind(p)
    bound = model(p, "alpha") * 0.95
    sel = t.select("toy", p, ["alpha", "beta", "gamma"], time=tm, check=ck, early_stop=EarlyStop(bound, 0.9))
    assert sel.candidate == "alpha" and fam.timed == ["alpha"]
    assert t.entry("toy", p).timings["gamma"].status == "skipped"
    t2, fam2 = tuner(url)
    assert t2.select("toy", p, ["alpha", "beta", "gamma"]).candidate == "alpha" and t2.counters.hits == 1


def test_the_decorator_form(url):
    calls = []
    impl = {"slow": lambda x: calls.append("slow") or x * 2, "fast": lambda x: calls.append("fast") or x + x,
            "wrong": lambda x: calls.append("wrong") or x * 3}
    times = {"slow": 5.0, "fast": 1.0, "wrong": 0.1}
    t, _ = tuner(url)
    last = {}

    def timer(thunk):
        name = last["name"]
        thunk()
        return autotune.Timing and __import__("calib.timing").timing.Measurement([times[name]] * 10)

    def describe(x):
        return (x,)

    def candidates_tracking():
        out = {}
        for n, f in impl.items():
            def g(x, n=n, f=f):
                last["name"] = n
                return f(x)
            out[n] = g
        return out

    @autotune.tuned("double", candidates_tracking(), describe=describe, autotuner=lambda: t, timer=timer,
                    reference=lambda x: 2 * x, compare=lambda out, ref: out == ref)
    def double(x):
        """Twice x."""

    assert double(21) == 42 and double(21) == 42
    assert t.entry("double", (21,)).winner == "fast" and t.counters.hits == 1
    assert t.entry("double", (21,)).timings["wrong"].status == "wrong" and double.__doc__ == "Twice x."


def test_the_decorator_keeps_the_functions_identity_and_caches_per_descriptor_with_kwargs(url):
    """functools.wraps in full: help(), inspect.signature and tools that read __qualname__ or
    __module__ see the decorated function; a keyword argument is part of the problem it describes."""
    import inspect

    t, _ = tuner(url)
    impl = {"only": lambda x, *, scale=1: x * scale}

    def timer(thunk):
        thunk()
        return __import__("calib.timing").timing.Measurement([1.0] * 10)

    @autotune.tuned("scaled", impl, describe=lambda x, *, scale=1: {"x": x, "scale": scale}, autotuner=lambda: t,
                    timer=timer)
    def scaled(x: int, *, scale: int = 1) -> int:
        """x times scale."""

    assert scaled.__qualname__.endswith("<locals>.scaled") and scaled.__module__ == __name__
    assert scaled.__doc__ == "x times scale." and str(inspect.signature(scaled)) == "(x: int, *, scale: int = 1) -> int"
    assert scaled.__annotations__ == {"x": int, "scale": int, "return": int}
    assert scaled(3, scale=2) == 6 and scaled(x=3, scale=2) == 6 and scaled(3) == 3
    assert t.counters.misses == 2 and t.counters.hits == 1


def test_importing_autotune_is_light():
    code = ("import sys, calib.autotune; bad = [m for m in ('numpy', 'sqlalchemy', 'cupy') if m in sys.modules]; "
            "assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ})
    assert out.returncode == 0, out.stderr
