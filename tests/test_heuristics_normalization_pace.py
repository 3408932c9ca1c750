"""The normalization model's block pace (an SM's time per block when blocks are all it waits on):
the dispatch floor and the per-thread cost combined as a p-norm of BLOCK_PACE_NORM rather than
their maximum, judged on the H200 recordings (issue 14).

P (seed 12, H200, 2026-12-02, unseen when it ran) lost 0.801 on fp16 layer norm 23143 x 377: with the
maximum, 128 threads sat at the dispatch floor and were ranked first (24.6 us measured), where 32
threads ran 19.7 us. The p is the value of a small grid whose choices have the highest mean log
efficiency over A-M, the corrections refitted for each value (normalization/model.py has the numbers)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from calib.heuristics import normalization as N
from calib.heuristics.normalization import classes as N_classes
from calib.heuristics.normalization import l2_share as N_l2_share
from calib.heuristics.normalization import model as N_model
from calib.heuristics.knobs import Knobs
from calib.heuristics.predictor import q_of
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_recordings import R, recordings  # noqa: E402

P_SHORT_ROWS = {"op": "layernorm", "rows": 23143, "cols": 377, "dtype": "float16"}


def _recording(name):
    rec, prof = recordings("normalization")[name]
    return R / rec, load_profile(R / prof, device=None, software=None)


def _times(name, desc):
    from calib.heuristics.replay import load

    rec, _ = _recording(name)
    row = next(r for r in load(rec, N.KIND)["rows"] if r["descriptor"] == desc)
    return row["times_us"]


def test_the_pace_is_a_smooth_maximum_of_the_floor_and_the_threads():
    assert N.block_pace_us(32) == pytest.approx(N.DISPATCH_US, rel=0.01)
    assert N.block_pace_us(1024) == pytest.approx(1024 * N.THREAD_US, rel=0.01)
    at_crossover = max(N.DISPATCH_US, 128 * N.THREAD_US)
    assert N.block_pace_us(128) > 1.15 * at_crossover
    assert all(N.block_pace_us(t) < N.block_pace_us(2 * t) for t in N.THREADS[:-1])


def test_p_s_short_rows_take_a_thread_count_that_ran_within_5_percent(monkeypatch):
    """P's fp16 layer norm 23143 x 377 (176 rows per SM): the heuristic now takes 32 or 64 threads
    (19.7 and 20.6 us measured); with the maximum as the pace it took 128 (24.6 us, 0.801)."""
    _, prof = _recording("P")
    times = _times("P", P_SHORT_ROWS)
    best = min(times.values())
    k = N.heuristic(P_SHORT_ROWS, prof)
    assert best / times[k.autotune_name] > 0.95, dict(k)
    monkeypatch.setattr(N_model, "BLOCK_PACE_NORM", math.inf)
    old = N.heuristic(P_SHORT_ROWS, prof)
    assert old["threads"] == 128 and best / times[old.autotune_name] < 0.85


def test_the_model_orders_p_s_thread_counts_as_measured():
    """On P's short rows the measured time grows with the threads from 64 up (20.6, 24.6, 35.7,
    64.7 us at 64-512); so does the model's."""
    _, prof = _recording("P")
    q, d = q_of(prof), N.descriptor(P_SHORT_ROWS)
    ks = [Knobs(strategy="persistent", threads=t, vec=1, buffer=N.buffer_for(math.ceil(377 / t), 1))
          for t in (64, 128, 256, 512)]
    times = _times("P", P_SHORT_ROWS)
    measured = [times[k.autotune_name] for k in ks]
    model = [N.model_us(d, k, q) for k in ks]
    assert measured == sorted(measured) and model == sorted(model)


def _mean_log_efficiency(samples, c) -> float:
    """Mean log(best / chosen) over ``samples`` (N.recorded_samples), the choice made by
    N.choose_ranked from each candidate's corrected time under corrections ``c``."""
    logs = []
    with N.use_corrections(c):
        for d, cands, q in samples:
            ranked = sorted(((p * math.exp(c.log_factor(d, k)), i, k, t) for i, (k, t, p) in enumerate(cands)),
                            key=lambda x: (x[0], x[1]))
            chosen = N.choose_ranked(d, [(p, k) for p, _, k, _ in ranked], q)
            t = {k.autotune_name: t for _, _, k, t in ranked}
            logs.append(math.log(min(t.values()) / t[chosen.autotune_name]))
    return sum(logs) / len(logs)


