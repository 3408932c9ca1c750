import numpy as np
import pytest

from calib.timing import Measurement, StoppingRule, median_ci_ranks


def test_median_ci_ranks_bracket_the_median():
    for n in (10, 21, 100, 400):
        lo, hi = median_ci_ranks(n)
        assert 0 <= lo < n / 2 < hi <= n - 1


def test_median_ci_covers_the_true_median_about_95_percent():
    rng = np.random.default_rng(0)
    x = np.sort(rng.exponential(1.0, (4000, 40)), axis=1)
    lo, hi = median_ci_ranks(40)
    covered = np.mean((x[:, lo] <= np.log(2)) & (np.log(2) <= x[:, hi]))
    assert 0.93 <= covered <= 0.985


def test_vectorized_rule_agrees_with_the_scalar_rule():
    rule = StoppingRule(min_samples=10, max_samples=100, batch=10, rel_precision=0.004, budget_s=0.02)
    rng = np.random.default_rng(1)
    true = rng.uniform(50, 2000, 60)
    samples = true[:, None] * (1 + rng.uniform(0.001, 0.03, (60, 1)) * rng.standard_normal((60, 100)))
    taken, reasons = rule.samples_needed(samples)
    for row in range(60):
        n = rule.batch
        while rule.stop_reason(samples[row, :n]) is None:
            n += rule.batch
        assert taken[row] == n
        assert reasons[row] == rule.stop_reason(samples[row, :n])


def test_measurement_keeps_samples_and_carries_warnings():
    rng = np.random.default_rng(2)
    samples = 100 * (1 + 0.2 * rng.standard_normal(50))
    samples[:3] = 1000
    m = Measurement(samples, stop_reason="budget", protocol={"rule": {"rel_precision": 0.005}},
                    clocks={"throttle_reasons": ["hw_thermal"]}, simulated=True)
    assert m.n == 50 and m.n_outliers == 3
    assert m.center_us == pytest.approx(np.mean(samples[3:]))
    text = " ".join(m.warnings)
    assert "noisy" in text and "throttled: hw_thermal" in text and "imprecise" in text and "simulated" in text
    assert m.summary()["time_us"] == m.center_us


class DriftingHost:
    """A virtual host whose launch cost drifts smoothly between 6 and 7 us per launch with a period
    of 40 ms of its own time, as a lent H200 host's did from point to point (2026-12-01)."""

    def __init__(self):
        self.t_us = 0.0

    def cost_us(self) -> float:
        import math

        return 6.5 + 0.5 * math.sin(2 * math.pi * self.t_us / 40_000)

    def sampler(self, launches: int):
        def sample():
            took = launches * self.cost_us()
            self.t_us += took + 5.0  # the synchronize after the timed launches
            return took
        return sample


def test_interleaved_rounds_give_every_point_the_same_host_where_one_after_another_does_not():
    from calib.timing import StoppingRule, interleave

    counts = [4, 8, 16, 32, 64]
    rule = StoppingRule(min_samples=10, max_samples=200, batch=10, rel_precision=0.0, budget_s=10.0)
    host = DriftingHost()
    taken = interleave([host.sampler(n) for n in counts], rule, seed=1)
    per_launch = [np.median(s) / n for (s, _), n in zip(taken, counts)]
    assert [r for _, r in taken] == ["max_samples"] * len(counts)
    assert max(per_launch) / min(per_launch) < 1.01, per_launch
    one_by_one = DriftingHost()
    sequential = []
    for n in counts:
        sample = one_by_one.sampler(n)
        sequential.append(np.median([sample() for _ in range(rule.max_samples)]) / n)
    assert max(sequential) / min(sequential) > 1.05, sequential  # the case the rounds are for


def test_interleave_stops_each_point_on_its_own_rule_and_keeps_taking_the_others():
    from calib.timing import StoppingRule, interleave

    rule = StoppingRule(min_samples=10, max_samples=60, batch=10, rel_precision=0.01, budget_s=10.0)
    rng = np.random.default_rng(3)
    steady = lambda: 10.0  # noqa: E731 - precise at once
    noisy = lambda: float(rng.lognormal(3.0, 0.5))  # noqa: E731 - never within 1%
    (a, why_a), (b, why_b) = interleave([steady, noisy], rule)
    assert (len(a), why_a) == (10, "precision") and (len(b), why_b) == (60, "max_samples")


def test_a_host_delayed_sample_is_cut_even_when_the_timer_ties_most_samples_at_the_median():
    """An H200 FMA point (2026-12-01): 18 samples at 36.5-36.7 us in the event timer's 32 ns steps,
    one launch delayed to 131.9 us and a first one at 47.4. The MAD was 0, every sample counted,
    and the mean came out 42.0 us (15% slow); the robust sd's floor cuts them and the slow first
    samples of each batch (37.4-37.8: the host's launch after a synchronize)."""
    from calib.timing import Measurement

    samples = [47.4, 37.8, 36.7, 36.6] + [36.512] * 6 + [131.9, 37.4, 36.6] + [36.512] * 7
    m = Measurement(samples)
    assert m.n_outliers == 4 and m.center_us == pytest.approx(36.55, abs=0.05)  # 47.4, 37.8, 37.4, 131.9
    steady = Measurement([10.0] * 30)
    assert steady.n_outliers == 0 and steady.center_us == 10.0


def test_a_measurement_without_samples_has_nan_statistics_and_says_so():
    """Its IQR had raised IndexError from inside numpy, so its summary, warnings and repr did."""
    m = Measurement([])
    summary = m.summary()
    assert summary["n_samples"] == 0 and np.isnan(summary["time_us"]) and np.isnan(summary["iqr_us"])
    assert m.warnings == ["empty: no samples, no time"] and "n=0" in repr(m)


def test_nan_and_infinite_samples_are_left_out_and_said_so():
    """A timer that fails gives NaN or inf: one NaN had made the point's time NaN with no warning,
    and one inf its mean and IQR."""
    m = Measurement([10.0, np.nan, 10.2, np.inf, 9.8, 10.0])
    assert m.center_us == pytest.approx(10.0) and m.mean_us == pytest.approx(10.0)
    assert np.isfinite(m.iqr_us) and np.isfinite(m.median_rel_ci95) and m.n_outliers == 0
    assert any(w.startswith("non-finite: 2 of 6 samples") for w in m.warnings), m.warnings
    dead = Measurement([np.nan, np.nan])
    assert np.isnan(dead.center_us) and "no sample is left" in " ".join(dead.warnings)
