"""The tuning database and its TSV against hostile input (issue 10, items 6 and 7).

Every fault is a StoreError (a CalibError: one line and exit 2 on the command line) that says what
is wrong and leaves the database and the files as they were.
"""

import os
import resource
import signal
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, event, text
from test_tuning_db import _configs, _m, _session, db_url  # noqa: F401 - db_url is a fixture

from calib.backends.sim import SimBackend
from calib.errors import CalibError
from calib.store import Store, StoreError, sqlite_url
from calib.timing import Measurement
from calib.store.winners import TSV_HEADER, TSV_MAGIC, export_tsv, import_tsv, winners

pytestmark = pytest.mark.timeout(120)

HEAD = TSV_MAGIC + "\n" + "\t".join(TSV_HEADER) + "\n"
GOOD = [
    'sm_90\t132\tNVIDIA H200\t{"calibration":"memory_bandwidth","size_bytes":1048576}\t{"tile":128}\t30.5',
    'sm_90\t132\tNVIDIA H200\t{"calibration":"memory_bandwidth","size_bytes":2097152}\t{"tile":64}\t41.25',
]
CONFIG = '{"calibration":"memory_bandwidth","size_bytes":4194304}'

# (name, the bad line, what the message must say). Each file is the header, two good lines, then this.
HOSTILE_LINES = [
    ("too few fields", f"sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{}}", "5 fields, expected 6"),
    ("too many fields", f"sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{}}\t1.0\textra", "7 fields"),
    ("sm_count not an integer", f"sm_90\tmany\tNVIDIA H200\t{CONFIG}\t{{}}\t1.0", "sm_count 'many'"),
    ("sm_count negative", f"sm_90\t-4\tNVIDIA H200\t{CONFIG}\t{{}}\t1.0", "not a positive 32-bit"),
    ("sm_count over 32 bits", f"sm_90\t{2**40}\tNVIDIA H200\t{CONFIG}\t{{}}\t1.0", "not a positive 32-bit"),
    ("time not a number", f"sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{}}\tfast", "kernel_time_us 'fast'"),
    ("time NaN", f"sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{}}\tnan", "positive finite"),
    ("time infinite", f"sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{}}\tinf", "positive finite"),
    ("time zero", f"sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{}}\t0", "positive finite"),
    ("config not JSON", "sm_90\t132\tNVIDIA H200\t{not json}\t{}\t1.0", "config is not JSON"),
    ("config a list", "sm_90\t132\tNVIDIA H200\t[1, 2]\t{}\t1.0", "config is a JSON list"),
    ("config with NaN", 'sm_90\t132\tNVIDIA H200\t{"size": NaN}\t{}\t1.0', "NaN"),
    ("config nested too deep", "sm_90\t132\tNVIDIA H200\t" + '{"a":' * 5000 + "1" + "}" * 5000 + "\t{}\t1.0",
     "config"),
    ("perf_config not JSON", f"sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{tile\t1.0", "perf_config is not JSON"),
    ("perf_config a number", f"sm_90\t132\tNVIDIA H200\t{CONFIG}\t128\t1.0", "perf_config is a JSON int"),
    ("perf_config with Infinity", f'sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{"t": Infinity}}\t1.0', "perf_config"),
    ("empty arch", f"\t132\tNVIDIA H200\t{CONFIG}\t{{}}\t1.0", "arch is empty"),
    ("device name too long", f"sm_90\t132\t{'X' * 300}\t{CONFIG}\t{{}}\t1.0", "at most 128"),
    ("calibration name too long", 'sm_90\t132\tNVIDIA H200\t{"calibration":"' + "c" * 80 + '"}\t{}\t1.0',
     "longer than 64"),
    ("calibration name a lone surrogate", 'sm_90\t132\tNVIDIA H200\t{"calibration":"mem\\ud800"}\t{}\t1.0',
     "calibration name .* cannot be stored as UTF-8"),
    # json.loads kept the second of a key written twice: a hand-edited line imported another config
    ("config key twice", 'sm_90\t132\tNVIDIA H200\t{"calibration":"memory_bandwidth","size_bytes":1,"size_bytes":2}'
     '\t{}\t1.0', 'the config: key "size_bytes" appears twice'),
    ("perf_config key twice", f'sm_90\t132\tNVIDIA H200\t{CONFIG}\t{{"tile":64,"tile":128}}\t1.0',
     'the perf_config: key "tile" appears twice'),
]


