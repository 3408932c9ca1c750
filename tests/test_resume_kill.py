"""Killing `calib run` (SIGTERM, SIGINT, or SIGKILL of calib run alone) leaves no notebook process
or Jupyter kernel measuring beside the rerun, and the rerun takes back at once the jobs that a
process known dead on this host left `running`, instead of waiting out their lease."""

import datetime as _dt
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from calib.backends.sim import SimBackend
from calib.calibrations import memory_bandwidth as dram
from calib.lifeline import pid_alive
from calib.store import Store, sqlite_url
from calib.store.dead import reclaim_dead_here
from calib.worker import Worker

HOST = socket.gethostname()
MARK = "CALIB_TEST_KILL_MARK"


def _dead_pid() -> int:
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(out.stdout)


@pytest.fixture
def session(tmp_path):
    store = Store(sqlite_url(tmp_path / "results.sqlite"))
    backend = SimBackend()
    device, software = backend.fingerprint()
    sid = store.open_session("kill", device, software)
    configs = dram.plan("quick", l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes)[:12]
    store.enqueue(sid, configs)
    return store, backend, sid


def _states(store, sid) -> dict[str, str]:
    jobs = store.jobs_frame(sid)
    return dict(zip(jobs["worker"].fillna(""), jobs["state"]))


def test_jobs_of_a_process_dead_on_this_host_are_reclaimed_at_once_and_no_others(session):
    store, backend, sid = session
    dead = f"{HOST}:{_dead_pid()}:in-process:run"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        alive = f"{HOST}:{sleeper.pid}:gpu0"
        elsewhere = f"another-host:{_dead_pid()}:gpu0"  # its pid says nothing about that host
        for name in (dead, alive, elsewhere):
            store.claim([sid], worker=name, limit=2)
        worker = Worker(store, backend, sessions=[sid], lease_timeout_s=3600, max_retries=1)
        done = {}
        stop = threading.Event()
        thread = threading.Thread(target=lambda: done.update(stats=worker.run(max_jobs=8, stop=stop)), daemon=True)
        t0 = time.monotonic()
        thread.start()
        thread.join(timeout=30)
        stop.set()
        assert "stats" in done, "the worker waited for the lease of a dead process's jobs"
        assert time.monotonic() - t0 < 20
        assert done["stats"].reclaimed == 2 and done["stats"].completed == 8
        jobs = store.jobs_frame(sid)
        by_state = jobs.groupby("state")["worker"].apply(list).to_dict()
        assert sorted(by_state["running"]) == sorted([alive, alive, elsewhere, elsewhere])
        assert (jobs["state"] == "completed").sum() == 8
        assert reclaim_dead_here(store, max_retries=1) == 0  # nothing else is dead
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_reclaimed_job_counts_a_retry_and_says_whose_process_died(session):
    store, _, sid = session
    dead_pid = _dead_pid()
    [(job_id, _)] = store.claim([sid], worker=f"{HOST}:{dead_pid}:in-process:run", limit=1)
    assert reclaim_dead_here(store, max_retries=0) == 1
    jobs = store.jobs_frame(sid).set_index("job_id")
    assert jobs.loc[job_id, "state"] == "timed_out" and jobs.loc[job_id, "retries"] == 1
    assert f"{HOST}:{dead_pid}" in jobs.loc[job_id, "error"] and "died" in jobs.loc[job_id, "error"]


def test_a_dead_worker_is_charged_for_the_job_it_had_begun_not_for_the_rest_of_its_batch(session):
    """An in-process sweep on a GPU claims 16 jobs at a time and begins them one by one: killed
    mid-batch, its recorded points stay, the point in flight counts a retry, and the points it had
    not begun go back with none (twice killed, a whole batch had ended timed_out)."""
    store, backend, sid = session
    dead = f"{HOST}:{_dead_pid()}:in-process:run"
    jobs = store.claim([sid], worker=dead, limit=6)
    (done_id, done_cfg), (flight_id, _), *untouched = jobs
    store.start([done_id], dead)
    assert store.complete(done_id, backend.measure([done_cfg])[0], worker=dead)
    store.start([flight_id], dead)
    assert reclaim_dead_here(store, max_retries=0) == 5
    frame = store.jobs_frame(sid).set_index("job_id")
    assert frame.loc[done_id, "state"] == "completed"
    assert frame.loc[flight_id, "state"] == "timed_out" and frame.loc[flight_id, "retries"] == 1
    for job_id, _ in untouched:
        assert frame.loc[job_id, "state"] == "new" and frame.loc[job_id, "retries"] == 0


