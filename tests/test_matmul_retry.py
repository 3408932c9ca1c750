"""Matmul points that look throttled (the SM clock dropped, or the samples never settled) are
measured again after a longer pause and the fastest attempt is kept; the attempts set aside stay
in the results store under their own role. Runs without a GPU: the retry logic with a stand-in
for the CuPy backend."""

from types import SimpleNamespace

import numpy as np
import pytest

from calib.calibrations import matmul_throughput as matmul
from calib.store import Store, sqlite_url
from calib.timing import Measurement


def measurement(sm_mhz_min, perf_config, stop_reason="precision"):
    clocks = {"sm_mhz_min": sm_mhz_min, "max_sm_mhz": 1980, "throttle_reasons": ["sw_power_cap"]}
    return Measurement(np.full(10, 100.0 * 1980 / sm_mhz_min), stop_reason=stop_reason,
                       protocol={"perf_config": perf_config}, clocks=clocks)


class StandIn:
    """What measure_unthrottled uses of the CuPy backend: a stream and time_launches, here
    returning the SM clocks of successive attempts."""

    def __init__(self, clocks, stop_reasons=None):
        self.clocks = list(clocks)
        self.stop_reasons = list(stop_reasons or ["precision"] * len(self.clocks))
        self.stream = SimpleNamespace(synchronize=lambda: None)

    def time_launches(self, launch, *, rule, perf_config):
        return measurement(self.clocks.pop(0), perf_config, self.stop_reasons.pop(0))


@pytest.fixture
def pauses(monkeypatch):
    slept = []
    monkeypatch.setattr(matmul.time, "sleep", slept.append)
    return slept


def test_a_point_whose_clock_dropped_is_measured_again_after_a_longer_pause(pauses):
    m = matmul.measure_unthrottled(StandIn([1590, 1980]), None, None, {"dtype": "tf32"})
    assert not matmul.clock_dropped(m) and m.median_us == pytest.approx(100.0)
    assert pauses == [matmul.COOLDOWN_S, matmul.RETRY_COOLDOWN_S]
    assert m.protocol["attempt"] == 2
    [aside] = m.candidates
    assert aside.protocol["role"] == "set_aside" and aside.clocks["sm_mhz_min"] == 1590
    assert aside.protocol["set_aside_because"] == "SM clock dropped to 1590 MHz"


def test_a_point_whose_samples_never_settled_is_measured_again_though_its_clock_read_high(pauses):
    m = matmul.measure_unthrottled(StandIn([1980, 1980], ["budget", "precision"]), None, None, {})
    assert m.stop_reason == "precision" and len(pauses) == 2
    assert m.candidates[0].protocol["set_aside_because"] == "samples did not settle within the budget"


def test_an_unthrottled_point_is_measured_once(pauses):
    m = matmul.measure_unthrottled(StandIn([1965]), None, None, {"dtype": "fp16"})  # within 3% of the top
    assert pauses == [matmul.COOLDOWN_S] and m.candidates == []


def test_a_point_throttled_at_every_attempt_keeps_the_fastest_and_stays_marked(pauses):
    tries = 1 + matmul.THROTTLE_RETRIES
    clocks = [1600, 1800] + [1500] * (tries - 2)
    m = matmul.measure_unthrottled(StandIn(clocks), None, None, {"dtype": "tf32"})
    assert m.clocks["sm_mhz_min"] == 1800 and matmul.clock_dropped(m) and m.throttled
    assert "role" not in m.protocol and m.protocol["attempt"] == 2 and "attempt" not in m.protocol["perf_config"]
    assert len(m.candidates) == tries - 1 and len(pauses) == tries


def test_attempts_set_aside_are_stored_under_their_role_and_left_out_of_the_fit_frame(tmp_path, pauses):
    store = Store(sqlite_url(tmp_path / "r.sqlite"))
    session = store.open_session("retry", {"name": "stand-in", "uuid": "x"}, {})
    store.enqueue(session, [{"calibration": "matmul_throughput", "dtype": "tf32", "m": 8192, "n": 8192, "k": 8192}])
    [(job, _)] = store.claim([session], worker="w")
    m = matmul.measure_unthrottled(StandIn([1590, 1980]), None, None, {"dtype": "tf32"})
    assert store.complete(job, m, worker="w", candidates=m.candidates)
    assert list(store.frame(session)["time_us"]) == [pytest.approx(100.0)]
    assert len(store.frame(session, role="set_aside")) == 1


