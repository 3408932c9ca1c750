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


def test_huber_fit_ci_covers_the_slope_at_the_nominal_rate_with_few_points():
    """RLM's default MAD scale is too noisy with a sweep's 6-8 points for a t interval on n - 2
    degrees of freedom: the slope's CI covered 91-92% here (and 85-90% for many rates of a robust
    calibration on the simulated device); Huber's proposal 2 covers 95%."""
    sizes = np.geomspace(2.5e8, 2e9, 6)
    truth = 1 / 4e6
    seeds = 400
    hits = 0
    for seed in range(seeds):
        f = fit_linear_time(sizes, _times(rel_sd=0.003, seed=seed, sizes=sizes), robust=True)
        hits += f.slope_ci95[0] <= truth <= f.slope_ci95[1]
    assert hits / seeds >= 0.93, f"coverage {hits / seeds:.3f}"


def test_a_noiseless_line_is_fitted_and_not_flagged_robust_or_not():
    """Noiseless times (a simulated device with rel_sd 0): the residuals are rounding errors, which
    the runs test had called a pattern (p = 0) in every fit, and Huber's scale had raised from
    inside statsmodels ("NaN, inf or invalid value detected in weights")."""
    sizes = np.geomspace(1e8, 1e9, 8)
    t = _times(sizes=sizes)
    for robust in (False, True):
        f = fit_linear_time(sizes, t, n_samples=np.full(sizes.size, 20), robust=robust)
        assert f.rate_per_s == pytest.approx(4e12, rel=1e-9)
        assert f.flags == [], (robust, f.flags)


@pytest.mark.parametrize("bad, why", [(np.nan, "time"), (np.inf, "time"), (0.0, "time"), (-3.0, "time")])
def test_a_point_without_a_usable_time_is_refused_with_a_reason_naming_it(bad, why):
    t = _times(rel_sd=0.01)
    t[4] = bad
    with pytest.raises(ValueError, match=rf"1 of 10 points have a {why} that is not a finite positive number "
                                         r"\(point 4"):
        fit_linear_time(SIZES, t)
    x = SIZES.copy()
    x[2] = np.nan
    with pytest.raises(ValueError, match=r"1 of 10 points have an x that is not finite \(point 2"):
        fit_linear_time(x, _times())


def test_huge_times_are_fitted_as_exactly_as_ordinary_ones():
    """Times of 1e200 us had made the weights 1/t² underflow to 0 and statsmodels fail
    ("exog contains inf or nans"); the fit is scale-free in t."""
    t = _times(rel_sd=0.01, seed=6)
    small = fit_linear_time(SIZES, t)
    huge = fit_linear_time(SIZES, t * 1e200)
    assert huge.slope_us == pytest.approx(small.slope_us * 1e200, rel=1e-9)
    assert huge.slope_ci95[1] == pytest.approx(small.slope_ci95[1] * 1e200, rel=1e-9)
    assert huge.flags == small.flags and huge.r2 == pytest.approx(small.r2)


def test_a_negative_slope_is_flagged_as_negative_not_as_unidentified():
    f = fit_linear_time(SIZES, 500 - SIZES / 4e7)
    assert any(flag.startswith("negative slope") for flag in f.flags), f.flags
    rec = f.rate_record(1e9, "GB/s")
    assert "ci95" not in rec and "CI not estimable" in rec["flags"]


def test_the_residual_figure_states_the_estimate_and_its_ci():
    import matplotlib

    matplotlib.use("Agg")
    f = fit_linear_time(SIZES, _times(rel_sd=0.01))
    rec = f.rate_record(1e9, "GB/s")
    title = f.plot_residuals(title="t", record=rec)._suptitle.get_text()
    assert f"{rec['value']:.5g} GB/s (95% CI {rec['ci95'][0]:.5g} to {rec['ci95'][1]:.5g})" in title


def test_fit_result_table_shows_a_bracket_without_a_plus_minus():
    from calib.calibrations import registers
    from calib.fit import FitResult, make_record

    result = FitResult("registers")
    result.records[registers.MAX_PERSISTENT] = make_record(
        192, (192, 223), "count", n=14, method="largest N compiled without spills; the bracket the grid leaves")
    result.records[registers.ADDITIONAL] = make_record(30.0, (28.5, 31.5), "count", n=9, method="OLS")
    table = result.table().set_index("name")
    assert np.isnan(table.loc[registers.MAX_PERSISTENT, "ci95_pm_pct"])
    assert table.loc[registers.MAX_PERSISTENT, "interval"] == "bracket"
    assert table.loc[registers.ADDITIONAL, "ci95_pm_pct"] == pytest.approx(5.0)
    assert table.loc[registers.ADDITIONAL, "interval"] == "95% CI"


def test_the_register_figure_states_the_register_overhead_with_its_ci():
    import matplotlib

    matplotlib.use("Agg")
    from calib import calibrations
    from calib.backends.sim import SimBackend
    from calib.calibrations import registers

    backend = SimBackend(seed=1)
    table = registers.collect(backend, registers.plan("quick", l2_bytes=backend.l2_bytes,
                                                      memory_bytes=backend.memory_bytes, sm_count=132))
    result = calibrations.fit("registers", table)
    rec = result.records[registers.ADDITIONAL]
    fig = registers.figures(table, result, title=str)["registers"]
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(f"(95% CI {rec['ci95'][0]:.1f} to {rec['ci95'][1]:.1f})" in label for label in labels), labels


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


