"""Fits: intervals from the fit, the rate's interval by inverting the slope's, poor fits flagged."""

import numpy as np
import pytest

from calib.fit import fit_linear_time

SIZES = np.geomspace(2.5e8, 2e9, 10)


def _times(bw_gbps=4000.0, t0=5.0, rel_sd=0.0, seed=0, sizes=SIZES):
    rng = np.random.default_rng(seed)
    t = t0 + sizes / (bw_gbps * 1e3)
    return t * (1 + rel_sd * rng.standard_normal(sizes.size))


def test_noiseless_line_is_recovered():
    f = fit_linear_time(SIZES, _times(rel_sd=1e-9), n_samples=np.full(SIZES.size, 20))
    rec = f.rate_record(1e9, "GB/s")
    assert rec["value"] == pytest.approx(4000.0, rel=1e-6)
    assert f.intercept_us == pytest.approx(5.0, abs=1e-3)
    assert rec["ci95"][0] < 4000.0 < rec["ci95"][1]
    assert rec["flags"] == [] and "inverted slope CI" in rec["method"]


def test_rate_interval_is_the_inverted_slope_interval():
    f = fit_linear_time(SIZES, _times(rel_sd=0.01, seed=3))
    lo, hi = f.rate_ci95_per_s
    assert lo == pytest.approx(1e6 / f.slope_ci95[1]) and hi == pytest.approx(1e6 / f.slope_ci95[0])
    assert lo < f.rate_per_s < hi


def test_curvature_is_flagged_not_hidden():
    # bandwidth that sags at the large sizes (a clock that drops as the run heats up)
    t = _times(rel_sd=0.0005, seed=1) + 5.0 * (SIZES / 1e9) ** 2
    f = fit_linear_time(SIZES, t)
    assert any("curvature" in flag for flag in f.flags)
    assert f.diagnostics["curvature_p"] < 0.001


def test_a_knee_is_flagged_as_lack_of_fit_against_the_measurement_noise():
    # a cache knee: the small sizes run 20% faster than the line through the large ones, while
    # each point was measured to ±0.1%; R² alone (0.99) would let it pass
    t = _times(rel_sd=0.001, seed=1) * np.where(SIZES < 6e8, 0.8, 1.0)
    f = fit_linear_time(SIZES, t, se_us=0.001 * t)
    assert any("lack of fit" in flag for flag in f.flags)
    assert f.diagnostics["resid_to_noise_ratio"] > 10


def test_honest_noise_is_not_flagged_as_lack_of_fit():
    flagged = 0
    for seed in range(200):
        t = _times(rel_sd=0.01, seed=seed)
        f = fit_linear_time(SIZES, t, se_us=0.01 * (5 + SIZES / 4e6))
        flagged += any("lack of fit" in x for x in f.flags)
    assert flagged <= 3  # p < 0.001 per fit


def test_noise_swamping_the_slope_is_flagged_and_uses_the_delta_method():
    sizes = np.linspace(1e6, 2e6, 8)
    t = 500.0 + sizes / 4e6 + np.random.default_rng(2).normal(0, 50, sizes.size)
    f = fit_linear_time(sizes, t)
    rec = f.rate_record(1e9, "GB/s")
    assert any("wide CI" in x for x in rec["flags"])
    if f.slope_ci95[0] <= 0:
        assert "delta method" in rec["method"]
        assert any("not identified" in x for x in rec["flags"])


def test_low_r2_is_flagged():
    sizes = np.linspace(1e8, 2e8, 12)
    t = 50 + sizes / 4e6 + np.random.default_rng(5).normal(0, 8, sizes.size)
    f = fit_linear_time(sizes, t)
    assert f.r2 < 0.99 and any("low R²" in x for x in f.flags)


def test_robust_fit_resists_a_gross_outlier():
    t = _times(rel_sd=0.002, seed=4)
    t[3] *= 1.5
    plain = fit_linear_time(SIZES, t)
    robust = fit_linear_time(SIZES, t, robust=True)
    assert abs(robust.rate_per_s / 4e12 - 1) < abs(plain.rate_per_s / 4e12 - 1)
    assert any("outlier" in x for x in robust.flags)
    assert "Huber" in robust.method


def test_bad_inputs_are_refused_with_reasons():
    with pytest.raises(ValueError, match="at least 3 points"):
        fit_linear_time([1, 2], [1, 2])
    with pytest.raises(ValueError, match="same size"):
        fit_linear_time([5, 5, 5], [1, 2, 3])


def test_residual_plot_has_three_panels():
    import matplotlib

    matplotlib.use("Agg")
    fig = fit_linear_time(SIZES, _times(rel_sd=0.01)).plot_residuals(title="t")
    assert len(fig.axes) == 3