class FakeGPU:
    """A stream, events and clocks standing in for CuPy's: it logs what the host enqueues and when it
    waits, and each product takes ``us`` (one list entry per launch) of GPU time."""

    def __init__(self, us):
        self.us, self.log, self.gpu_us, self.launches = list(us), [], 0.0, 0
        gpu = self

        class Event:
            def record(self, stream):
                self.at = gpu.gpu_us
                gpu.log.append("record")

            def synchronize(self):
                gpu.log.append("synchronize")

        self.cp = SimpleNamespace(cuda=SimpleNamespace(Event=Event, get_elapsed_time=lambda a, z: (z.at - a.at) / 1e3))
        self.stream = SimpleNamespace(synchronize=lambda: self.log.append("synchronize"))
        self.clocks = SimpleNamespace(read=lambda: self.log.append("clocks") or {"sm_mhz": 1980, "max_sm_mhz": 1980})

    def launch(self, i):
        self.log.append(f"launch {i}")
        self.gpu_us += self.us[self.launches]
        self.launches += 1


def test_a_point_is_one_burst_enqueued_back_to_back_with_its_clocks_read_while_it_runs():
    gpu = FakeGPU([1000.0] * 7)
    rule = matmul.point_rule(_rule())
    m = matmul.time_back_to_back(gpu, gpu.launch, rule=rule, perf_config={"dtype": "tf32"})
    assert gpu.log[:2] == ["launch 0", "launch 1"]  # the warm-ups, not timed
    timed = gpu.log[2:-2]
    assert timed == [x for j in range(2, 7) for x in ("record", f"launch {j}", "record")]
    assert gpu.log[-2:] == ["clocks", "synchronize"]  # one wait, after the clocks were read mid-burst
    assert m.n == matmul.SAMPLES == 5 and m.median_us == pytest.approx(1000.0) and m.stop_reason == "precision"
    assert m.protocol["warmup_launches"] == matmul.WARMUP == 2 and m.clocks["readings"] == 1
    assert matmul.busy_s(m) == pytest.approx(7 * 1000e-6)


def test_a_burst_the_power_cap_reaches_mid_way_has_not_settled_and_is_measured_again(pauses):
    """TF32 at K = 8192 on an H200: 2610 us a launch, until the cap bites (2760 us: 8% slow)."""
    capped = FakeGPU([2610.0] * 5 + [2760.0] * 2 + [2610.0] * 7)
    rule = matmul.point_rule(_rule())
    first = matmul.time_back_to_back(capped, capped.launch, rule=rule)
    assert first.stop_reason == "budget" and matmul.unsettled(first) == "samples did not settle within the budget"
    capped.launches = 0
    capped.us = [2610.0] * 5 + [2760.0] * 2 + [2610.0] * 7

    def timer(launch, *, rule, perf_config):
        return matmul.time_back_to_back(capped, launch, rule=rule, perf_config=perf_config)

    m = matmul.measure_unthrottled(capped, capped.launch, rule, {"dtype": "tf32"}, timer=timer)
    assert m.stop_reason == "precision" and m.protocol["attempt"] == 2 and len(m.candidates) == 1
    assert pauses == [matmul.COOLDOWN_S, matmul.RETRY_COOLDOWN_S]


def _rule():
    from calib.timing import StoppingRule

    return StoppingRule(rel_precision=0.005)


def test_the_rule_of_a_point_is_one_batch_at_the_suites_precision():
    rule = matmul.point_rule(_rule())
    assert (rule.min_samples, rule.batch, rule.rel_precision) == (5, 5, 0.005)
    assert rule.stop_reason(np.full(5, 100.0)) == "precision"
    assert rule.stop_reason(np.array([100.0, 100, 100, 100, 103])) == "budget"  # half its range: 1.5%
    assert rule.stop_reason(np.full(4, 100.0)) is None


def test_the_pause_before_a_point_is_four_times_the_gpu_time_of_the_one_before(pauses):
    """The first point of a process pauses COOLDOWN_S; after it, IDLE_PER_BUSY times the previous
    burst's GPU time, at least MIN_PAUSE_S: a TF32 K = 8192 burst (18 ms) earns 73 ms, an fp16
    K = 2048 one (2.5 ms) the floor."""
    b = FakeGPU([2610.0] * 7 + [360.0] * 7 + [360.0] * 7)

    def timer(launch, *, rule, perf_config):
        return matmul.time_back_to_back(b, launch, rule=rule, perf_config=perf_config)

    rule = matmul.point_rule(_rule())
    for _ in range(3):
        matmul.measure_unthrottled(b, b.launch, rule, {}, timer=timer)
    assert pauses == pytest.approx([matmul.COOLDOWN_S, 4 * 7 * 2610e-6, matmul.MIN_PAUSE_S])
    b._matmul_busy_s = 1.0
    assert matmul.pause_s(b) == matmul.COOLDOWN_S  # never longer than the first
