"""The learned predictor on the simulated device: a library op below the machine's peak, learned
from three sizes, predicted from L2-resident sizes to gigabytes; stored in and read from a profile;
fed from the tuning database."""

import numpy as np
import pytest

from calib.backends.sim import SimBackend
from calib.heuristics import learned as L
from calib.heuristics import predictor as P
from calib.heuristics.simdevice import sim_profile, truth_q
from calib.timing import Measurement


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
    time at about 95% (the noise the fit sees is the only error: the truth is in the model)."""
    hits = 0
    n = 120
    for seed in range(n):
        sim = SimBackend({"noise": {"rel_sd": 0.02, "outlier_rate": 0.0}}, seed=seed)
        q = truth_q(sim)

        def measure(b, sim=sim, q=q):
            f = P.streamed_l2_fraction(q, b)
            t = 5.0 + b * (f / 4e6 + (1 - f) / 2.5e6)
            return Measurement(sim.sample_matrix(np.array([t]), 10)[0], stop_reason="max_samples")

        m = L.learn("cov", measure=measure, profile=prof)
        b = 3e9
        f = P.streamed_l2_fraction(q, b)
        truth = 5.0 + b * (f / 4e6 + (1 - f) / 2.5e6)
        lo, hi = m.predict(b).ci95
        hits += lo <= truth <= hi
    assert 0.88 <= hits / n <= 0.995, hits / n


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

    res = learned_eval.evaluate_ops("sim", points=10)
    for name, r in res["ops"].items():
        assert r["learned"]["p90"] <= 0.05 and r["learned"]["worst"] <= 0.20, name
        assert r["roofline"]["median"] > r["learned"]["median"]
    assert "| sim_multiply |" in learned_eval.to_markdown(res)
