"""Matmul points whose SM clock dropped (the power cap) are measured again after a longer pause;
the attempts set aside are kept in the results store under their own role. Runs without a GPU:
the retry logic with a stand-in for the CuPy backend."""

from types import SimpleNamespace

import numpy as np
import pytest

from calib.backends import cupy_runners
from calib.store import Store, sqlite_url
from calib.timing import Measurement


def measurement(sm_mhz_min, perf_config):
    clocks = {"sm_mhz_min": sm_mhz_min, "max_sm_mhz": 1980, "throttle_reasons": ["sw_power_cap"]}
    return Measurement(np.full(10, 100.0 * 1980 / sm_mhz_min), stop_reason="precision",
                       protocol={"perf_config": perf_config}, clocks=clocks)


class StandIn:
    """What measure_unthrottled uses of the CuPy backend: a stream and time_launches, here
    returning the SM clocks of successive attempts."""

    def __init__(self, clocks):
        self.clocks = list(clocks)
        self.stream = SimpleNamespace(synchronize=lambda: None)

    def time_launches(self, launch, *, rule, perf_config):
        return measurement(self.clocks.pop(0), perf_config)


@pytest.fixture
def pauses(monkeypatch):
    slept = []
    monkeypatch.setattr(cupy_runners.time, "sleep", slept.append)
    return slept


def test_a_point_whose_clock_dropped_is_measured_again_after_a_longer_pause(pauses):
    m = cupy_runners.measure_unthrottled(StandIn([1590, 1980]), None, None, {"dtype": "tf32"})
    assert not cupy_runners.clock_dropped(m) and m.median_us == pytest.approx(100.0)
    assert pauses == [cupy_runners.MATMUL_COOLDOWN_S, cupy_runners.MATMUL_RETRY_COOLDOWN_S]
    assert m.protocol["perf_config"]["attempt"] == 2
    [aside] = m.candidates
    assert aside.protocol["role"] == "throttled" and aside.clocks["sm_mhz_min"] == 1590


def test_an_unthrottled_point_is_measured_once(pauses):
    m = cupy_runners.measure_unthrottled(StandIn([1965]), None, None, {"dtype": "fp16"})  # within 3% of the top
    assert pauses == [cupy_runners.MATMUL_COOLDOWN_S] and m.candidates == []


def test_a_point_still_throttled_after_the_last_attempt_is_kept_and_stays_marked(pauses):
    tries = 1 + cupy_runners.MATMUL_THROTTLE_RETRIES
    m = cupy_runners.measure_unthrottled(StandIn([1600] * tries), None, None, {"dtype": "tf32"})
    assert cupy_runners.clock_dropped(m) and m.throttled and "role" not in m.protocol
    assert len(m.candidates) == tries - 1 and len(pauses) == tries


def test_attempts_set_aside_are_stored_under_their_role_and_left_out_of_the_fit_frame(tmp_path, pauses):
    store = Store(sqlite_url(tmp_path / "r.sqlite"))
    session = store.open_session("retry", {"name": "stand-in", "uuid": "x"}, {})
    store.enqueue(session, [{"experiment": "matmul", "dtype": "tf32", "m": 8192, "n": 8192, "k": 8192}])
    [(job, _)] = store.claim([session], worker="w")
    m = cupy_runners.measure_unthrottled(StandIn([1590, 1980]), None, None, {"dtype": "tf32"})
    assert store.complete(job, m, worker="w", candidates=m.candidates)
    assert list(store.frame(session)["time_us"]) == [pytest.approx(100.0)]
    assert len(store.frame(session, role="throttled")) == 1
