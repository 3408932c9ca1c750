"""The order in which notebooks in flight measure (calib.runner.Turns, Calibration.await_turn):
the host-timed notebook waits for the others to be ready, the others wait for it to have measured,
and a notebook that ends however it ends never holds the rest up."""

import threading
import time

import pytest

from calib.calibration import TURN_READY_ENV, TURN_WAIT_ENV, Calibration
from calib.runner import Turns


class Future:
    def __init__(self, done=False):
        self._done = done

    def done(self):
        return self._done


def referee_in_thread(turns, futures, started, others):
    thread = threading.Thread(target=turns.referee, args=(futures, started), kwargs={"others": others}, daemon=True)
    thread.start()
    return thread


def test_the_host_timed_notebook_goes_once_every_other_in_flight_is_ready_and_they_go_once_it_has_measured(tmp_path):
    turns = Turns(tmp_path, ["launch_latency"], slots=3)
    futures = {nb: Future() for nb in ("launch_latency", "registers", "memory_bandwidth", "occupancy")}
    started = {"launch_latency", "registers"}
    thread = referee_in_thread(turns, futures, started, others=3)
    go, opened = tmp_path / Turns.GO, tmp_path / Turns.OPEN
    (tmp_path / "registers.ready").touch()
    time.sleep(0.2)
    assert not go.exists()  # a second slot is not started yet: it may still be importing
    started.add("memory_bandwidth")
    time.sleep(0.2)
    assert not go.exists()
    (tmp_path / "memory_bandwidth.ready").touch()
    time.sleep(0.2)
    assert go.exists() and not opened.exists()
    (tmp_path / "launch_latency.measured").touch()
    thread.join(2)
    assert opened.exists() and not thread.is_alive()


def test_a_notebook_that_ended_counts_as_ready_and_a_host_timed_one_that_ended_as_measured(tmp_path):
    turns = Turns(tmp_path, ["launch_latency"], slots=2)
    futures = {"launch_latency": Future(), "registers": Future(done=True)}  # died before its first sweep
    thread = referee_in_thread(turns, futures, {"launch_latency", "registers"}, others=1)
    time.sleep(0.2)
    assert (tmp_path / Turns.GO).exists()
    futures["launch_latency"]._done = True  # crashed while measuring: the others must not wait for ever
    thread.join(2)
    assert (tmp_path / Turns.OPEN).exists()


def test_a_notebook_that_never_gets_ready_holds_the_host_timed_one_up_no_longer_than_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(Turns, "READY_TIMEOUT_S", 0.3)
    said = []
    turns = Turns(tmp_path, ["launch_latency"], slots=2)
    futures = {"launch_latency": Future(), "registers": Future()}
    thread = threading.Thread(target=turns.referee, args=(futures, {"launch_latency", "registers"}),
                              kwargs={"others": 1, "echo": said.append}, daemon=True)
    thread.start()
    time.sleep(0.8)
    assert (tmp_path / Turns.GO).exists() and said == [
        "calib run: registers not ready after 0 s; launch_latency measures beside it"]
    (tmp_path / "launch_latency.measured").touch()
    thread.join(2)


def test_each_notebook_is_told_which_file_to_wait_for(tmp_path):
    turns = Turns(tmp_path, ["launch_latency"], slots=4)
    assert turns.env("launch_latency") == {TURN_WAIT_ENV: str(tmp_path / Turns.GO)}
    assert turns.env("occupancy") == {TURN_READY_ENV: str(tmp_path / "occupancy.ready"),
                                      TURN_WAIT_ENV: str(tmp_path / Turns.OPEN)}


@pytest.fixture
def cal(tmp_path):
    c = Calibration("launch_latency", backend="sim", output_dir=tmp_path / "out")
    yield c
    c.backend.close()


def test_a_sweep_says_it_is_ready_then_waits_for_its_turn_once(cal, tmp_path, monkeypatch):
    from calib.calibrations import launch_latency as launch

    ready, turn = tmp_path / "launch.ready", tmp_path / "go"
    monkeypatch.setenv(TURN_READY_ENV, str(ready))
    monkeypatch.setenv(TURN_WAIT_ENV, str(turn))
    configs = launch.plan("quick", l2_bytes=cal.backend.l2_bytes, memory_bytes=cal.backend.memory_bytes)[:2]
    threading.Timer(0.3, turn.touch).start()
    t0 = time.monotonic()
    cal.sweep(configs, progress=False)
    assert ready.exists() and time.monotonic() - t0 >= 0.3
    turn.unlink()
    ready.unlink()
    cal.sweep(configs, progress=False)  # the turn was taken: a second sweep does not wait again
    assert not ready.exists()  # waiting begins by saying it is ready (a wall-clock bound failed under load)


def test_outside_a_run_nothing_waits(cal, monkeypatch):
    monkeypatch.delenv(TURN_READY_ENV, raising=False)
    monkeypatch.delenv(TURN_WAIT_ENV, raising=False)
    t0 = time.monotonic()
    cal.await_turn()
    assert time.monotonic() - t0 < 0.1


def test_a_turn_that_never_comes_is_given_up_with_a_message(cal, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("calib.calibration.TURN_TIMEOUT_S", 0.2)
    monkeypatch.setenv(TURN_WAIT_ENV, str(tmp_path / "never"))
    cal.await_turn()
    assert "waited 0 s for" in capsys.readouterr().err