def test_the_shipped_norm_beats_the_maximum_and_a_plain_sum_on_a_to_m(monkeypatch):
    """The selection the constant came from, on the recordings it was chosen on (A-M, each with
    its own profile): at BLOCK_PACE_NORM the choices' mean log efficiency is above that at the
    maximum (the old model) and at 2 (the next smoother value of the grid)."""
    pairs = [(R / r, R / p) for _, (r, p) in sorted(recordings("normalization", names="ABCDEFGHIJKLM").items())]
    shipped, score = N.BLOCK_PACE_NORM, {}
    for p in (shipped, math.inf, 2.0):
        monkeypatch.setattr(N_model, "BLOCK_PACE_NORM", p)
        samples = N.recorded_samples(pairs)
        score[p] = _mean_log_efficiency(samples, N.fit_all(samples))
    assert score[shipped] > score[math.inf] and score[shipped] > score[2.0], score


CALL3 = R / "2026-12-02-h200-suites-session4/call3/profile-full.json"  # session 4 call 3: L2 measured 36.9 MB


def test_the_reread_scale_is_the_hardware_l2_not_the_measured_capacity():
    """Two H200 profiles that measured 41.4 and 36.9 MB of L2 give the multi-pass re-read the same
    scale (0.70 x the 62.9 MB of the fingerprint); without a fingerprint the measured capacity."""
    own = q_of(_recording("K")[1])
    call3 = q_of(load_profile(CALL3, device=None, software=None))
    assert own("memory.l2.capacity_bytes") > 1.1 * call3("memory.l2.capacity_bytes")
    assert N.reread_scale_bytes(own) == N.reread_scale_bytes(call3) == pytest.approx(0.70 * 62914560)
    from calib.heuristics.predictor import q_of_values

    bare = q_of_values({"memory.l2.capacity_bytes": 30e6})
    assert N.reread_scale_bytes(bare) == 30e6


def _per_kernel_classes(monkeypatch):
    """The corrections' classes as before version 3 (one factor per compiled kernel, no multi-pass
    loop bands), refitted on A-M: what the constants below were judged with."""
    monkeypatch.setattr(N_classes, "loop_log2", lambda d, k: None)
    pairs = [(R / r, R / p) for _, (r, p) in sorted(recordings("normalization", names="ABCDEFGHIJKLM").items())]
    return N.fit_all(N.recorded_samples(pairs))


@pytest.mark.parametrize("name", ["E", "K"])
def test_a_refreshed_profile_keeps_the_worst_case(name, monkeypatch):
    """E and K replayed with call 3's profile (36.9 MB measured): worst 0.910 and 0.935 with the
    shipped corrections, on either scale. With the per-kernel corrections of A-M that the scale was
    chosen with: 0.890 and 0.935 as with their own profiles, and with the measured capacity as the
    scale 0.831 and 0.819 (multi-pass re-reads sent to DRAM by the smaller capacity)."""
    from calib.heuristics import evaluate as E

    rec, _ = _recording(name)
    prof = load_profile(CALL3, device=None, software=None)

    def worst():
        return E.evaluate("normalization", backend=f"replay:{rec}", profile=prof)["summary"]["heuristic"][
            "worst_efficiency"]

    hardware = N_l2_share.reread_scale_bytes
    measured = lambda q: q("memory.l2.capacity_bytes")  # noqa: E731
    assert worst() >= 0.85
    monkeypatch.setattr(N_l2_share, "reread_scale_bytes", measured)
    assert worst() >= 0.85
    monkeypatch.setattr(N_l2_share, "reread_scale_bytes", hardware)
    with N.use_corrections(_per_kernel_classes(monkeypatch)):
        assert worst() >= 0.85
        monkeypatch.setattr(N_l2_share, "reread_scale_bytes", measured)
        assert worst() < 0.85


