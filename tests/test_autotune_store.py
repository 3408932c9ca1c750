"""The autotune cache in the tuning database, on SQLite and a real PostgreSQL server: a second
process hits without benchmarking, concurrent tuners leave one consistent entry per key, export on
one store and import on another gives hits, import is idempotent, bad lines are reported alone;
and ``calib cache ...``."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from calib.autotune import jsonl
from calib.autotune.storage import AutotuneDB
from calib.cli import main
from calib.store import sqlite_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autotune_helpers import run, workload  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _pg_database():
    base = os.environ.get("CALIB_TEST_POSTGRES_URL")
    if not base:
        if os.environ.get("CI"):
            pytest.fail("CI must run the PostgreSQL tests: .ci/run starts a server and sets CALIB_TEST_POSTGRES_URL")
        pytest.skip("no PostgreSQL server (eval \"$(bash scripts/postgres-for-tests start)\")")
    name = f"calib_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    return admin, name, make_url(base).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "cache.sqlite")
        return
    admin, name, url = _pg_database()
    yield url
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def other_url(request, tmp_path, db_url):
    if db_url.startswith("sqlite"):
        yield sqlite_url(tmp_path / "other.sqlite")
        return
    admin, name, url = _pg_database()
    yield url
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_a_second_process_hits_without_benchmarking(db_url):
    _, _, choices = run(db_url, workload(8))
    code = ("import sys, json; sys.path.insert(0, 'tests'); from autotune_helpers import run, workload; "
            f"t, fam, ch = run({db_url!r}, workload(8), seed=3); "
            "print(json.dumps([ch, t.counters.benchmarks, t.counters.hits]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [choices, 0, 8]


def test_concurrent_tuners_leave_one_consistent_entry_per_key(db_url):
    run(db_url, workload(1))
    code = ("import sys, json; sys.path.insert(0, 'tests'); from autotune_helpers import run, workload; "
            f"t, fam, ch = run({db_url!r}, workload(8), seed=int(sys.argv[1])); print(json.dumps(ch))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(s)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for s in (4, 5, 6, 7)]
    outs = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    engine = create_engine(db_url)
    with engine.connect() as c:
        dup = c.execute(text("SELECT descriptor_key FROM autotune_entry GROUP BY family, descriptor_key, device_key "
                             "HAVING count(*) > 1")).all()
        n = c.execute(text("SELECT count(*) FROM autotune_entry")).scalar()
    engine.dispose()
    t, fam, stored = run(db_url, workload(8))
    assert dup == [] and n == 8 and fam.timed == [] and all(o == stored for o in outs)


def test_a_corrupt_entry_does_not_discard_the_others(db_url):
    problems = workload(3)
    run(db_url, problems)
    engine = create_engine(db_url)
    with engine.begin() as c:
        c.execute(text("UPDATE autotune_entry SET descriptor = 'garbage' "
                       "WHERE id = (SELECT min(id) FROM autotune_entry)"))
    engine.dispose()
    with pytest.warns(UserWarning, match="corrupt"):
        t, fam, _ = run(db_url, problems)
    assert t.counters.hits == 2 and t.counters.misses == 1 and t.counters.corrupt == 1


def test_export_here_import_there_gives_hits_and_importing_twice_changes_nothing(db_url, other_url, tmp_path):
    _, _, choices = run(db_url, workload(6))
    path = tmp_path / "cache.jsonl"
    assert jsonl.export(AutotuneDB(db_url), path) == 6
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["version"] == 1 and {"who", "when", "machine"} <= set(header["exported"])
    first = jsonl.import_file(AutotuneDB(other_url), path)
    assert (first.new, first.unchanged, first.read.problems) == (6, 0, [])
    again = jsonl.import_file(AutotuneDB(other_url), path)
    assert (again.new, again.changed, again.unchanged) == (0, 0, 6)
    t, fam, got = run(other_url, workload(6))
    assert got == choices and fam.timed == [] and t.counters.hits == 6
    e = t.entry("toy", workload(6)[0])
    assert e.source == "imported" and e.provenance["imported"]["source"] == str(path)
    assert len(AutotuneDB(other_url).samples(e.id)["alpha"]) >= 10  # the samples travel too


def test_bad_lines_are_reported_and_lose_no_other_entry(db_url, other_url, tmp_path):
    run(db_url, workload(4))
    path = tmp_path / "cache.jsonl"
    jsonl.export(AutotuneDB(db_url), path)
    lines = path.read_text().splitlines()
    future = json.loads(lines[2])
    future["version"] = 2
    foreign = json.loads(lines[3])
    foreign["device"] = {**foreign["device"], "name": "NVIDIA A100-SXM4-80GB", "sm_count": 108}
    foreign["device_key"] = None
    lines[2] = json.dumps(future)
    lines[3] = json.dumps(foreign)
    lines.insert(1, '{"format": "calib.autotune", "version": 1, "kind": "entry", "family": "toy", "descr')
    path.write_text("\n".join(lines) + "\n")
    from calib.autotune.entries import device_key

    this_device = json.loads(lines[-1])["device"]
    rep = jsonl.import_file(AutotuneDB(other_url), path, device_key=device_key(this_device))
    messages = dict(rep.read.problems)
    assert rep.new == 2 and rep.read.corrupt == 1 and rep.read.future == 1 and rep.read.other_device == 1
    assert "not JSON" in messages[2] and "newer than this calib reads" in messages[4]
    assert "another device (NVIDIA A100-SXM4-80GB" in messages[5]


def test_calib_cache_commands(db_url, tmp_path, capsys):
    run(db_url, workload(3))
    assert main(["cache", "list", "--db", db_url, "--backend", "sim"]) == 0
    out = capsys.readouterr().out
    assert "3 entries" in out and "toy" in out
    key = AutotuneDB(db_url).read_all()[0][0].descriptor_key
    assert main(["cache", "show", key[:10], "--db", db_url, "--backend", "sim"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["descriptor_key"] == key and len(shown["timings"]) == 3
    path = tmp_path / "x.jsonl"
    assert main(["cache", "export", str(path), "--db", db_url, "--backend", "sim"]) == 0
    other = sqlite_url(tmp_path / "imported.sqlite")
    assert main(["cache", "import", str(path), "--db", other, "--backend", "sim"]) == 0
    assert "3 new" in capsys.readouterr().out
    assert main(["cache", "import", str(path), "--db", other, "--backend", "sim"]) == 0
    assert "0 new, 0 merged, 3 unchanged" in capsys.readouterr().out
    # a line left out is reported by number and the import exits 1 (the rest imported), as verify does
    partly = tmp_path / "partly.jsonl"
    partly.write_text(path.read_text() + "{not json\n")
    assert main(["cache", "import", str(partly), "--db", other, "--backend", "sim"]) == 1
    out, err = capsys.readouterr()
    bad_line = len(path.read_text().splitlines()) + 1
    assert "0 new, 0 merged, 3 unchanged; 1 corrupt" in out and f"{partly}:{bad_line}:" in err
    assert main(["cache", "verify", "--db", db_url, "--backend", "sim"]) == 0
    assert "3 entries checked, 0 problems" in capsys.readouterr().out
    engine = create_engine(db_url)
    with engine.begin() as c:
        c.execute(text("UPDATE autotune_entry SET software = :s WHERE id = (SELECT min(id) FROM autotune_entry)"),
                  {"s": json.dumps({"calib": "0.0.1", "driver": "1"})})
    engine.dispose()
    assert main(["cache", "verify", "--db", db_url, "--backend", "sim"]) == 1
    assert "stale" in capsys.readouterr().out
    assert main(["cache", "prune", "--stale", "--db", db_url, "--backend", "sim"]) == 0
    assert "1 entries pruned" in capsys.readouterr().out
    assert len(AutotuneDB(db_url).read_all()[0]) == 2
    assert main(["cache", "prune", "--db", db_url, "--backend", "sim"]) == 2  # says what it needs
    assert main(["cache", "show", "--db", db_url, "--backend", "sim"]) == 2