def _counts(url):
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return tuple(c.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in ("session", "config", "result"))
    finally:
        engine.dispose()


@pytest.mark.parametrize("name, line, message", HOSTILE_LINES, ids=[h[0] for h in HOSTILE_LINES])
def test_a_bad_line_refuses_the_whole_file_and_leaves_the_database_as_it_was(db_url, tmp_path,  # noqa: F811
                                                                            name, line, message):
    store = Store(db_url)
    before = _counts(db_url)
    path = tmp_path / "hostile.tsv"
    path.write_text(HEAD + "\n".join(GOOD) + "\n" + line + "\n" + GOOD[0] + "\n")
    with pytest.raises(StoreError, match=f"line 5: .*{message}"):
        import_tsv(store, path)
    assert _counts(db_url) == before, "the lines before the bad one were committed"


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"arch\tsm_count\n", "line 1: not a calib winners file"),
    (b"# calib winners v7\n" + "\t".join(TSV_HEADER).encode() + b"\n", "v7, written by a newer calib.*: upgrade calib"),
    (TSV_MAGIC.encode() + b"\narch\tdevice\n", "line 2: expected the columns"),
    (TSV_MAGIC.encode() + b"\n", "line 2: expected the columns"),
    (HEAD.encode() + GOOD[0].encode() + b"\n" + GOOD[1].replace("H200", "H\xb5").encode("latin-1") + b"\n",
     "line 4: not UTF-8"),
    # int() of over 4300 digits raised ValueError: a traceback, not the upgrade hint
    (b"# calib winners v" + b"9" * 5000 + b"\n" + "\t".join(TSV_HEADER).encode() + b"\n",
     "v999999999999, written by a newer calib.*: upgrade calib"),
], ids=["empty", "no magic", "newer version", "wrong columns", "no header", "non-UTF-8", "version of 5000 digits"])
def test_a_bad_file_is_refused_with_its_line(tmp_path, content, message):
    url = sqlite_url(tmp_path / "db.sqlite")
    store = Store(url)
    path = tmp_path / "bad.tsv"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=message):
        import_tsv(store, path)
    assert _counts(url) == (0, 0, 0)


def test_a_winners_file_with_a_byte_order_mark_imports(tmp_path):
    """A Windows editor's byte-order mark before the magic line had made the file "not a calib winners file"."""
    store = Store(sqlite_url(tmp_path / "db.sqlite"))
    path = tmp_path / "bom.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEAD + "\n".join(GOOD) + "\n").encode())
    assert import_tsv(store, path) == 2


def test_a_missing_file_or_a_folder_is_refused(tmp_path):
    store = Store(sqlite_url(tmp_path / "db.sqlite"))
    with pytest.raises(StoreError, match="no such file"):
        import_tsv(store, tmp_path / "nowhere.tsv")
    with pytest.raises(StoreError, match="not a file"):
        import_tsv(store, tmp_path)


def test_importing_twice_changes_nothing(db_url, tmp_path):  # noqa: F811
    store = Store(db_url)
    path = tmp_path / "w.tsv"
    path.write_text(HEAD + "\n".join(GOOD + [GOOD[0]]) + "\n")  # a line twice in one file counts once
    assert import_tsv(store, path) == 2
    first = (_counts(db_url), winners(store).to_dict("records"))
    assert import_tsv(store, path) == 0
    copy = tmp_path / "copy-under-another-name.tsv"
    copy.write_bytes(path.read_bytes())
    assert import_tsv(store, copy) == 0  # identified by content, not by file name
    assert (_counts(db_url), winners(store).to_dict("records")) == first
    faster = tmp_path / "faster.tsv"
    faster.write_text(HEAD + GOOD[0].replace("\t30.5", "\t29.0") + "\n")
    assert import_tsv(store, faster) == 1  # a new time is a new fact; it joins the device's imported session
    assert sorted(winners(store)["kernel_time_us"]) == [29.0, 41.25]  # and wins there


