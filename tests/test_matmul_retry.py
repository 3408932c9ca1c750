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
