"""Results store: tuning-farm tables, every sample kept, resumable sweeps, failures recorded."""

import json
import sqlite3

import pytest

from calib.backends.sim import SimBackend
from calib.calibrations import memory_bandwidth as dram
from calib.keys import canonical_json, descriptor_hash
from calib.store import Store, StoreError, sqlite_url
from calib.sweep import run_sweep


@pytest.fixture
def store(tmp_path):
    return Store(sqlite_url(tmp_path / "r.sqlite"))


def _configs(backend, **kw):
    return dram.plan("quick", l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes, **kw)


def test_descriptor_identity_is_its_contents():
    a = {"calibration": "memory_bandwidth", "kind": "read", "width_bytes": 16, "size_bytes": 1 << 28}
    b = dict(reversed(list(a.items())))
    assert canonical_json(a) == canonical_json(b) and descriptor_hash(a) == descriptor_hash(b)
    assert descriptor_hash(a) != descriptor_hash({**a, "width_bytes": 8})


def test_sweep_records_sessions_configs_jobs_results_and_samples(store, tmp_path):
    backend = SimBackend()
    device, software = backend.fingerprint()
    sid = store.open_session("t", device, software, reason="unit test", ticket="CAL-1")
    configs = _configs(backend, kinds=["read"], widths=[16, 4])
    report = run_sweep(backend, configs, store, sid, progress=False)
    assert report.measured == len(configs) and not report.failed
    frame = store.frame(sid)
    assert len(frame) == len(configs) and frame["simulated"].all()
    assert {"kind", "width_bytes", "size_bytes", "time_us", "se_us", "n_samples", "perf_config"} <= set(frame.columns)
    samples = store.samples(int(frame["result_id"].iloc[0]))
    assert len(samples) == frame["n_samples"].iloc[0]

    db = sqlite3.connect(tmp_path / "r.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    row = db.execute("select device_name, arch, simulated, reason, ticket, calib_version from session").fetchone()
    assert row[0].startswith("calib simulated GPU") and row[2] == 1 and row[3:5] == ("unit test", "CAL-1")
    states = db.execute("select state, count(*) from job group by state").fetchall()
    assert states == [("completed", len(configs))]
    proto = json.loads(db.execute("select protocol from result limit 1").fetchone()[0])
    assert proto["rule"]["rel_precision"] == backend.rule.rel_precision


def test_rerun_in_same_session_measures_only_what_is_missing(store):
    backend = SimBackend()
    device, software = backend.fingerprint()
    sid = store.open_session("resume", device, software)
    configs = _configs(backend)
    first = run_sweep(backend, configs[:40], store, sid, progress=False)  # "killed" after 40 points
    assert first.measured == 40
    assert store.open_session("resume", device, software) == sid
    second = run_sweep(backend, configs, store, sid, progress=False)
    assert second.already_done == 40 and second.measured == len(configs) - 40
    assert len(store.frame(sid)) == len(configs)


def test_failed_point_is_recorded_with_its_error_and_retried_next_time(store, fixture_path):
    backend = SimBackend(fixture_path("tiny_memory_gpu.json"))
    device, software = backend.fingerprint()
    sid = store.open_session("oom", device, software)
    configs = [{"calibration": "memory_bandwidth", "kind": "copy", "width_bytes": 16, "size_bytes": 1 << 30},
               {"calibration": "memory_bandwidth", "kind": "read", "width_bytes": 16, "size_bytes": 1 << 24}]
    report = run_sweep(backend, configs, store, sid, progress=False)
    assert report.measured == 1 and len(report.failed) == 1
    jobs = store.jobs_frame(sid).set_index("size_bytes")
    assert jobs.loc[1 << 30, "state"] == "failed" and "DeviceOutOfMemory" in jobs.loc[1 << 30, "error"]
    assert jobs.loc[1 << 30, "retries"] == 2  # the first attempt and one retry
    again = run_sweep(backend, configs, store, sid, progress=False)
    assert again.already_done == 1 and len(again.failed) == 1
    assert store.jobs_frame(sid).set_index("size_bytes").loc[1 << 30, "retries"] == 3


def test_session_label_of_another_device_is_refused(store):
    device, software = SimBackend().fingerprint()
    store.open_session("shared", device, software)
    other = {**device, "name": "NVIDIA H200", "simulated": False}
    with pytest.raises(StoreError, match="another device"):
        store.open_session("shared", other, software)





class OneByOne(SimBackend):
    """The simulated device as a GPU's worker sees it: one job per claim (not vectorized), each
    measure call recorded."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = []

    def measure(self, configs):
        self.calls.append(len(configs))
        return super().measure(configs)


class ClaimsAsAGpu(OneByOne):
    """The worker loop as a GPU backend sees it (``simulated`` False): its measure calls recorded."""
    simulated = False


def test_an_in_process_sweep_on_a_gpu_claims_its_jobs_in_batches_and_measures_them_all(store):
    """Claimed one by one, every point paid the worker loop's transactions (on an H200 the quick L2
    sweep's 263 points took 4.2-5.1 s in the suite, 1.5 s timed alone): the in-process sweep claims
    IN_PROCESS_BATCH jobs at a time, and every one is measured and completed once."""
    from calib.sweep import IN_PROCESS_BATCH

    backend = ClaimsAsAGpu()
    device, software = backend.fingerprint()
    sid = store.open_session("t", device, software)
    configs = _configs(backend)[: 2 * IN_PROCESS_BATCH + 5]
    claimed, real_claim = [], store.claim

    def claim(*a, **kw):
        jobs = real_claim(*a, **kw)
        claimed.append(len(jobs))
        return jobs

    store.claim = claim
    assert run_sweep(backend, configs, store, sid, progress=False).measured == len(configs)
    assert claimed[:3] == [IN_PROCESS_BATCH, IN_PROCESS_BATCH, 5] and not any(claimed[3:])
    assert backend.calls == [1] * len(configs)  # begun, measured and recorded one after another
    jobs = store.jobs_frame(sid)
    assert len(jobs) == len(configs) and (jobs["state"] == "completed").all()
    assert len(store.frame(sid)) == len(configs)  # one measurement each, none lost or doubled


class OnePointRaises(ClaimsAsAGpu):
    """A GPU backend whose measure call raises (not a per-config error) when one point is among its
    configs, as memory_bandwidth's shape search raises NoCandidateSurvived."""
    bad = None

    def measure(self, configs):
        if self.bad in configs:
            self.calls.append(len(configs))
            raise RuntimeError("no candidate survived its check")
        return super().measure(configs)


def test_a_point_whose_measure_call_raises_fails_alone_in_a_claimed_batch(store):
    """Claimed IN_PROCESS_BATCH at a time, one point's exception must not fail the batch's other points:
    the worker measures a batch whose call raised again one config at a time (before, all 16 jobs of the
    batch failed on both attempts and the sweep lost 15 good points)."""
    from calib.sweep import IN_PROCESS_BATCH

    backend = OnePointRaises()
    device, software = backend.fingerprint()
    sid = store.open_session("t", device, software)
    configs = _configs(backend)[: 2 * IN_PROCESS_BATCH + 5]
    backend.bad = configs[IN_PROCESS_BATCH + 3]
    report = run_sweep(backend, configs, store, sid, progress=False)
    assert report.measured == len(configs) - 1
    assert [c for c, _ in report.failed] == [backend.bad] and "no candidate survived" in report.failed[0][1]
    jobs = store.jobs_frame(sid)
    assert (jobs["state"] == "completed").sum() == len(configs) - 1
    assert len(store.frame(sid)) == len(configs) - 1  # one measurement each of the others, none doubled


def test_a_calibration_that_times_its_points_in_rounds_gets_them_in_one_measure_call(store, monkeypatch):
    """launch_latency's host-timed points are interleaved (calib.timing.interleave): the sweep must
    hand the backend all of them at once, where a GPU worker otherwise claims one job at a time."""
    from calib import calibrations
    from calib import worker as worker_module

    launch = calibrations.get("launch_latency")
    backend = OneByOne()
    device, software = backend.fingerprint()
    sid = store.open_session("t", device, software)
    configs = launch.plan("quick")
    real_init = worker_module.Worker.__init__

    def as_on_a_gpu(self, *a, batch=None, **kw):  # the GPU default: one job per claim unless told
        real_init(self, *a, batch=batch or 1, **kw)

    monkeypatch.setattr(worker_module.Worker, "__init__", as_on_a_gpu)
    assert run_sweep(backend, configs, store, sid, progress=False).measured == len(configs)
    assert backend.calls == [len(configs)]
    assert calibrations.measured_together(configs) is launch
    dram_configs = _configs(backend, kinds=["read"], widths=[16])
    assert calibrations.measured_together(dram_configs) is None  # measured one by one
    assert calibrations.measured_together(configs[:1]) is None and calibrations.measured_together(
        configs + dram_configs) is None
    backend.calls.clear()
    sid2 = store.open_session("t2", device, software)
    run_sweep(backend, dram_configs, store, sid2, progress=False)
    assert set(backend.calls) == {1}


def test_a_database_at_the_newest_migration_opens_without_importing_alembic(store, tmp_path):
    """Each notebook of a calib run opens the run's database as they all start: alembic's import
    (0.5-0.9 s) is for the one that migrates. The static head is alembic's own."""
    import subprocess
    import sys

    from alembic.script import ScriptDirectory

    from calib.store.core import MIGRATIONS, _static_head

    assert _static_head() == ScriptDirectory(str(MIGRATIONS)).get_current_head()
    code = ("import sys; from calib.store import Store; Store(sys.argv[1]); "
            "print('alembic' in sys.modules)")
    opened = subprocess.run([sys.executable, "-c", code, store.url], capture_output=True, text=True, check=True)
    assert opened.stdout.strip() == "False", opened.stderr
    fresh = subprocess.run([sys.executable, "-c", code, sqlite_url(tmp_path / "new.sqlite")], capture_output=True,
                           text=True, check=True)
    assert fresh.stdout.strip() == "True"  # a new database is migrated by alembic


def test_the_frame_says_how_many_rounds_a_host_timed_point_set_aside():
    """The launch fit flags a run whose host was unsteady from the frame's ``n_set_aside``; the
    store reads it from the protocol's ``host_unsteady`` note, and only there."""
    from calib.store.core import _host_unsteady

    note = {"host_unsteady": {"set_aside_rounds": [3, 4, 5, 9], "rounds": 40, "slowdown": 1.35}}
    assert _host_unsteady(note) == {"n_set_aside": 4}
    assert _host_unsteady({"host_unsteady": {"set_aside_rounds": [], "rounds": 40}}) == {"n_set_aside": 0}
    assert _host_unsteady({"rule": {}}) == {} and _host_unsteady(None) == {}


def test_a_sweep_measures_only_its_own_points_when_notebooks_share_a_session(store):
    """The notebooks of one `calib run` share its session. A sweep whose run was killed left points of
    another notebook new; on the resume the first sweep to start measured them with its own backend
    (another random stream, and on a GPU without that notebook's compile-first step)."""
    backend = SimBackend()
    device, software = backend.fingerprint()
    sid = store.open_session("shared", device, software)
    mine, theirs = _configs(backend, kinds=["read"], widths=[16]), _configs(backend, kinds=["write"], widths=[16])
    their_jobs = store.enqueue(sid, theirs)  # left new by a notebook that has not started yet
    report = run_sweep(backend, mine, store, sid, progress=False, desc="mine")
    assert report.measured == len(mine)
    assert store.job_state_counts(their_jobs) == {"new": len(theirs)}


def test_ctrl_c_returns_a_workers_claimed_jobs_without_charging_a_retry(tmp_path, monkeypatch, capsys):
    """An interrupted `calib worker` left its claims `running`; the next worker reclaimed each with a
    retry charged, so a few interruptions timed a job out. Now it hands them back on its way out."""
    from calib.cli import main
    from calib.worker import Worker

    url = sqlite_url(tmp_path / "w.sqlite")
    store = Store(url)
    backend = SimBackend()
    device, software = backend.fingerprint()
    sid = store.open_session("ctrl-c", device, software)
    jobs = store.enqueue(sid, _configs(backend, kinds=["read"], widths=[16])[:6])

    def claim_then_interrupt(self, **kw):
        self.store.claim([sid], worker=self.name, limit=4)
        raise KeyboardInterrupt

    monkeypatch.setattr(Worker, "run", claim_then_interrupt)
    assert main(["worker", "--backend", "sim", "--db", url, "--exit-when-empty"]) == 130
    assert "4 claimed job(s) returned to the queue" in capsys.readouterr().err
    assert store.job_state_counts(jobs) == {"new": 6}
    frame = store.jobs_frame(sid)
    assert (frame["retries"] == 0).all() and frame["worker"].isna().all()