def test_export_then_import_round_trips_and_is_idempotent(db_url, tmp_path):  # noqa: F811
    store = Store(db_url)
    sid = _session(store)
    store.enqueue(sid, _configs(3))
    for i, (jid, _) in enumerate(store.claim([sid], worker="w", limit=3)):
        assert store.complete(jid, _m(30.0 + i, {"tile": 128}), worker="w")
    path = tmp_path / "w.tsv"
    assert export_tsv(store, path, sid) == 3
    other = Store(sqlite_url(tmp_path / "other.sqlite"))
    assert import_tsv(other, path) == 3 and import_tsv(other, path) == 0
    again = tmp_path / "again.tsv"
    export_tsv(other, again)
    assert again.read_text().splitlines()[2:] == path.read_text().splitlines()[2:]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_export_gives_one_line_per_key_the_fastest_of_the_sessions_that_tuned_it(db_url, tmp_path):  # noqa: F811
    store = Store(db_url)
    for times in ((30.0, 40.0, 50.0), (31.0, 39.0, 52.0)):  # a rerun of the same three configs
        sid = _session(store)
        store.enqueue(sid, _configs(3))
        for t, (jid, _) in zip(times, store.claim([sid], worker="w", limit=3)):
            assert store.complete(jid, _m(t, {"tile": 128}), worker="w")
    assert len(winners(store)) == 6
    path = tmp_path / "w.tsv"
    assert export_tsv(store, path) == 3
    rows = [line.split("\t") for line in path.read_text().splitlines()[2:]]
    assert len({r[3] for r in rows}) == 3 and sorted(float(r[5]) for r in rows) == [30.0, 39.0, 50.0]


_EXPORT_UNDER_A_SIZE_LIMIT = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from calib.cli import main
sys.exit(main(["winners", "export", "--db", sys.argv[2], sys.argv[3]]))
"""


def test_export_on_a_full_disk_leaves_the_old_file_intact(tmp_path):
    """The file-size limit (RLIMIT_FSIZE) fails writes the way a full disk does (EFBIG instead
    of ENOSPC), in a process of its own; the export is ~180 kB, the limit 64 kB."""
    url = sqlite_url(tmp_path / "db.sqlite")
    store = Store(url)
    many = tmp_path / "many.tsv"
    many.write_text(HEAD + "".join(f'sm_90\t132\tNVIDIA H200\t{{"calibration":"m","size_bytes":{i}}}\t{{"tile":128}}'
                                   f"\t{10.0 + i}\n" for i in range(2000)))
    assert import_tsv(store, many) == 2000
    store.engine.dispose()
    target = tmp_path / "good.tsv"
    target.write_text(HEAD + GOOD[0] + "\n")
    good = target.read_bytes()
    out = subprocess.run([sys.executable, "-c", _EXPORT_UNDER_A_SIZE_LIMIT, str(64 * 1024), url, str(target)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "cannot write" in out.stderr and "it is unchanged" in out.stderr
    assert target.read_bytes() == good
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)  # the limit was the child's alone


def test_export_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    store = Store(sqlite_url(tmp_path / "db.sqlite"))
    target = tmp_path / "shared.tsv"
    target.write_text("old")
    target.chmod(0o664)
    export_tsv(store, target)
    assert target.stat().st_mode & 0o777 == 0o664 and target.read_text().startswith(TSV_MAGIC)


def test_export_to_an_impossible_path_is_a_store_error(tmp_path):
    store = Store(sqlite_url(tmp_path / "db.sqlite"))
    (tmp_path / "file").write_text("")
    for target in (tmp_path / "file" / "w.tsv", "/proc/w.tsv", tmp_path / "missing" / "w.tsv"):
        with pytest.raises(StoreError, match="cannot write"):
            export_tsv(store, target)


# -- item 7: the database itself -----------------------------------------------------------

def _calib(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "calib", *args], capture_output=True, text=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items() if k != "CALIB_DB_URL"})


def test_a_file_that_is_not_sqlite_is_a_clear_error_through_the_cli(tmp_path):
    junk = tmp_path / "results.sqlite"
    junk.write_bytes(b"this is a CSV file, not a database\n" * 200)
    url = sqlite_url(junk)
    for args in (["status", "--db", url], ["winners", "export", "--db", url, str(tmp_path / "w.tsv")],
                 ["winners", "import", "--db", url, str(tmp_path / "w.tsv")]):
        out = _calib(*args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr)
        assert "is not an SQLite database" in out.stderr
    assert junk.read_bytes() == b"this is a CSV file, not a database\n" * 200


def test_read_only_commands_on_a_mistyped_path_create_nothing(tmp_path):
    typo = tmp_path / "resluts.sqlite"
    for args in (["status", "--db", sqlite_url(typo)],
                 ["winners", "export", "--db", sqlite_url(typo), str(tmp_path / "w.tsv")]):
        out = _calib(*args)
        assert out.returncode == 2 and f"no results database at {typo}" in out.stderr, out.stderr
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoreError, match="no results database"):
        Store(sqlite_url(typo), readonly=True)


@pytest.mark.parametrize("where", ["under a regular file", "in /proc", "a new folder in /proc", "a folder"])
def test_impossible_sqlite_paths_are_clear_errors(tmp_path, where):
    (tmp_path / "plain").write_text("")
    path = {"under a regular file": tmp_path / "plain" / "db.sqlite", "in /proc": "/proc/calib-test.sqlite",
            "a new folder in /proc": "/proc/calib-test/db.sqlite", "a folder": tmp_path}[where]
    for readonly in (False, True):
        with pytest.raises(StoreError) as info:
            Store(sqlite_url(path), readonly=readonly)
        assert str(path) in str(info.value)


def test_a_folder_calib_cannot_write_is_a_clear_error(tmp_path, monkeypatch):
    """Root writes any folder, so EACCES on the migration lock is simulated; a directory in the
    lock file's place is the real case that fails for root too."""
    import filelock

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", self.lock_file)

    with monkeypatch.context() as m:
        m.setattr(filelock.FileLock, "acquire", refuse)
        with pytest.raises(StoreError, match=r"migration lock .*\.migrate\.lock \(Permission denied\).*writable"):
            Store(sqlite_url(tmp_path / "ro" / "db.sqlite"))
    (tmp_path / "db.sqlite.migrate.lock").mkdir()
    with pytest.raises(StoreError, match="Is a directory"):
        Store(sqlite_url(tmp_path / "db.sqlite"))