def _capacity_moved(path, tmp_path, factor):
    """The profile at ``path`` with its measured L2 capacity (value, CI) and ramp end ``factor`` off, as
    another host's full run measures them (36.9-47.1 MB on the H200 full runs of 2026-12-01/02)."""
    import json

    doc = json.loads(Path(path).read_text())
    for name in ("memory.l2.capacity_bytes", "memory.l2.capacity_bytes.ramp_end"):
        rec = doc["params"][name]
        rec["value"] *= factor
        if rec.get("ci95"):
            rec["ci95"] = [x * factor for x in rec["ci95"]]
    out = tmp_path / f"profile-x{factor}.json"
    out.write_text(json.dumps(doc))
    return load_profile(out, device=None, software=None)


def _choices(name, prof) -> dict:
    from calib.heuristics.replay import load

    rec, _ = _recording(name)
    return {_key(r["descriptor"]): N.heuristic(r["descriptor"], prof).autotune_name
            for r in load(rec, N.KIND)["rows"] if r.get("times_us")}


def _key(desc) -> tuple:
    return tuple(sorted(desc.items()))


@pytest.mark.usefixtures("before_the_normalization_forest")
def test_the_choices_do_not_follow_the_measured_capacity(tmp_path, monkeypatch):
    """Every recorded problem of I (host 4's profile, 47.1 MB measured) gets the same choice with its
    profile's capacity at 0.78x and 1.1x (36.7 and 51.8 MB: the spread of seven hosts' full runs):
    the once-streamed L2 share and the pair group's edge are on 0.70 x the hardware L2 (44.0 MB:
    N.streamed_l2_fraction). With them on the measured capacity, I's fp16 layer norm 964 x 12568
    (48.5 MB, between 1.125 x 36.9 and 1.125 x 47.1 MB) is chosen differently at 0.78x."""
    own_path = recordings("normalization")["I"][1]
    own = _choices("I", _recording("I")[1])
    for factor in (0.78, 1.1):
        assert _choices("I", _capacity_moved(R / own_path, tmp_path, factor)) == own, factor
    from calib.heuristics import predictor as P

    monkeypatch.setattr(N_l2_share, "streamed_l2_fraction", lambda q, ws: P.streamed_l2_fraction(q, ws))
    before, moved = _choices("I", _recording("I")[1]), _choices("I", _capacity_moved(R / own_path, tmp_path, 0.78))
    assert {k for k in before if moved[k] != before[k]} == {
        _key({"op": "layernorm", "rows": 964, "cols": 12568, "dtype": "float16"})}


M_LONG_ROWS = {"op": "layernorm", "rows": 4538, "cols": 22176, "dtype": "float32"}  # 89 kB rows, 35 per SM
M_THREE_ROWS = {"op": "softmax", "rows": 344, "cols": 20568, "dtype": "float32"}  # 82 kB rows, 3 per SM


def _efficiency(name, desc, monkeypatch=None, **consts):
    if monkeypatch is not None:
        for k, v in consts.items():
            monkeypatch.setattr(N_model, k, v)
    _, prof = _recording(name)
    times = _times(name, desc)
    return min(times.values()) / times[N.heuristic(desc, prof).autotune_name]


@pytest.mark.usefixtures("before_the_normalization_forest")
def test_long_cycling_rows_overlap_their_memory_at_one_block_per_sm(monkeypatch):
    """M's fp32 layer norm 4538 x 22176: persistent v4 x 64 at 512 threads (one block per SM) ran
    within 1% of the best; without the in-flight overlap (INFLIGHT_SHARE 0) the model chose multi-pass
    at 1024 threads (0.852). M's fp32 softmax 344 x 20568 (three rows per SM, the SMs in phase) keeps
    multi-pass; with the overlap counted there too it goes persistent and loses (0.862; A's, J's and L's
    fp32 rows of 17-31k elements at 2-3 rows per SM 0.880-0.897)."""
    d, shipped = N.descriptor(M_LONG_ROWS), N.INFLIGHT_SHARE
    q = q_of(_recording("M")[1])
    assert N.overlapping_blocks(1, 35, d.cols * d.itemsize_bytes, q("memory.bytes_in_flight_per_sm"), True) > 1.3
    assert _efficiency("M", M_LONG_ROWS) > 0.99
    assert _efficiency("M", M_THREE_ROWS) > 0.99
    assert _efficiency("M", M_LONG_ROWS, monkeypatch, INFLIGHT_SHARE=0.0) < 0.86
    assert _efficiency("M", M_THREE_ROWS, monkeypatch, INFLIGHT_SHARE=shipped, INFLIGHT_MIN_ROWS_PER_SM=0) < 0.87


