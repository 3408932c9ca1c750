"""Interference inside the outlier cut: slowdowns smaller than 3.5 robust SDs stay in a point's mean and
bias every time up alike, which no residual of the line shows. The inliers' right skew shows it: the
fits widen their CIs by the bias it implies, and flag a material one, so that the CIs still cover
the simulated device's planted truth (they had covered 71% and 80% below, unflagged)."""

import warnings

import numpy as np
import pandas as pd
import pytest

from calib import calibrations
from calib.backends.sim import SimBackend
from calib.calibrations import memory_bandwidth as dram
from calib.fit import fit_timed
from calib.store import Store, sqlite_url
from calib.store.core import _inlier_shape
from calib.sweep import frame_from, run_sweep
from calib.timing import Measurement, StoppingRule

SEEDS = 40
# the notebooks' rule: up to 400 samples a point, where the bias counts most against the CI
RULE = StoppingRule(max_samples=400)


def _dram_records(noise, seeds=range(SEEDS)):
    """(record, planted truth) of every DRAM rate of a quick calibration per seed on the simulated
    device with ``noise``, the whole chain: sweep, stopping rule, per-point statistics, fits."""
    out = []
    for seed in seeds:
        backend = SimBackend({"noise": noise}, seed=seed, rule=RULE)
        configs = dram.plan("quick", l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = calibrations.fit(dram.ID, frame_from(configs, backend.measure(configs)))
        assert not result.failures
        out += [(rec, backend.truth[name]) for name, rec in result.records.items()]
    return out


def _interference_flagged(rec) -> bool:
    return any(f.startswith("interference inside the outlier cut") for f in rec.get("flags", []))


@pytest.mark.parametrize("noise", [{"rel_sd": 0.15, "outlier_rate": 0.10},
                                   {"rel_sd": 0.02, "outlier_rate": 0.10, "outlier_scale": 0.1}],
                         ids=["heavy-noise", "mild-slowdowns"])
def test_cis_cover_the_planted_rates_where_slowdowns_hide_inside_the_cut(noise):
    """10% of the samples slowed by 1 + Exp(1) at a 15% noise, or by 1 + 0.1 Exp(1) at 2%: about 40-50%
    of the slowdowns fall inside the cut, and the rates came out 0.2-1.1% low. Without the widening
    the CIs covered 71% and 80% of the planted rates (40 seeds, 760 CIs each); with it 99% and 97%,
    and most records say so."""
    records = _dram_records(noise)
    hits = np.array([rec["ci95"][0] <= truth <= rec["ci95"][1] for rec, truth in records])
    bias = np.median([rec["value"] / truth - 1 for rec, truth in records])
    assert bias < -0.001, f"the planted slowdowns no longer bias the rates ({bias:+.2%}): the test tests nothing"
    assert hits.mean() >= 0.93, f"coverage {hits.mean():.3f} of {hits.size} CIs"
    flagged = np.mean([_interference_flagged(rec) for rec, _ in records])
    assert flagged >= 0.5, f"only {flagged:.0%} of the biased records flagged"
    widened = [rec for rec, _ in records if rec["diagnostics"].get("interference_ci_widened")]
    assert all("CI widened by" in rec["method"] for rec in widened)


def test_at_the_default_noise_no_record_is_flagged_for_interference():
    """The H200-like defaults (1% noise, 1% of samples slowed by 1 + Exp(1), nearly all beyond the
    cut): the check must not cry wolf; coverage itself is test_coverage's."""
    records = _dram_records({})
    assert not any(_interference_flagged(rec) for rec, _ in records)
    widened = np.mean([bool(rec["diagnostics"].get("interference_ci_widened")) for rec, _ in records])
    assert widened < 0.15, f"{widened:.0%} of the default-noise CIs widened"


def _line_frame(rng, slowdown_scale, rate_per_us=4e6, t0=5.0, n=400, rel_sd=0.02, share=0.1):
    """A tidy frame of 8 DRAM-like points whose samples are slowed by 1 + scale Exp(1) in ``share``."""
    sizes = np.geomspace(2.5e8, 2e9, 8)
    rows = []
    for x in sizes:
        t = t0 + x / rate_per_us
        s = t * (1 + rel_sd * rng.standard_normal(n))
        hit = rng.random(n) < share
        s = np.where(hit, s * (1 + slowdown_scale * rng.exponential(1.0, n)), s)
        rows.append({"x": x, **Measurement(s).summary()})
    return pd.DataFrame(rows)


def test_the_ci_is_widened_on_the_side_the_bias_hides_and_the_value_is_kept():
    """Times biased up make the slope and intercept high and the rate low: the rate's CI grows at
    its upper end, the slope's and intercept's at their lower ends, and no value moves."""
    frame = _line_frame(np.random.default_rng(5), slowdown_scale=0.1)
    plain = fit_timed(frame.drop(columns=["inlier_skew"]), frame["x"])
    checked = fit_timed(frame, frame["x"])
    d = checked.diagnostics
    assert d["interference_skew_z"] > 3 and d["interference_ci_widened"]
    bias = d["interference_bias_rel"]
    assert 0.001 < bias < 0.01
    assert checked.slope_us == plain.slope_us and checked.intercept_us == plain.intercept_us
    # each parameter widened by its own bias, the points' biases through the fit's weights: here the
    # slowdowns scale with the time, so each is of the order of the pooled share of its parameter
    b_slope, b_icpt = d["interference_slope_bias_us"], d["interference_intercept_bias_us"]
    assert b_slope > 0 and b_icpt > 0
    assert checked.slope_ci95[1] == plain.slope_ci95[1] and checked.intercept_ci95[1] == plain.intercept_ci95[1]
    assert checked.slope_ci95[0] == pytest.approx(plain.slope_ci95[0] - b_slope)
    assert checked.intercept_ci95[0] == pytest.approx(plain.intercept_ci95[0] - b_icpt)
    rate, rate0 = checked.rate_record(1e9, "GB/s"), plain.rate_record(1e9, "GB/s")
    assert rate["value"] == rate0["value"] and rate["ci95"][0] == rate0["ci95"][0]
    assert rate["ci95"][1] > rate0["ci95"][1]
    assert _interference_flagged(rate) and "low" in rate["flags"][-1]
    assert "high" in checked.slope_record()["flags"][-1] and not _interference_flagged(plain.slope_record())
    assert "interference_skew" not in plain.diagnostics


def test_symmetric_noise_and_slowdowns_beyond_the_cut_leave_the_skew_near_zero():
    rng = np.random.default_rng(2)
    clean = Measurement(100 * (1 + 0.02 * rng.standard_normal(4000)))
    assert abs(clean.inlier_skew) < 0.15 and clean.n_inliers >= 3990
    gross = 100 * (1 + 0.02 * rng.standard_normal(4000))
    gross[::20] *= 3.0  # 5% slowed threefold: all cut
    assert abs(Measurement(gross).inlier_skew) < 0.15 and Measurement(gross).n_outliers >= 200
    mild = 100 * (1 + 0.02 * rng.standard_normal(4000))
    mild[::10] *= 1.04  # 10% slowed by 2 SDs: all kept
    m = Measurement(mild)
    assert m.n_outliers < 40 and m.inlier_skew > 0.3  # nearly all of the 400 kept
    assert m.summary()["inlier_skew"] == m.inlier_skew and m.summary()["n_inliers"] == m.n_inliers
    assert np.isnan(Measurement([10.0] * 30).inlier_skew) and np.isnan(Measurement([1.0, 2.0]).inlier_skew)


def test_the_store_frame_carries_each_points_inlier_skew_as_its_measurement_had_it(tmp_path):
    store = Store(sqlite_url(tmp_path / "r.sqlite"))
    backend = SimBackend({"noise": {"rel_sd": 0.05, "outlier_rate": 0.1}}, seed=3, rule=RULE)
    device, software = backend.fingerprint()
    sid = store.open_session("t", device, software)
    configs = dram.plan("quick", l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes, kinds=["read"],
                        widths=[16])
    run_sweep(backend, configs, store, sid, progress=False)
    frame = store.frame(sid)
    for _, row in frame.iterrows():
        m = Measurement(store.samples(int(row["result_id"])))
        assert row["n_inliers"] == m.n_inliers and row["inlier_skew"] == pytest.approx(m.inlier_skew)
    samples = np.concatenate([np.full(20, 50.0), 10 + np.random.default_rng(1).standard_normal(40)])
    shape = _inlier_shape(list(samples), {"host_unsteady": {"set_aside_rounds": list(range(20))}})
    m = Measurement(samples, set_aside=np.arange(60) < 20)
    assert shape == {"n_inliers": m.n_inliers, "inlier_skew": m.inlier_skew} and m.n_inliers > 35


def test_a_delay_of_the_same_microseconds_at_every_point_widens_the_intercept_not_the_slope():
    """Host-timed lines: a kept slowdown costs about the same microseconds whatever the point, so its
    bias lands on the intercept. A pooled share of every time had widened the intercept by 0.3% where
    it was 8-12% high (covered in 2 of 100 fits); through the fit's weights the intercept takes it."""
    xs, t0, slope = np.array([4, 8, 12, 16, 24, 32, 48, 64.0]), 5.0, 5.0
    covered, pooled_covered, icpt_share, slope_share = 0, 0, [], []
    for seed in range(40):
        rng, rows = np.random.default_rng(seed), []
        for x in xs:
            smp = (t0 + slope * x) * (1 + 0.48 / x * rng.standard_normal(400))
            smp = np.where(rng.random(400) < 0.2, smp * (1 + 0.64 / x * rng.exponential(1.0, 400)), smp)
            rows.append({"x": x, **Measurement(smp).summary()})
        f = fit_timed(pd.DataFrame(rows), xs)
        d = f.diagnostics
        icpt_share.append(d["interference_intercept_bias_us"] / f.intercept_us)
        slope_share.append(abs(d["interference_slope_bias_us"]) / f.slope_us)
        covered += f.intercept_ci95[0] <= t0 <= f.intercept_ci95[1]
        own_lo = f.intercept_ci95[0] + max(d["interference_intercept_bias_us"], 0.0)  # the fit's own CI
        pooled_lo = own_lo - d["interference_bias_rel"] * f.intercept_us  # widened by a pooled share instead
        pooled_covered += pooled_lo <= t0 <= f.intercept_ci95[1]
    # relative to each parameter, the intercept takes ten times the slope's share or more
    assert np.median(icpt_share) > 10 * np.median(slope_share), (np.median(icpt_share), np.median(slope_share))
    assert covered >= 3 * max(pooled_covered, 1), (covered, pooled_covered)


def test_a_damaged_set_aside_entry_does_not_end_the_sessions_frame():
    samples = [10.0, 10.1, 9.9, 10.2, 30.0, 10.0]
    shape = _inlier_shape(samples, {"host_unsteady": {"set_aside_rounds": [4, None, "x", 2.5]}})
    assert shape["n_inliers"] == 5  # round 4 set aside, the damaged entries ignored
    assert _inlier_shape(samples, {"host_unsteady": {"set_aside_rounds": "4"}})["n_inliers"] >= 5