def _recorded_with(calibration: str, fixture: str, column: str, bad: float, nth: int = 5):
    """A recorded sweep with the ``nth`` point of ``calibration`` given ``bad`` in ``column``."""
    import pandas as pd

    frame = pd.read_csv(FIXTURES / fixture)
    frame[column] = frame[column].astype(float)
    frame.loc[frame.index[frame["calibration"] == calibration][nth], column] = bad
    return frame


@pytest.mark.parametrize("bad", [np.nan, np.inf, 0.0])
def test_the_occupancy_model_refuses_a_point_without_a_usable_time_naming_it_and_its_parameter(bad):
    """A NaN or infinite time had failed as scipy's "array must not contain infs or NaNs", a time of
    zero as "math domain error": no point named."""
    from calib import calibrations
    from calib.calibrations import occupancy

    result = calibrations.fit("occupancy", _recorded_with("occupancy", "h200_occupancy_full_2026-12-01.csv",
                                                          "time_us", bad))
    why = result.failures[occupancy.IN_FLIGHT]
    assert why.startswith(f"{occupancy.IN_FLIGHT}: 1 of 21 points have a time that is not a finite positive "
                          "number (point 5: bytes_in_flight 65536, warps_per_sm 16, sm_count 132, size_bytes "
                          f"2097152000, time_us {bad:g}, n_samples "), why


@pytest.mark.parametrize("column, what", [("size_bytes", "a size_bytes"), ("sm_count", "a sm_count")])
def test_the_occupancy_model_refuses_a_point_whose_input_is_not_finite_naming_it(column, what):
    from calib import calibrations
    from calib.calibrations import occupancy

    frame = _recorded_with("occupancy", "h200_occupancy_full_2026-12-01.csv", column, np.inf)
    why = calibrations.fit("occupancy", frame).failures[occupancy.IN_FLIGHT]
    assert f"1 of 21 points have {what} that is not a finite positive number (point 5: " in why, why
    assert f"{column} inf" in why, why


@pytest.mark.parametrize("column, bad", [("time_us", np.nan), ("time_us", np.inf), ("time_us", 0.0),
                                         ("working_set_bytes", np.nan)])
def test_the_l2_ramp_refuses_a_point_it_cannot_use_naming_it(column, bad):
    """A NaN or infinite time or working set had failed as "no start converged", and a time of zero
    was fitted as if measured."""
    from calib import calibrations
    from calib.calibrations import cache_hierarchy as l2

    frame = _recorded_with(l2.ID, "h200_l2_quick128_2026-12-01-s2.csv", column, bad, nth=12)
    result = calibrations.fit(l2.ID, frame)
    label = "a time" if column == "time_us" else "a working_set_bytes"
    for name in (l2.CAPACITY, l2.RAMP_END):
        why = result.failures[name]
        assert why.startswith(f"cache_hierarchy's L2 ramp: 1 of 135 points have {label} that is not a finite "
                              "positive number (point "), why
        assert f"{column} {bad:g}" in why, why
    assert l2.READ_BW in result.records  # its own series' line is fitted as before


@pytest.mark.parametrize("bad", [np.nan, np.inf, 0.0])
def test_the_matmul_rate_refuses_a_point_without_a_usable_time_naming_it(bad):
    """An infinite time or one of zero had been read as a rate of 0 or of infinity by the regime's
    search, and the type failed for "1 point(s) in the large-K regime", naming no point."""
    from calib import calibrations
    from calib.calibrations import matmul_throughput as mm

    import pandas as pd

    frame = pd.read_csv(FIXTURES / "h200_matmul_full_2026-12-01.csv")
    fp16 = frame.index[(frame["calibration"] == mm.ID) & (frame["dtype"] == "fp16")]
    frame.loc[fp16[-2], "time_us"] = bad  # a large-K point, inside the regime the rate is fitted over
    result = calibrations.fit(mm.ID, frame)
    why = result.failures[mm.param_name("fp16")]
    assert why.startswith(f"{mm.param_name('fp16')}: 1 of {len(fp16)} points have a time that is not a finite "
                          "positive number (point ") and f"time_us {bad:g}" in why, why
    assert set(result.records) == {mm.param_name("bf16"), mm.param_name("tf32")}


def test_a_launch_point_without_a_usable_time_fails_its_own_parameter_named():
    """It had failed all three parameters with "the fit failed: ValueError: ...", the other two kinds'
    lines unfitted for it."""
    from calib import calibrations
    from calib.backends.sim import SimBackend
    from calib.calibrations import launch_latency as ll
    from calib.sweep import frame_from

    b = SimBackend(seed=3)
    configs = ll.plan("quick")
    frame = frame_from(configs, b.measure(configs))
    frame.loc[frame.index[frame["kind"] == "overhead"][-2], "time_us"] = np.nan
    result = calibrations.fit(ll.ID, frame)
    assert result.failures[ll.OVERHEAD].startswith(f"{ll.OVERHEAD}: 1 of "), result.failures
    assert "have a time that is not a finite positive number (point " in result.failures[ll.OVERHEAD]
    assert set(result.records) == {ll.LATENCY, ll.GRAPH_NODE}


def test_a_linear_fit_names_what_it_fits_and_the_whole_point_it_refuses():
    t = _times()
    t[4] = np.nan
    with pytest.raises(ValueError, match=r"^dram: 1 of 10 points have a time that is not a finite positive number "
                                         r"\(point 4: x 629960524\.9, time_us nan, n_samples 1\)$"):
        fit_linear_time(SIZES, t, fitting="dram")
