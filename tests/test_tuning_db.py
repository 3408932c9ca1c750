"""The tuning database for a fleet, against SQLite and a real PostgreSQL server: migrations,
clear errors, workers that claim with SKIP LOCKED, heartbeats and reclaiming, retries, winners."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from calib.backends.sim import SimBackend
from calib.keys import canonical_json, descriptor_hash
from calib.store import Store, StoreError, sqlite_url
from calib.store.winners import export_tsv, import_tsv, winners
from calib.timing import Measurement


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "tuning.sqlite")
        return
    base = os.environ.get("CALIB_TEST_POSTGRES_URL")
    if not base:
        if os.environ.get("CI"):
            pytest.fail("CI must run the PostgreSQL tests: .ci/run starts a server and sets CALIB_TEST_POSTGRES_URL")
        pytest.skip("no PostgreSQL server (eval \"$(bash scripts/postgres-for-tests start)\")")
    name = f"calib_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(base).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _session(store, spec=None):
    device, software = SimBackend(spec).fingerprint()
    return store.open_session(f"test-{uuid.uuid4().hex[:6]}", device, software)


def _configs(n):
    return [{"calibration": "memory_bandwidth", "kind": ("read", "write", "copy")[i % 3],
             "width_bytes": (1, 2, 4, 8, 16)[i % 5], "size_bytes": (1 + i) * 2**20} for i in range(n)]


def _worker_cmd(url, *extra, spec=None):
    cmd = [sys.executable, "-m", "calib", "worker", "--backend", "sim", "--db", url, *extra]
    return cmd + (["--sim-spec", str(spec)] if spec else [])


def test_fresh_database_is_at_the_newest_schema(db_url):
    store = Store(db_url)
    assert store.schema_revision() == "0004"
    with store.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM winner")).scalar() == 0


def test_older_schema_is_migrated_with_its_data(db_url):
    from alembic import command

    engine = create_engine(db_url)
    with engine.begin() as conn:
        cfg = Store.__new__(Store)._alembic_config(conn)
        command.upgrade(cfg, "0001")
        conn.execute(text("INSERT INTO session (id, label, device_name, simulated, device, software) "
                          "VALUES (1, 'old', 'calib simulated GPU (H200-like)', true, '{}', '{}')"))
        conn.execute(text("INSERT INTO config (id, experiment, descriptor, descriptor_hash) "
                          "VALUES (1, 'dram', '{\"experiment\":\"dram\"}', 'h')"))
        conn.execute(text("INSERT INTO job (id, session_id, config_id, state, retries) "
                          "VALUES (1, 1, 1, 'completed', 0)"))
        conn.execute(text("INSERT INTO result (session_id, config_id, job_id, perf_config, kernel_time_us, median_us, "
                          "n_samples, stop_reason, throttled, simulated, samples_us, protocol, clocks, warnings) "
                          "VALUES (1, 1, 1, '{}', 12.5, 12.4, 3, 'precision', false, true, '[12.4, 12.5, 12.6]', "
                          "'{}', '{}', '[]')"))
    engine.dispose()
    store = Store(db_url)
    assert store.schema_revision() == "0004"
    frame = store.frame(1)
    assert frame["time_us"].tolist() == [12.5] and store.samples(int(frame["result_id"][0])) == [12.4, 12.5, 12.6]


def test_calib_01_database_without_alembic_is_adopted(tmp_path):
    from alembic import command

    url = sqlite_url(tmp_path / "old.sqlite")
    engine = create_engine(url)
    with engine.begin() as c:  # what calib 0.1 left: its tables, calib_meta, no alembic_version
        command.upgrade(Store.__new__(Store)._alembic_config(c), "0001")
        c.execute(text("DROP TABLE alembic_version"))
    engine.dispose()
    assert Store(url).schema_revision() == "0004"


def test_newer_schema_is_refused_clearly(db_url):
    Store(db_url)
    engine = create_engine(db_url)
    with engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(StoreError, match="revision '0099', which this calib does not know.*upgrade calib"):
        Store(db_url)


@pytest.mark.parametrize("url, message", [
    ("not a url", "is not a database URL"),
    ("nosuchdialect://x/y", "cannot open results database"),
    ("postgresql+psycopg://calib:secret@127.0.0.1:1/nowhere", "cannot connect to results database"),
])
def test_bad_database_urls_give_clear_errors(url, message):
    with pytest.raises(StoreError, match=message) as info:
        Store(url)
    assert "secret" not in str(info.value)


def test_read_only_database_is_refused_clearly(tmp_path):
    path = tmp_path / "ro.sqlite"
    Store(sqlite_url(path))
    ro = f"sqlite:///file:{path}?mode=ro&uri=true"
    with pytest.raises(StoreError, match="is read-only"):
        Store(ro)
    assert Store(ro, readonly=True).counts() == {}  # reading is fine


def test_cli_names_a_bad_calib_db_url(tmp_path):
    env = {**os.environ, "CALIB_DB_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"}
    out = subprocess.run([sys.executable, "-m", "calib", "status"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and "cannot connect to results database" in out.stderr


def _insert_0002_rows(conn):
    """What schema 0002 held after a DRAM sweep and a matmul retry: bookkeeping inside perf_config."""
    def config(cid, descriptor):
        conn.execute(text("INSERT INTO config (id, experiment, descriptor, descriptor_hash) VALUES (:i, :e, :d, :h)"),
                     {"i": cid, "e": descriptor["experiment"], "d": canonical_json(descriptor),
                      "h": descriptor_hash(descriptor)})
        conn.execute(text("INSERT INTO job (id, session_id, config_id, state, retries) "
                          "VALUES (:i, 1, :i, 'completed', 0)"), {"i": cid})

    def result(cid, role, perf, t_us, protocol="{}"):
        conn.execute(text("INSERT INTO result (session_id, config_id, job_id, role, perf_config, kernel_time_us, "
                          "median_us, n_samples, stop_reason, throttled, simulated, samples_us, protocol, clocks, "
                          "warnings) VALUES (1, :c, :c, :r, :p, :t, :t, 1, 'precision', false, false, '[1.0]', :pr, "
                          "'{}', '[]')"), {"c": cid, "r": role, "p": canonical_json(perf), "t": t_us, "pr": protocol})

    conn.execute(text("INSERT INTO session (id, label, device_name, arch, sm_count, simulated, device, software) "
                      "VALUES (1, 'old', 'NVIDIA H200', '9.0', 132, false, '{}', '{}')"))
    small = {"experiment": "dram", "kind": "copy", "width_bytes": 16, "size_bytes": 2**20}  # as 0002 spelled it
    config(1, small)
    config(2, {**small, "size_bytes": 2**21})
    config(3, {"experiment": "matmul", "dtype": "bf16", "k": 4096})
    fast, slow = {"threads": 256, "blocks_per_sm": 2, "unroll": 4, "layout": "strided"}, \
        {"threads": 256, "blocks_per_sm": 1, "unroll": 1, "layout": "strided"}
    result(1, "tuning", slow, 12.0)
    result(1, "tuning", fast, 10.0)
    result(1, "measurement", {**fast, "tuned_at_bytes": 2**20}, 9.0)  # the pick measured again, luckier
    result(2, "measurement", {**fast, "tuned_at_bytes": 2**20}, 19.0)
    result(2, "measurement", {**fast, "tuned_at_bytes": 2**22}, 19.5)  # tuned on a size never swept
    result(3, "set_aside", {"tile": 128, "cooldown_s": 2.0, "attempt": 1}, 50.0,
           json.dumps({"role": "set_aside", "set_aside_because": "SM clock dropped to 1590 MHz"}))
    result(3, "measurement", {"tile": 128, "cooldown_s": 10.0, "attempt": 2}, 60.0)
    if conn.dialect.name == "postgresql":  # rows given their ids leave the sequences behind
        for table in ("session", "config", "job"):
            conn.execute(text(f"SELECT setval('{table}_id_seq', (SELECT max(id) FROM {table}))"))
    return small, fast


def test_0003_moves_bookkeeping_out_of_perf_configs_and_drops_kind_tables(db_url):
    from alembic import command
    from sqlalchemy import inspect

    engine = create_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(Store.__new__(Store)._alembic_config(conn), "0002")
        small, fast = _insert_0002_rows(conn)
    engine.dispose()
    store = Store(db_url)
    assert store.schema_revision() == "0004"
    with store.engine.connect() as c:
        tables = set(inspect(c).get_table_names())
        assert "config_conv" not in tables and "config_gemm" not in tables
        rows = c.execute(text("SELECT config_id, role, perf_config, attempt, cooldown_s, set_aside_because, "
                              "tuned_on_config_id FROM result ORDER BY id")).all()
        big_id = c.execute(text("SELECT id FROM config WHERE descriptor_hash = :h"),
                           {"h": descriptor_hash({**small, "size_bytes": 2**22})}).scalar()
        won = c.execute(text("SELECT config_id, perf_config, kernel_time_us, role FROM winner "
                             "ORDER BY config_id")).all()
    knobs = canonical_json(fast)
    assert [r.perf_config for r in rows[2:5]] == [knobs] * 3  # one launch shape, one text
    assert [r.tuned_on_config_id for r in rows] == [None, None, 1, 1, big_id, None, None]
    assert big_id is not None and big_id > 3  # the tuned-on config is created where it was missing
    assert rows[5][2:6] == ('{"tile":128}', 1, 2.0, "SM clock dropped to 1590 MHz")
    assert rows[6][2:6] == ('{"tile":128}', 2, 10.0, None)
    # config 1: the fastest tuning result, not the luckier re-measurement of the same pick; config 2:
    # its measurements (no tuning there); config 3: the measurement, never the faster attempt set aside
    assert [tuple(w) for w in won] == [(1, knobs, 10.0, "tuning"), (2, knobs, 19.0, "measurement"),
                                       (3, '{"tile":128}', 60.0, "measurement")]


def test_0003_downgrades_to_0002_and_back(db_url):
    from alembic import command

    engine = create_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(Store.__new__(Store)._alembic_config(conn), "0002")
        _insert_0002_rows(conn)
    with engine.begin() as conn:
        command.upgrade(Store.__new__(Store)._alembic_config(conn), "0003")
        before = conn.execute(text("SELECT perf_config, attempt, cooldown_s, tuned_on_config_id FROM result "
                                   "ORDER BY id")).all()
        command.downgrade(Store.__new__(Store)._alembic_config(conn), "0002")
        old = [json.loads(p) for p in conn.execute(text("SELECT perf_config FROM result ORDER BY id")).scalars()]
        assert old[2]["tuned_at_bytes"] == 2**20 and old[4]["tuned_at_bytes"] == 2**22
        assert (old[6]["attempt"], old[6]["cooldown_s"]) == (2, 10.0)
        assert conn.execute(text("SELECT count(*) FROM config_conv")).scalar() == 0
    engine.dispose()
    store = Store(db_url)
    with store.engine.connect() as c:
        after = c.execute(text("SELECT perf_config, attempt, cooldown_s, tuned_on_config_id FROM result "
                               "ORDER BY id")).all()
    assert after == before


def _tuned(t_us, knobs, problem, **protocol):
    return Measurement([t_us, t_us * 1.01, t_us * 0.99], stop_reason="precision",
                       protocol={"perf_config": knobs, "role": "tuning", "tuned_on": problem, **protocol})


def test_results_keep_knobs_only_and_tuning_is_filed_under_the_problem_it_timed(db_url):
    store = Store(db_url)
    sid = _session(store)
    point = {"calibration": "memory_bandwidth", "kind": "copy", "width_bytes": 16, "size_bytes": 2**24}
    problem = {**point, "size_bytes": 2**26}
    [jid] = store.enqueue(sid, [point])
    a, b, c = ({"threads": 256, "blocks_per_sm": n, "unroll": 4, "layout": "strided"} for n in (1, 2, 4))
    tuning = [_tuned(30.0, a, problem), _tuned(20.0, b, problem), _tuned(20.0, c, problem)]  # b and c tie
    measured = Measurement([5.0, 5.1, 4.9], stop_reason="precision",
                           protocol={"perf_config": {**b, "tuned_at_bytes": 2**26, "attempt": 3},
                                     "tuned_on": problem, "cooldown_s": 0.5})
    [(claimed, _)] = store.claim([sid], worker="w")
    assert claimed == jid and store.complete(jid, measured, worker="w", candidates=tuning)

    problem_id, point_id = store.config_id(problem), store.config_id(point)
    ranked = store.frame(sid, role="tuning")
    assert ranked["size_bytes"].tolist() == [2**26] * 3  # filed under the problem, not under this job's point
    m = store.frame(sid).iloc[0]
    assert m["size_bytes"] == 2**24 and m["perf_config"] == canonical_json(b)
    assert (m["attempt"], m["cooldown_s"], m["tuned_on_config_id"]) == (3, 0.5, problem_id)
    w = winners(store, sid).set_index("result_id")
    by_config = {json.loads(cfg)["size_bytes"]: (perf, t) for cfg, perf, t in
                 zip(w["config"], w["perf_config"], w["kernel_time_us"].round(6))}
    assert by_config == {2**26: (canonical_json(b), 20.0), 2**24: (canonical_json(b), 5.0)}  # tie: the first
    assert point_id != problem_id


@pytest.mark.slow
def test_eight_workers_drain_2000_jobs_without_double_claims(db_url, tmp_path):
    store = Store(db_url)
    sid = _session(store)
    job_ids = store.enqueue(sid, _configs(2000))
    assert len(set(job_ids)) == 2000
    procs = [subprocess.Popen(_worker_cmd(db_url, "--exit-when-empty", "--batch", "16"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    completed = lost = 0
    for out, _ in outs:
        last = out.strip().splitlines()[-1]
        completed += int(last.split(": ")[1].split(" completed")[0])
        lost += int(last.split(", ")[-1].split(" results refused")[0])
    assert completed == 2000 and lost == 0  # a double claim would make one of two completions be refused
    assert store.counts(sid)[sid]["completed"] == 2000
    with store.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM result WHERE session_id=:s"), {"s": sid}).scalar() == 2000
        distinct_jobs = text("SELECT count(DISTINCT job_id) FROM result WHERE session_id=:s")
        assert c.execute(distinct_jobs, {"s": sid}).scalar() == 2000
        workers = c.execute(text("SELECT count(DISTINCT worker) FROM job WHERE session_id=:s"), {"s": sid}).scalar()
    assert workers >= 2


@pytest.mark.slow
def test_killed_worker_job_is_reclaimed_and_a_raising_job_fails_with_its_error(db_url, tmp_path):
    spec = tmp_path / "slow.json"
    spec.write_text(json.dumps({"pace_s": 4.0}))
    store = Store(db_url)
    sid = _session(store, spec)
    [slow_job] = store.enqueue(sid, _configs(1))
    # --batch 1: the job is begun as it is claimed. In a batch it is begun a moment after the claim, and
    # a worker killed in between is charged no retry (calib.store.dead), so "running" alone did not say
    # which of the two this test would see (CI, PostgreSQL, 2026-12-04: retries 0).
    victim = subprocess.Popen(_worker_cmd(db_url, "--heartbeat-s", "0.5", "--batch", "1", spec=spec),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while store.jobs_frame(sid)["state"].tolist() != ["running"] and time.time() < deadline:
        time.sleep(0.1)
    assert store.jobs_frame(sid)["state"].tolist() == ["running"]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert store.jobs_frame(sid)["state"].tolist() == ["running"]  # nobody knows yet

    [bad_job] = store.enqueue(sid, [{"calibration": "no-such-calibration", "n": 1}])
    rescuer = subprocess.run(_worker_cmd(db_url, "--lease-timeout-s", "2", "--heartbeat-s", "0.5", "--max-retries", "2",
                                         "--exit-when-empty", "--batch", "1", spec=spec),
                             capture_output=True, text=True, timeout=120)
    assert rescuer.returncode == 0, rescuer.stderr[-2000:]
    jobs = store.jobs_frame(sid).set_index("job_id")
    assert jobs.loc[slow_job, "state"] == "completed" and jobs.loc[slow_job, "retries"] == 1
    assert "reclaimed from dead workers" in rescuer.stdout
    assert jobs.loc[bad_job, "state"] == "failed" and jobs.loc[bad_job, "retries"] == 3
    assert ("UnsupportedConfig: the simulated device has no model for calibration 'no-such-calibration'"
            in jobs.loc[bad_job, "error"])
    assert len(store.frame(sid)) == 1


def _m(t_us, perf):
    return Measurement([t_us, t_us * 1.01, t_us * 0.99], stop_reason="precision", protocol={"perf_config": perf})


def test_winners_view_and_tsv_round_trip(db_url, tmp_path):
    store = Store(db_url)
    sid = _session(store)
    store.enqueue(sid, _configs(3))
    for i, (jid, _) in enumerate(store.claim([sid], worker="w", limit=3)):
        tuning = [_m(50.0 + i, {"tile": 64}), _m(30.0 + i, {"tile": 128}), _m(40.0 + i, {"tile": 256})]
        assert store.complete(jid, _m(31.0 + i, {"tile": 128}), worker="w", candidates=tuning)
    w = winners(store, sid)
    assert len(w) == 3 and w["perf_config"].tolist() == ['{"tile":128}'] * 3
    assert w["kernel_time_us"].round(6).tolist() == [30.0, 31.0, 32.0]
    assert len(store.frame(sid, role="tuning")) == 9  # every measurement is kept, winners or not

    path = tmp_path / "winners.tsv"
    assert export_tsv(store, path, sid) == 3
    lines = path.read_text().splitlines()
    assert lines[0] == "# calib winners v1" and lines[1].split("\t")[0] == "arch" and lines[2].startswith("sim\t132\t")
    other = Store(sqlite_url(tmp_path / "other.sqlite"))
    assert import_tsv(other, path) == 3
    got = winners(other)
    assert got["config"].tolist() == w["config"].tolist()
    assert got["kernel_time_us"].round(6).tolist() == [30.0, 31.0, 32.0]
    bad = tmp_path / "bad.tsv"
    bad.write_text(lines[0] + "\n" + lines[1] + "\nsim\t132\tX\t{not json}\t{}\t1.0\n")
    with pytest.raises(StoreError, match="line 3"):
        import_tsv(other, bad)


@pytest.mark.slow
def test_sweep_waits_for_two_workers_then_status_and_winners(tmp_path, quick_dram_points):
    """The fleet path end to end through the CLI: `calib sweep --wait` enqueues and waits, two
    `calib worker` processes drain the jobs, `calib status` counts them, winners export."""
    url = sqlite_url(tmp_path / "fleet.sqlite")
    env = {**os.environ, "CALIB_DB_URL": url}
    sweep = subprocess.Popen([sys.executable, "-m", "calib", "sweep", "--backend", "sim", "--label", "fleet",
                              "--wait", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
    store = Store(url)
    deadline = time.time() + 60
    while not store.counts() and time.time() < deadline:
        time.sleep(0.2)
    workers = [subprocess.Popen([sys.executable, "-m", "calib", "worker", "--backend", "sim", "--exit-when-empty",
                                 "--batch", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for _ in range(2)]
    outs = [w.communicate(timeout=300) for w in workers]
    out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err[-2000:]
    n = quick_dram_points
    assert f"{n} points: {n} measured now, 0 already done" in out
    done = [int(o.strip().splitlines()[-1].split(": ")[1].split(" completed")[0]) for o, _ in outs]
    assert sum(done) == n
    status = subprocess.run([sys.executable, "-m", "calib", "status"], capture_output=True, text=True, env=env,
                            timeout=60)
    row = [line for line in status.stdout.splitlines() if line.rstrip().endswith("fleet")][0].split()
    assert row[-7:-1] == ["0", "0", str(n), "0", "0", "0"]  # new, running, completed, failed, timed out, skipped
    tsv = tmp_path / "w.tsv"
    exported = subprocess.run([sys.executable, "-m", "calib", "winners", "export", str(tsv)], capture_output=True,
                              text=True, env=env, timeout=60)
    assert exported.returncode == 0 and f"wrote {n} winners" in exported.stdout
