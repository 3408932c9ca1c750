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