def test_a_newer_schema_read_only_says_upgrade_calib(db_url):  # noqa: F811
    Store(db_url)
    engine = create_engine(db_url)
    with engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(StoreError) as info:
        Store(db_url, readonly=True)
    assert "written by a newer calib; upgrade calib" in str(info.value) and "migrate" not in str(info.value)


def test_an_empty_sqlite_file_read_only_is_not_a_calib_database(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    with pytest.raises(StoreError, match="not a calib results database"):
        Store(sqlite_url(path), readonly=True)


def test_a_disk_that_fills_mid_sweep_keeps_what_was_measured(tmp_path):
    """SQLite's max_page_count makes a real SQLITE_FULL ("database or disk is full") once the
    file reaches it, exactly as a full disk does."""
    url = sqlite_url(tmp_path / "db.sqlite")
    store = Store(url)
    sid = _session(store)
    jobs = store.enqueue(sid, _configs(400))
    with store.engine.connect() as c:
        pages = c.exec_driver_sql("PRAGMA page_count").scalar()
    store.engine.dispose()
    event.listen(store.engine, "connect",
                 lambda conn, _: conn.execute(f"PRAGMA max_page_count = {pages + 40}"))
    completed = 0
    with pytest.raises(StoreError) as info:
        for jid, _ in store.claim([sid], worker="w", limit=len(jobs)):
            big = Measurement([30.0 + k * 1e-3 for k in range(500)], stop_reason="precision",
                              protocol={"perf_config": {"tile": 128}})  # ~10 kB a result: the file fills in a few
            assert store.complete(jid, big, worker="w")
            completed += 1
    message = str(info.value)
    assert isinstance(info.value, CalibError) and "is full" in message
    assert "measurements recorded so far are kept" in message
    assert 0 < completed < 400
    store.engine.dispose()
    reopened = Store(url, readonly=True)
    assert reopened.counts(sid)[sid]["completed"] == completed  # nothing measured before the fault was lost
    assert len(reopened.frame(sid)) == completed


def test_cli_sweep_on_a_full_database_is_one_line(tmp_path):
    """The same fault through `calib sweep`: a message and exit 2, not a traceback."""
    url = sqlite_url(tmp_path / "db.sqlite")
    Store(url).engine.dispose()
    script = ("import sqlalchemy, sys\n"
              "from sqlalchemy import event\n"
              "orig = sqlalchemy.create_engine\n"
              "def small(*a, **k):\n"
              "    e = orig(*a, **k)\n"
              "    event.listen(e, 'connect', lambda c, _: c.execute('PRAGMA max_page_count = 40'))\n"
              "    return e\n"
              "import calib.store.core as core\n"
              "core.create_engine = small\n"
              "from calib.cli import main\n"
              "sys.exit(main(['sweep', '--backend', 'sim', '--db', sys.argv[1], '--label', 'full',\n"
              "               '--no-progress']))\n")
    out = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "is full" in out.stderr and "kept" in out.stderr
    assert signal.SIGXFSZ  # (keeps the signal import honest on platforms without it)


def _read_only_mount(monkeypatch, folder):
    """A read-only mount, simulated: ``folder`` is not writable, and SQLite cannot open a WAL
    database there (it must create ``-shm`` beside it) unless asked for an immutable read."""
    import sqlite3

    from calib import sqlite_files

    real_access, real_connect = os.access, sqlite3.dbapi2.connect
    here = str(folder)

    def access(p, mode, *a, **kw):
        return False if mode == os.W_OK and str(p).startswith(here) else real_access(p, mode, *a, **kw)

    def connect(target, *a, uri=False, **kw):
        if here in str(target) and not (uri and "immutable=1" in str(target)):
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(target, *a, uri=uri, **kw)

    monkeypatch.setattr(sqlite_files.os, "access", access)
    monkeypatch.setattr(sqlite3.dbapi2, "connect", connect)


def _filled(path) -> str:
    import sqlite3

    url = sqlite_url(path)
    store = Store(url)
    sid = _session(store)
    store.enqueue(sid, _configs(3))
    store.engine.dispose()
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return url


def test_a_database_on_a_read_only_mount_is_read(tmp_path, monkeypatch):
    """``calib status`` or a report on an archived database in a folder nobody may write: the
    plain open fails there ("unable to open database file"), so a reader opens it immutable."""
    url = _filled(tmp_path / "archive.sqlite")
    _read_only_mount(monkeypatch, tmp_path)
    store = Store(url, readonly=True)
    assert store.url == url and sum(c["new"] for c in store.counts().values()) == 3
    with pytest.raises(StoreError, match="cannot connect.*unable to open"):
        Store(url)  # a writer still cannot: the message names the fault


def test_a_read_only_mount_with_writes_pending_in_the_wal_is_refused_with_what_to_do(tmp_path, monkeypatch):
    url = _filled(tmp_path / "archive.sqlite")
    (tmp_path / "archive.sqlite-wal").write_bytes(b"\0" * 4096)  # writes an immutable read would not see
    _read_only_mount(monkeypatch, tmp_path)
    with pytest.raises(StoreError, match="holds writes not yet in the database.*copy the database with its -wal"):
        Store(url, readonly=True)


@pytest.fixture
def read_only_mount(tmp_path):
    """A real read-only bind mount of a folder (needs root and mount; skipped elsewhere)."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    made = subprocess.run(f"mount --bind {src} {mnt} && mount -o remount,ro,bind {mnt}", shell=True,
                          capture_output=True, timeout=30)
    if made.returncode != 0:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30)
        pytest.skip("no read-only bind mount here (needs root and mount)")
    yield src, mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)  # lazy: a connection may hold it


def test_links_across_a_read_only_mount_are_judged_by_the_file_they_name(tmp_path, read_only_mount):
    """A link on the read-only mount to a live database elsewhere is read as usual, so writes still in
    its -wal are seen (judged by the link's folder, it had been read immutable, without them); a link
    in a writable folder to a database on the mount is read immutable (it had failed to open)."""
    import sqlite3

    src, mnt = read_only_mount
    live = tmp_path / "live" / "db.sqlite"
    live.parent.mkdir()
    _filled(live)
    (src / "db.sqlite").symlink_to(live)
    writer = sqlite3.connect(live)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE job SET state = 'skipped'")
    writer.commit()
    try:
        assert os.path.getsize(str(live) + "-wal") > 0
        counts = Store(f"sqlite:///{mnt / 'db.sqlite'}", readonly=True).counts()  # the link, not resolved
        assert sum(c["skipped"] for c in counts.values()) == 3 and sum(c["new"] for c in counts.values()) == 0
    finally:
        writer.close()
    _filled(src / "archive.sqlite")
    (tmp_path / "link.sqlite").symlink_to(mnt / "archive.sqlite")
    counts = Store(f"sqlite:///{tmp_path / 'link.sqlite'}", readonly=True).counts()
    assert sum(c["new"] for c in counts.values()) == 3


def test_a_folder_named_with_url_characters_holds_its_database(tmp_path, monkeypatch):
    """``?``, ``#`` and ``%`` in a path are percent-encoded in its URL (HOME=/tmp/q?home had put the
    autotune database at /tmp/q), and read back the same by SQLAlchemy and by the cache's fast path."""
    from calib.autotune.storage import resolve_url
    from calib.sqlite_files import path_of

    odd = tmp_path / "q?home #1 100%"
    odd.mkdir()
    url = sqlite_url(odd / "db.sqlite")
    Store(url)
    assert (odd / "db.sqlite").is_file() and sorted(os.listdir(tmp_path)) == [odd.name]
    assert path_of(url) == str(odd / "db.sqlite") and path_of(url + "?timeout=5") == str(odd / "db.sqlite")
    monkeypatch.setenv("XDG_DATA_HOME", str(odd))
    monkeypatch.delenv("CALIB_DB_URL", raising=False)
    assert path_of(resolve_url()) == str(odd / "calib" / "autotune.sqlite")


def _corrupt_past_the_header(path):
    """The root pages of the job and result tables and their indexes overwritten: the header and the schema still read,
    so the database opens, and the first query of those tables (a job count, a winner) meets garbage."""
    import sqlite3

    con = sqlite3.connect(path)
    page = con.execute("PRAGMA page_size").fetchone()[0]
    sql = "SELECT rootpage FROM sqlite_master WHERE tbl_name IN ('job', 'result') AND rootpage > 1"
    roots = [r for (r,) in con.execute(sql)]
    con.close()
    data = bytearray(path.read_bytes())
    for root in roots:
        data[(root - 1) * page:root * page] = b"\xab" * page
    path.write_bytes(bytes(data))


def test_a_database_corrupt_past_its_header_is_one_line_naming_it(tmp_path):
    path = tmp_path / "results.sqlite"
    swept = _calib("sweep", "--db", sqlite_url(path), "--backend", "sim", "--label", "a", "--no-progress")
    assert swept.returncode == 0, swept.stderr
    _corrupt_past_the_header(path)
    before = path.read_bytes()
    for args in (["status"], ["winners", "export", str(tmp_path / "w.tsv")],
                 ["worker", "--backend", "sim", "--exit-when-empty"]):
        out = _calib(*args, "--db", sqlite_url(path))
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr)
        assert f"{path} is corrupt" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert path.read_bytes() == before


