"""The learned predictor on the simulated device: a library op below the machine's peak, learned
from three sizes, predicted from L2-resident sizes to gigabytes; stored in and read from a profile;
fed from the tuning database."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from calib.backends.sim import SimBackend
from calib.heuristics import learned as L
from calib.heuristics import predictor as P
from calib.heuristics.simdevice import sim_profile, truth_q
from calib.timing import Measurement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_recordings import FOLDERS, R, read_json  # noqa: E402


@pytest.fixture(scope="module")
def sim():
    return SimBackend(seed=5)


@pytest.fixture(scope="module")
def prof(sim):
    return sim_profile(sim)


def op_true_us(nbytes, q):
    """A library op that runs 1.7x below DRAM peak, 2.1x below L2's, with 7 us of fixed cost and
    the L2 share a once-streamed set has (streamed_l2_fraction); plus a wave tail the learned model does not have."""
    f = P.streamed_l2_fraction(q, nbytes)
    dram = q("memory.dram.copy_bandwidth_gbps.align16") / 1.7 * 1e3
    l2 = q("memory.l2.read_bandwidth_gbps") / 2.1 * 1e3
    blocks = max(1, nbytes // (256 * 16))
    tail = 1 + 0.02 * (P.imbalance(blocks, 132) - 1)
    return 7.0 + nbytes * (f / l2 + (1 - f) / dram) * tail


def measure_fn(sim):
    q = truth_q(sim)

    def measure(nbytes):
        s = sim.sample_matrix(np.array([op_true_us(nbytes, q)]), 20)[0]
        return Measurement(s, stop_reason="max_samples", simulated=True)

    return measure


def test_learned_from_three_sizes_predicts_the_tail(sim, prof):
    model = L.learn("sim_op", measure=measure_fn(sim), profile=prof)
    assert model.assumed == ()
    q = truth_q(sim)
    sizes = np.geomspace(16e3, 4e9, 40)
    errs = np.array([abs(model.predict_us(b) / op_true_us(b, q) - 1) for b in sizes])
    assert np.quantile(errs, 0.9) <= 0.05 and errs.max() <= 0.20, errs
    # a least-squares line through the same three sizes misses the tail
    xs = L.default_sizes(prof)
    ts = [float(np.mean(measure_fn(sim)(b).samples_us)) for b in xs]
    slope, icpt = np.polyfit(xs, ts, 1)
    line = np.array([abs((icpt + slope * b) / op_true_us(b, q) - 1) for b in sizes])
    assert line.max() > 2 * errs.max()
    assert model.ci95["rate_gbps"][0] < model.rate_gbps < model.ci95["rate_gbps"][1]


def test_interval_covers_truth_over_seeds(prof):
    """Over independent simulated measurements the 95% interval at a new size contains the true
    time at about 95% (the noise the fit sees is the only error: the truth is in the model, the
    profile's DRAM fill included, which a rate learned at a few hundred MB would otherwise carry to 3 GB)."""
    hits = pi_hits = 0
    n = 120
    fill = L.dram_fill_us(P.q_of(prof))
    for seed in range(n):
        sim = SimBackend({"noise": {"rel_sd": 0.02, "outlier_rate": 0.0}}, seed=seed)
        q = truth_q(sim)

        def true(b, q=q):
            f = P.streamed_l2_fraction(q, b)
            return 5.0 + (1 - f) * fill + b * (f / 4e6 + (1 - f) / 2.5e6)

        def measure(b, true=true, sim=sim):
            return Measurement(sim.sample_matrix(np.array([true(b)]), 10)[0], stop_reason="max_samples")

        m = L.learn("cov", measure=measure, profile=prof)
        truth = true(3e9)
        p = m.predict(3e9)
        lo, hi = p.ci95
        hits += lo <= truth <= hi
        pi_hits += p.pi95[0] <= truth <= p.pi95[1]
        assert p.pi95[0] <= lo and hi <= p.pi95[1] and not m.flags
    assert 0.88 <= hits / n <= 0.995, hits / n
    assert pi_hits >= hits and pi_hits / n >= 0.95  # the model's error of shape, absent here, only widens it


def test_learned_model_is_stored_in_and_read_from_the_profile(tmp_path, sim, prof):
    import calib

    model = L.learn("sim_op", measure=measure_fn(sim), profile=prof)
    path = tmp_path / "p.json"
    model.save(path, prof)
    back = calib.load_profile(path, device=None)
    for name in ("t0_us", "rate_gbps", "l2_rate_gbps"):
        assert f"learned.sim_op.{name}" in back
    m2 = L.LearnedModel.from_profile(back, "sim_op")
    assert m2.predict_us(1e9) == pytest.approx(model.predict_us(1e9), rel=1e-9)
    assert back.record("learned.sim_op.rate_gbps").unit == "GB/s"
    with pytest.raises(L.HeuristicError, match="no learned model"):
        L.LearnedModel.from_profile(back, "other")


def test_only_dram_sizes_assume_the_l2_rate_from_the_profile(sim, prof):
    m = L.learn("big_only", measure=measure_fn(sim), profile=prof, sizes=[2e8, 8e8, 3e9])
    assert m.assumed == ("l2_rate_gbps",)
    assert m.records()["learned.big_only.l2_rate_gbps"]["flags"]


def test_tuning_results_feed_the_fit(tmp_path, sim):
    from calib.heuristics.evaluate import evaluate

    url = f"sqlite:///{tmp_path}/t.sqlite"
    res = evaluate("pointwise", count=12, seed=4, db=url)
    assert res["evaluated"] == 12
    dev, _ = SimBackend(seed=4).fingerprint()
    prof = sim_profile(SimBackend(seed=4))
    m = L.learn_from_autotune("pointwise_best", "heuristics.pointwise",
                              lambda d: (3 if d["op"] in ("add", "mul", "maximum") else 2) * d["n"]
                              * {"float16": 2, "float32": 4, "float64": 8}[d["dtype"]],
                              device=dev, url=url, profile=prof)
    dram = prof.query("memory.dram.copy_bandwidth_gbps.align16")
    assert 0.5 * dram < m.rate_gbps < 1.1 * dram


def test_library_op_evaluation_on_the_sim_reports_learned_line_and_roofline():
    from calib.heuristics import learned_eval

    profile = sim_profile(SimBackend(seed=1))  # the one evaluate_ops("sim") builds
    res = learned_eval.evaluate_ops("sim", profile=profile)
    assert res["version"] == 2 and len(res["sizes_bytes"]) == 34
    # the 34 sizes hold the 12 of the earlier grid, whose errors are reported beside
    assert np.allclose(res["sizes_bytes"][::3], np.geomspace(64e3, 4e9, 12), rtol=1e-12)
    for name, r in res["ops"].items():
        assert r["learned"]["p90"] <= 0.05 and r["learned"]["worst"] <= 0.20, name
        assert r["learned_12"]["p90"] <= 0.05 and r["learned_12"]["worst"] <= 0.20, name
        assert r["roofline"]["median"] > r["learned"]["median"]
        # every learning sample and every pass is kept, so a changed model can be replayed on the file
        assert len(r["learning_samples_us"]) == len(res["learning_points_bytes"]) == 18
        assert len(r["measured_passes_us"]) == learned_eval.PASSES
        refit = L.fit(name, res["learning_points_bytes"], r["learning_samples_us"], profile)
        assert [refit.predict_us(b) for b in res["sizes_bytes"]] == pytest.approx(r["predicted_us"], rel=1e-4)
    assert "| sim_multiply |" in learned_eval.to_markdown(res)


def test_learning_points_spread_each_size_over_its_band():
    nominal = [6e5, 2e7, 2e9]
    pts = L.learning_points(nominal)
    assert len(pts) == len(L.OFFSETS) * 3 == 18
    for i, (b, s) in enumerate(zip(nominal, L.SPREAD)):
        mine = pts[i * len(L.OFFSETS):(i + 1) * len(L.OFFSETS)]
        assert len(set(mine)) == len(mine)
        assert all(b / s <= p <= b * s for p in mine)
        assert max(mine) / min(mine) > s  # the points span most of the band, not one corner
    assert L.learning_points([1e6, 2e6, 3e6, 4e6], spread=(1.1,))[-1] <= 4e6 * 1.1  # further sizes: the last


def test_the_default_bands_stay_in_their_memory_level(prof):
    """The L2 band is L2-resident and the DRAM band from DRAM by the model's own L2 share, so each pins
    its rate; on a profile whose measured capacity exceeds the L2 scale the L2 size is lowered to fit."""
    q = P.q_of(prof)
    pts = L.learning_points(L.default_sizes(prof))
    f = [P.streamed_l2_fraction(q, b, scale_bytes=P.l2_scale_bytes(q)) for b in pts]
    assert all(x == 1.0 for x in f[:12]) and all(x == 0.0 for x in f[12:]), f
    from calib import Profile

    big = Profile({"memory.l2.capacity_bytes": {"value": 80e6, "unit": "bytes"},
                   "memory.l2.capacity_bytes.ramp_end": {"value": 90e6, "unit": "bytes"}},
                  device={"name": "a GPU", "l2_bytes": 60e6})  # the scale: 0.7 of the hardware's 60 MB
    nominal = L.default_sizes(big)
    assert nominal[1] * L.SPREAD[1] == pytest.approx(L.L2_BAND_TOP * P.l2_scale_bytes(P.q_of(big)))
    assert nominal[1] < 80e6 / 2
    assert nominal[2] == 4 * 80e6


def wobbly_op(q, nominal_bytes, wobble_us=0.8, tile_bytes=16384):
    """An op whose launch-bound time carries its last partial tile's share (cupy.sum's on the H200:
    5.9 us at 477 kB, 6.5-6.6 us at 64, 175 and 735 kB), the nominal learning size at phase 0.95,
    near the band's top, as cupy.sum's 735 kB was; its true middle is t0 + wobble/2."""

    def true(b):
        f = P.streamed_l2_fraction(q, b)
        phase = ((b - nominal_bytes) / tile_bytes + 0.95) % 1
        return 6.0 + wobble_us * phase + b * (f / 8e6 + (1 - f) / 4e6) + (1 - f) * L.dram_fill_us(q)

    return true


def test_points_around_the_launch_size_pin_the_middle_of_a_tile_wobble(prof):
    """One launch-bound size sets t0 wherever its tile phase falls; the learning points set the middle."""
    sim = SimBackend({"noise": {"rel_sd": 0.005, "outlier_rate": 0.0}}, seed=3)
    q = truth_q(sim)
    nominal = L.default_sizes(prof)
    true = wobbly_op(q, nominal[0])

    def measure(b):
        return Measurement(sim.sample_matrix(np.array([true(b)]), 20)[0], stop_reason="max_samples")

    spread = L.learn("wobbly", measure=measure, profile=prof)  # default sizes: each at its points
    single = L.learn("wobbly", measure=measure, profile=prof, sizes=nominal)  # as given: one point each
    middle = 6.0 + 0.8 / 2
    assert abs(spread.t0_us - middle) < 0.2 * 0.8
    assert single.t0_us - middle > 0.35 * 0.8
    # over the launch-bound band the spread model's worst error is about half the single one's
    sizes = np.geomspace(64e3, 4e6, 60)
    worst = [max(abs(m.predict_us(b) / true(b) - 1) for b in sizes) for m in (spread, single)]
    assert worst[0] < 0.75 * worst[1], worst


def test_the_dram_fill_is_littles_law_over_the_profile_and_moves_the_dram_line(prof):
    q = P.q_of(prof)
    fill = L.dram_fill_us(q)
    expect = (q("device.sm_count") * q("memory.bytes_in_flight_per_sm")
              / (q("memory.dram.copy_bandwidth_gbps.align16") * 1e3))
    assert fill == pytest.approx(expect) and 0.1 < fill < 2.0
    m = L.LearnedModel("k", 5.0, 2000.0, 4000.0, l2_scale_bytes=4e7, dram_fill_us=fill)
    # all of the fill on DRAM-sized sets, none on L2-resident ones
    assert m.predict_us(1e9) - L.LearnedModel("k", 5.0, 2000.0, 4000.0, l2_scale_bytes=4e7).predict_us(1e9) \
        == pytest.approx(fill)
    assert m.predict_us(1e6) == pytest.approx(5.0 + 1e6 / 4e6)


# The H200 recordings whose learned evaluation read the profile tests/h200_recordings.py names for them
# (recordings.md: D-E host 3, F-G host 4, H host 5); A-C's ran with a shipped profile no results folder keeps
# (their learning sizes are 1/64 of a 45.9 MB L2, not host 1's or 2's 43.4-43.8 MB).
RECORDINGS = {n: (folder, prof) for n, (folder, _, prof) in FOLDERS.items() if n in "DEFGH"}


def replay(rec, op):
    """The recording's learning means (its model is an exact fit of three numbers to three sizes, so it
    passes through each size's mean; stored before the fill, so read with none), refitted by today's fit;
    returns the errors at the recorded sizes."""
    import calib

    path, prof_path = RECORDINGS[rec]
    d = read_json(R / path / "heuristics-learned.json.gz")
    prof = calib.load_profile(R / prof_path, device=None, software=None)
    rs = d["ops"][op]["model"]
    old = L.LearnedModel(op, *(rs[f"learned.{op}.{n}"]["value"] for n in ("t0_us", "rate_gbps", "l2_rate_gbps")),
                         l2_scale_bytes=d["learned_at_bytes"][0] * 64)
    means = [old.predict_us(b) for b in d["learned_at_bytes"]]
    new = L.fit(op, d["learned_at_bytes"], [[t, t] for t in means], prof)
    return {b: new.predict_us(b) / t - 1 for b, t in zip(d["sizes_bytes"], d["ops"][op]["measured_us"])}


@pytest.mark.parametrize("rec", sorted(RECORDINGS))
def test_recorded_dram_sizes_replay_within_the_fill(rec):
    """cupy.multiply is one kernel: with the profile's fill its DRAM sizes (72 MB-4 GB) are within 1%
    (without it 72 MB missed by 1.2-2.1%). cupy.sum is two (CUB), its fill above the profile's: within
    6% (without it 72 MB missed by 6.2-7.9% on D-H)."""
    mul = replay(rec, "cupy_multiply")
    assert max(abs(e) for b, e in mul.items() if b > 6e7) <= 0.01, mul
    tot = replay(rec, "cupy_sum")
    assert max(abs(e) for b, e in tot.items() if b > 6e7) <= 0.06, tot
    for op in ("cupy_multiply", "cupy_softmax_rows4096"):
        errs = sorted(abs(e) for e in replay(rec, op).values())
        assert errs[-2] <= 0.05 and errs[-1] <= 0.20, (op, errs)


def replay_samples(name, op, scale=True):
    """A format-2 recording's learning samples refitted by today's fit, with its own profile: the errors
    at the recorded sizes. ``scale``: the L2 share on P.l2_scale_bytes (shipped), else on the measured
    capacity (the model before 2026-12-02's session 6)."""
    import calib

    folder, _, prof_path = FOLDERS[name]
    d = read_json(R / folder / "heuristics-learned.json.gz")
    prof = calib.load_profile(R / prof_path, device=None, software=None)
    o = d["ops"][op]
    if scale:
        m = L.fit(op, d["learning_points_bytes"], o["learning_samples_us"], prof)
    else:
        cap = P.q_of(prof)("memory.l2.capacity_bytes")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(P, "l2_scale_bytes", lambda q: cap)
            m = L.fit(op, d["learning_points_bytes"], o["learning_samples_us"], prof)
    return {b: m.predict_us(b) / t - 1 for b, t in zip(d["sizes_bytes"], o["measured_us"])}


@pytest.mark.parametrize("name", ["Q", "R", "S"])
def test_on_the_hardware_l2_scale_a_sum_of_37_mb_is_predicted_from_l2(name):
    """The shipped profile's capacity (36.9 MB) put cupy.sum's 36.9 MB working set partly at DRAM speed,
    10-12% slow; it ran from L2 on every host. On the scale (44.0 MB) it is within 2%, and the worst
    error at any size within 7.5% (was 10.2-11.6%); the other ops' p90 and worst move by less than a point
    (Q's softmax p90 3.5 -> 4.1%)."""
    on_scale, on_cap = replay_samples(name, "cupy_sum"), replay_samples(name, "cupy_sum", scale=False)
    at = min(on_scale, key=lambda b: abs(b - 36.9e6))
    assert on_cap[at] > 0.10 and abs(on_scale[at]) < 0.02
    assert max(map(abs, on_cap.values())) > 0.10 and max(map(abs, on_scale.values())) < 0.075
    for op in ("cupy_multiply", "cupy_softmax_rows4096"):
        a = sorted(map(abs, replay_samples(name, op).values()))
        b = sorted(map(abs, replay_samples(name, op, scale=False).values()))
        assert abs(a[-4] - b[-4]) < 0.01 and abs(a[-1] - b[-1]) < 0.01, op


LIVE_BANDS = {seed: f"2026-12-03-h200-heuristics-s11{'' if seed < 35 else 'c2'}/heuristics-seed{seed}"
              for seed in range(32, 38)}  # the first H200 runs learning over the bands (2026-12-03)
LIVE_BANDS.update({seed: f"2026-12-04-h200-heuristics-s12/heuristics-seed{seed}" for seed in range(38, 42)})


@pytest.mark.parametrize("seed", sorted(LIVE_BANDS))
def test_learned_over_the_bands_on_the_h200_every_op_meets_the_bar(seed):
    """The live runs' own learning samples (six points over each band) refitted by today's fit: every op's
    error at the 34 sizes has a p90 (the 4th worst) of at most 5% and a worst case of at most 20%
    (live: cupy.sum p90 4.4-4.9%, where over the +-5% points it was 5.1-7.1% on every recording)."""
    import calib

    d = read_json(R / LIVE_BANDS[seed] / "heuristics-learned.json.gz")
    prof = calib.load_profile(R.parents[1] / "profiles" / "nvidia-h200.json", device=None, software=None)
    assert d["learning_points_bytes"] == L.learning_points(L.default_sizes(prof))
    for op, o in d["ops"].items():
        m = L.fit(op, d["learning_points_bytes"], o["learning_samples_us"], prof)
        errs = sorted(abs(m.predict_us(b) / t - 1) for b, t in zip(d["sizes_bytes"], o["measured_us"]))
        assert len(errs) == 34 and errs[-4] <= 0.05 and errs[-1] <= 0.20, (op, errs[-4:])


def _sawtooth_op(amplitude, tile_bytes=16384):
    """A smooth op (7 us, 1.7x below DRAM, 2.1x below L2) times 1 + ``amplitude`` x the phase of its
    last partial tile: cupy.sum's kind of roughness, which no smooth model follows."""
    q = truth_q(SimBackend(seed=0))

    def true(b):
        f = P.streamed_l2_fraction(q, b)
        smooth = 7.0 + b * (f / (q("memory.l2.read_bandwidth_gbps") / 2.1 * 1e3)
                            + (1 - f) / (q("memory.dram.copy_bandwidth_gbps.align16") / 1.7 * 1e3))
        return smooth * (1 + amplitude * ((b % tile_bytes) / tile_bytes))

    return true


@pytest.mark.parametrize("amplitude, rough", [(0.0, False), (0.25, True)])
def test_a_kernel_rough_in_size_is_flagged_and_its_prediction_interval_covers_it(prof, amplitude, rough):
    """A kernel whose time strays from one size to the next (a sawtooth of 25% over 16 KiB tiles: an SD
    of 7% about the smooth model) is flagged "rough in size" and its pi95 covers the times at other sizes,
    where the three numbers' CIs (how well the samples pin the smooth model) cover few; a smooth kernel is
    not flagged and its pi95 stays within a few percent."""
    true = _sawtooth_op(amplitude)
    sim = SimBackend({"noise": {"rel_sd": 0.01, "outlier_rate": 0.0}}, seed=3)

    def measure(b):
        return Measurement(sim.sample_matrix(np.array([true(b)]), 10)[0], stop_reason="max_samples")

    m = L.learn("saw", measure=measure, profile=prof)
    assert any(f.startswith("rough in size") for f in m.flags) == rough, m.flags
    sizes = np.geomspace(64e3, 4e9, 60)
    preds = [m.predict(b) for b in sizes]
    pi = np.mean([p.pi95[0] <= true(b) <= p.pi95[1] for p, b in zip(preds, sizes)])
    ci = np.mean([p.ci95[0] <= true(b) <= p.ci95[1] for p, b in zip(preds, sizes)])
    half = np.median([(p.pi95[1] - p.pi95[0]) / 2 / p.time_us for p in preds])
    if rough:
        assert m.size_scatter_rel > 0.04 and pi >= 0.9 and ci < 0.5 and half > 0.08, (m.size_scatter_rel, pi, ci, half)
    else:
        assert m.size_scatter_rel < 0.01 and pi >= 0.95 and half < 0.05, (m.size_scatter_rel, pi, half)


def test_the_scatter_and_its_flag_are_stored_and_read_back(tmp_path, prof):
    import calib

    true = _sawtooth_op(0.25)
    sim = SimBackend({"noise": {"rel_sd": 0.01, "outlier_rate": 0.0}}, seed=4)
    m = L.learn("saw", measure=lambda b: Measurement(sim.sample_matrix(np.array([true(b)]), 10)[0],
                                                     stop_reason="max_samples"), profile=prof)
    path = tmp_path / "p.json"
    m.save(path, prof)
    back = L.LearnedModel.from_profile(calib.load_profile(path, device=None), "saw")
    assert back.size_scatter_rel == pytest.approx(m.size_scatter_rel) and m.size_scatter_rel > 0.04
    assert any(f.startswith("rough in size") for f in back.flags)
    with pytest.warns(Warning, match="rough in size"):
        assert back.predict(1e8).pi95 == pytest.approx(m.predict(1e8).pi95)
    doc = json.loads(path.read_text())
    del doc["params"]["learned.saw.size_scatter_rel"]  # a model stored before the scatter was kept
    path.write_text(json.dumps(doc))
    old = L.LearnedModel.from_profile(calib.load_profile(path, device=None), "saw")
    assert old.size_scatter_rel == 0.0
    doc["params"]["learned.saw.size_scatter_rel"] = {"value": -0.5, "unit": "relative"}
    path.write_text(json.dumps(doc))
    with pytest.raises(L.HeuristicError, match="size_scatter_rel is -0.5"):
        L.LearnedModel.from_profile(calib.load_profile(path, device=None), "saw")


CURRENT_POINTS = [*LIVE_BANDS.values(), *(f"2026-12-04-h200-heuristics-s12c3/heuristics-seed{s}" for s in (42, 43, 44)),
                  *(f"2026-12-07-h200-heuristics-s19/heuristics-seed{s}" for s in (100, 101, 102))]


def test_on_the_h200_the_prediction_interval_covers_the_library_ops_and_flags_the_sum():
    """The 16 H200 recordings learned at the shipped points, refitted: at the 34 sizes from 64 kB to 4 GB the
    three numbers' CIs covered 40, 9 and 11% of the measured times (cupy.multiply, cupy.sum, the CuPy
    softmax); pi95 covers 97, 98 and 97%, 91% or more on every recording. cupy.sum is rough in size on every
    one (scatter 2.7-3.8%: CUB's tiles and waves), the other two on none (scatter under 1.3%)."""
    import calib
    from calib.heuristics.learned_eval import _coverage
    from calib.heuristics.review import load_learned

    prof = calib.load_profile(R.parents[1] / "profiles" / "nvidia-h200.json", device=None, software=None)
    cover = {}
    for folder in CURRENT_POINTS:
        d = load_learned(R / folder / "heuristics-learned.json.gz")
        assert d["learning_points_bytes"] == L.learning_points(L.default_sizes(prof))
        for op, o in d["ops"].items():
            m = L.fit(op, d["learning_points_bytes"], o["learning_samples_us"], prof)
            c = _coverage(m, [m.predict(b) for b in d["sizes_bytes"]], o["measured_us"])
            assert c["pi95"] >= 0.9 and c["pi95"] > c["ci95"], (folder, op, c)
            assert any(f.startswith("rough in size") for f in c["flags"]) == (op == "cupy_sum"), (folder, op, c)
            cover.setdefault(op, []).append((c["pi95"], c["ci95"]))
    assert len(cover["cupy_sum"]) == 16
    for op, v in cover.items():
        pi, ci = np.mean(v, axis=0)
        assert pi >= 0.95 and ci < 0.5, (op, pi, ci)  # pi95 at its nominal rate; the CIs far below it


def test_the_review_draws_the_learned_evaluation_with_its_interval(tmp_path):
    """heuristics_review's learned figure: a panel per op with its error at each size and, where the file
    keeps it (since 2026-12-07), the pi95 band; a committed H200 file without one is drawn too."""
    from calib.heuristics import learned_eval, review

    res = learned_eval.evaluate_ops("sim", profile=sim_profile(SimBackend(seed=1)))
    for r in res["ops"].values():
        assert len(r["pi95_us"]) == 34 and all(lo <= p <= hi for (lo, hi), p in zip(r["pi95_us"], r["predicted_us"]))
    path = tmp_path / "learned.json"
    path.write_text(json.dumps(res))
    fig = review.learned_figure(str(path))
    assert len(fig.axes) == 3 and "SIMULATED" in fig.texts[0].get_text()
    assert all(ax.collections for ax in fig.axes)  # the band
    live = R / "2026-12-07-h200-heuristics-s19" / "heuristics-seed100" / "heuristics-learned.json.gz"
    fig = review.learned_figure(live)
    p90 = review.load_learned(live)["ops"]["cupy_sum"]["learned"]["p90"]
    assert len(fig.axes) == 3 and f"cupy_sum: p90 {p90:.1%}" in fig.axes[1].get_title()


@pytest.mark.parametrize("edit, why", [
    (lambda d: d["ops"]["cupy_sum"]["measured_us"].pop(), r"ops\['cupy_sum'\].measured_us is not 34 positive"),
    (lambda d: d["ops"]["cupy_sum"]["predicted_us"].__setitem__(3, -1.0), "predicted_us is not 34 positive"),
    (lambda d: d["ops"]["cupy_sum"]["pi95_us"].__setitem__(0, [2.0]), r"pi95_us is not 34 pairs"),
    (lambda d: d["ops"]["cupy_sum"]["learned"].pop("p90"), "learned is not its median, p90 and worst"),
    (lambda d: d["ops"]["cupy_sum"].pop("roofline"), "roofline is not its median"),
    (lambda d: d["ops"]["cupy_sum"]["interval_coverage"].update(flags="rough"), "interval_coverage is not"),
    (lambda d: d["ops"].update(cupy_sum=[1]), r"ops\['cupy_sum'\] is not an object"),
    (lambda d: d["sizes_bytes"].__setitem__(0, "64k"), "sizes_bytes holds what is no positive number"),
])
def test_the_review_names_what_is_wrong_inside_a_learned_evaluation(tmp_path, edit, why):
    """learned_figure and learned_eval.to_markdown had ended in a TypeError or KeyError on such a file (a time
    list one short, a negative time, a one-sided interval, an error summary left out): one ReviewError each."""
    import gzip

    from calib.heuristics import review

    live = R / "2026-12-07-h200-s22" / "heuristics-seed124" / "heuristics-learned.json.gz"  # with pi95_us
    doc = json.loads(gzip.decompress(live.read_bytes()))
    edit(doc)
    path = tmp_path / "l.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(review.ReviewError, match=f"l.json.*{why}"):
        review.learned_figure(path)


@pytest.mark.parametrize("content, why", [
    ('{"format": "calib.heuristics.evaluation", "version": 1}', "not a learned predictor's evaluation"),
    ('{"format": "calib.heuristics.learned_evaluation", "version": 9}', "version 9"),
    ('{"format": "calib.heuristics.learned_evaluation", "version": 2, "backend": "cupy"}', "lacks sizes_bytes"),
    ("[1, 2", "is not JSON"),
])
def test_the_review_names_a_file_that_is_no_learned_evaluation(tmp_path, content, why):
    from calib.heuristics import review

    path = tmp_path / "l.json"
    path.write_text(content)
    with pytest.raises(review.ReviewError, match=f"l.json.*{why}"):
        review.learned_figure(path)