def test_worker_names_start_with_host_and_pid(session):
    store, backend, sid = session
    assert Worker(store, backend).name.startswith(f"{HOST}:{os.getpid()}")
    assert Worker(store, backend, gpu_id=3).name == f"{HOST}:{os.getpid()}:gpu3"


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries the mark: everything a calib run started."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                env = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if f"{MARK}={mark}".encode() in env.split(b"\0") and pid_alive(int(entry)):
                found.append(int(entry))
    return found


def _results(run_dir: Path) -> int:
    try:
        with sqlite3.connect(run_dir / "results.sqlite") as db:
            return db.execute("SELECT count(*) FROM result").fetchone()[0]
    except sqlite3.Error:
        return 0


def _calib_run(tmp_path, jobs: int, mark: str | None = None):
    spec = tmp_path / "paced.json"
    spec.write_text(json.dumps({"pace_s": 0.1, "noise": {"seed": 5}}))
    cmd = [sys.executable, "-m", "calib", "run", "--backend", "sim", "--sim-spec", str(spec), "--run-dir",
           str(tmp_path / "run"), "--profile", str(tmp_path / "p.json"), "--no-progress", "--jobs", str(jobs),
           "--notebook", "memory_bandwidth", "--notebook", "cache_hierarchy"]
    env = {**os.environ, **({MARK: mark} if mark else {})}
    # to files, as from a terminal or a log: a pipe whose reader died would end the children by itself
    log = open(tmp_path / f"calib-run-{time.monotonic_ns()}.log", "w+")
    proc = subprocess.Popen(cmd[: -2] if jobs == 1 else cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
    proc.log = log
    return proc


def _output(proc) -> str:
    proc.log.seek(0)
    return proc.log.read()


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the processes through /proc")
@pytest.mark.parametrize("signum, jobs", [(signal.SIGTERM, 2), (signal.SIGINT, 2), (signal.SIGKILL, 2),
                                          (signal.SIGTERM, 1)], ids=["term-2", "int-2", "kill-2", "term-1"])
def test_killing_calib_run_leaves_nothing_measuring_and_the_rerun_takes_its_jobs_back_at_once(
        tmp_path, signum, jobs):
    mark = uuid.uuid4().hex
    victim = _calib_run(tmp_path, jobs, mark)
    try:
        assert _wait(lambda: _results(tmp_path / "run") >= 20 or victim.poll() is not None, 240)
        assert victim.poll() is None, _output(victim)[-2000:]
        assert len(_marked(mark)) >= (2 if jobs == 1 else 3)  # calib run, notebook processes, their kernels
        # killed while a point is being measured, not between two batches (on 2 busy cores a kill timed by
        # the result count alone once landed between batches, 2026-12-08)
        assert _wait(lambda: _begun(tmp_path) or victim.poll() is not None, 60), "no point was seen being measured"
        os.kill(victim.pid, signum)  # calib run alone: what it started is its to end
        code = victim.wait(timeout=60)
        left = _wait(lambda: not _marked(mark), 15)
    finally:
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)
    assert left, "processes of the killed calib run were still alive 15 s after it"
    err = _output(victim)
    if signum != signal.SIGKILL:
        assert code == 128 + signum, err[-2000:]
        assert "Traceback" not in err and f"stopped by {signal.Signals(signum).name}" in err, err[-2000:]
        assert "--run-dir" in err
        return
    left_running = _jobs(tmp_path, "SELECT id, started_at FROM job WHERE state = 'running'")
    assert left_running, "killed between two batches: nothing to take back (make the pace slower)"
    begun = {i: at is not None for i, at in left_running}  # a retry is charged for a begun job only
    killed_at = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    rerun = _calib_run(tmp_path, jobs)
    assert rerun.wait(timeout=600) == 0, _output(rerun)[-3000:]
    ids = ",".join(str(i) for i, _ in left_running)
    again = _jobs(tmp_path, f"SELECT id, state, retries, claimed_at FROM job WHERE id IN ({ids})")
    assert any(begun.values()), "the kill caught no job being measured (make the pace slower)"
    assert all(state == "completed" and retries == int(begun[i]) for i, state, retries, _ in again), again
    # claimed again within seconds of the rerun's start, not after the 60 s lease of calib run's sweeps
    waited_s = max((_dt.datetime.fromisoformat(at) - killed_at).total_seconds() for *_, at in again)
    assert waited_s < 45, f"the rerun took the dead process's jobs back {waited_s:.0f} s after the kill"


def _begun(tmp_path) -> list:
    """The jobs being measured now (begun and not recorded), [] while the database is busy."""
    try:
        return _jobs(tmp_path, "SELECT id FROM job WHERE state = 'running' AND started_at IS NOT NULL")
    except sqlite3.Error:
        return []


def _jobs(tmp_path, query: str) -> list:
    with sqlite3.connect(tmp_path / "run" / "results.sqlite") as db:
        return db.execute(query).fetchall()