def test_the_shipped_inflight_share_beats_none_and_a_larger_one_on_a_to_m(monkeypatch):
    """The selection INFLIGHT_SHARE came from, on A-M with their own profiles and the corrections
    refitted per value: the choices' mean log efficiency at the shipped share is above that at 0 (no
    overlap) and at 0.5."""
    pairs = [(R / r, R / p) for _, (r, p) in sorted(recordings("normalization", names="ABCDEFGHIJKLM").items())]
    shipped, score = N.INFLIGHT_SHARE, {}
    for a in (shipped, 0.0, 0.5):
        monkeypatch.setattr(N_model, "INFLIGHT_SHARE", a)
        samples = N.recorded_samples(pairs)
        score[a] = _mean_log_efficiency(samples, N.fit_all(samples))
    assert score[shipped] > score[0.0] and score[shipped] > score[0.5], score


def test_multipass_blocks_of_one_wave_count_as_one_where_the_second_read_is_dram_s():
    """The stagger (STAGGER_WAVES): a call of one wave counts 1 block, four or more waves all R; while
    L2 serves part of the second read, or for persistent blocks, the resident blocks as before."""
    assert N.overlapping_blocks(8, 8, 115e3, 18.6e3, False, 0.0) == 1
    assert N.overlapping_blocks(4, 8, 115e3, 18.6e3, False, 0.0) == pytest.approx(1 + 3 * min(1, 1 / N.STAGGER_WAVES))
    assert N.overlapping_blocks(2, 8, 115e3, 18.6e3, False, 0.0) == 2
    assert N.overlapping_blocks(8, 8, 115e3, 18.6e3, False, 0.5) == 8
    assert N.overlapping_blocks(1, 3, 115e3, 18.6e3, True, 0.0) == 1


def _stagger_errors(names, monkeypatch, waves) -> list:
    """log(measured / corrected model) of every recorded multi-pass candidate of ``names`` whose plain
    time the shipped stagger moves, with STAGGER_WAVES = ``waves`` and the corrections refitted on A-M
    for it, one factor per compiled kernel as then (:func:`_per_kernel_classes`)."""
    monkeypatch.setattr(N_classes, "loop_log2", lambda d, k: None)
    pairs = lambda ns: [(R / r, R / p) for _, (r, p) in sorted(recordings("normalization", names=ns).items())]  # noqa: E731
    shipped = N.recorded_samples(pairs(names))
    monkeypatch.setattr(N_model, "STAGGER_WAVES", 0.0)
    base = N.recorded_samples(pairs(names))
    monkeypatch.setattr(N_model, "STAGGER_WAVES", waves)
    c = N.fit_all(N.recorded_samples(pairs("ABCDEFGHIJKLM")))
    out = []
    for (d, cands0, _), (_, moved, _), (_, cands, _) in zip(base, shipped, N.recorded_samples(pairs(names))):
        for (k, t, p0), (_, _, p1), (_, _, p) in zip(cands0, moved, cands):
            if k["strategy"] == "multipass" and abs(p1 / p0 - 1) > 1e-3:
                out.append(math.log(t / (p * math.exp(c.log_factor(d, k)))))
    return out


@pytest.mark.parametrize("names, count", [("ABCDEFGHIJKLM", 281), ("NOPQ", 59)])
def test_the_stagger_removes_the_one_wave_multipass_bias(names, count, monkeypatch):
    """The multi-pass candidates the stagger moves (one to three waves, second read from DRAM) ran a
    median log(measured / predicted) of +0.133 on A-M (281) and +0.155 on N-Q (59, not fitted on;
    R, which the value was picked with, left out) without it; +0.034 and +0.045 with it. (The loop-band
    classes of version 3, which split multi-pass kernels by vectors per thread, fitted without the
    stagger, take most of that bias too: +0.012 and +0.024.)"""
    import statistics

    with_stagger = _stagger_errors(names, monkeypatch, N.STAGGER_WAVES)
    without = _stagger_errors(names, monkeypatch, 0.0)
    assert len(with_stagger) == len(without) == count
    assert statistics.median(without) > 0.12 and abs(statistics.median(with_stagger)) < 0.06