def test_a_session_label_that_is_no_text_is_refused_with_its_name(tmp_path):
    """A shell hands Python an argument with bytes that are not UTF-8 as lone surrogates, which no
    database stores: the insert had ended in a UnicodeEncodeError traceback."""
    url = sqlite_url(tmp_path / "db.sqlite")
    out = _calib("sweep", "--db", url, "--backend", "sim", "--label", "run-\udcff", "--no-progress")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "label" in out.stderr and "UTF-8" in out.stderr
    store = Store(url)
    device, software = SimBackend().fingerprint()
    with pytest.raises(StoreError, match="ticket"):
        store.open_session("fine", device, software, ticket="T-\ud800")


@pytest.mark.parametrize("args, said", [
    (["--label", ""], "non-empty name"), (["--label", "   "], "non-empty name"),
    (["--label", "L", "--reason", "r" * 129], "reason is 129 characters long; the results database keeps at most 128"),
    (["--label", "x" * 513], "label is 513 characters"),
])
def test_a_session_text_no_column_keeps_is_refused_before_anything_is_written(tmp_path, args, said):
    """An empty label named no session to resume; text longer than its column SQLite kept and
    PostgreSQL refused part way through a fleet's sweep (the widths are the tables')."""
    url = sqlite_url(tmp_path / "db.sqlite")
    out = _calib("sweep", "--db", url, "--backend", "sim", *args, "--no-progress")
    assert out.returncode == 2 and "Traceback" not in out.stderr and said in out.stderr, out.stderr
    assert Store(url).sessions_for_device(SimBackend().fingerprint()[0]) == []
