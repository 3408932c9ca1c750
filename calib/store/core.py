"""The tuning database: sessions, configs, jobs and results, shared by the workers of a fleet.

SQLite (WAL, foreign keys, a busy timeout) is the embedded default; PostgreSQL serves a fleet
through ``CALIB_DB_URL``. Opening a database brings its schema to the current migration (under a
lock, so that eight workers starting at once migrate it once). Workers claim jobs with one
``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING`` statement, which SQLite
runs atomically under its write lock, so no job is ever handed to two workers.

Every fault of the database itself (a path that cannot be a database, a file that is not one, a
folder calib may not write, a full disk, a schema from a newer calib) is a :class:`StoreError`
that says which and what to do; a command that only reads never creates a database.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import case, create_engine, event, func, literal, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session

from ..errors import CalibError
from ..keys import canonical_json, descriptor_hash
from ..sqlite_files import immutable_uri, in_read_only_folder, url_of, wal_pending
from .tables import JOB_STATES, TERMINAL_STATES, ConfigRow, JobRow, ResultRow, SessionRow, utcnow

ENV_DB_URL = "CALIB_DB_URL"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


class StoreError(CalibError, RuntimeError):
    pass


def sqlite_url(path: str | os.PathLike) -> str:
    return url_of(Path(path).resolve())


def default_url(fallback_path: str | os.PathLike) -> str:
    """``CALIB_DB_URL`` when set (a fleet's shared database), else SQLite at ``fallback_path``."""
    return os.environ.get(ENV_DB_URL) or sqlite_url(fallback_path)


def _sqlite_pragmas(dbapi_conn, _record):
    # SQLAlchemy's recipe for pysqlite: calib emits BEGIN itself (see _sqlite_begin).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
    except Exception:  # a read-only database keeps its journal mode; the write will say why
        pass
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _read_only_mount_url(parsed, shown: str):
    """The URL through which a reader opens a SQLite file in a folder nobody may write (see
    calib.sqlite_files): immutable, or refused with what to do where the ``-wal`` holds writes
    that such a read would miss, rather than shown without them."""
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:" or path.startswith("file:"):
        return parsed
    if not os.path.isfile(path) or not in_read_only_folder(path):
        return parsed
    if wal_pending(path):
        raise StoreError(f"results database {shown} sits in a folder calib may not write and its -wal file holds "
                         "writes not yet in the database, which a read here would miss: copy the database with its "
                         "-wal file somewhere writable and read it there")
    return parsed.set(database=immutable_uri(path)).update_query_dict({"uri": "true"})


def _sqlite_begin(conn):
    """Every transaction takes SQLite's write lock up front (waiting up to the busy timeout):
    a deferred transaction that read first could not upgrade to a writer once another process had
    committed, and would fail instead of waiting."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _is_disk_full(exc: Exception) -> bool:
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlstate", None) == "53100" or getattr(orig, "pgcode", None) == "53100":  # PostgreSQL disk_full
        return True
    if getattr(orig, "sqlite_errorcode", None) == 13:  # SQLITE_FULL
        return True
    text_ = str(orig).lower()
    return "database or disk is full" in text_ or "no space left on device" in text_


def _is_not_a_database(exc: Exception) -> bool:
    orig = getattr(exc, "orig", None) or exc
    return getattr(orig, "sqlite_errorcode", None) == 26 or "file is not a database" in str(orig).lower()


def _is_corrupt(exc: Exception) -> bool:
    """SQLITE_CORRUPT: a file whose header reads but whose pages do not (a copy cut short, a disk
    fault). It opens, so the fault meets the first query of a table, mid-command."""
    orig = getattr(exc, "orig", None) or exc
    code = getattr(orig, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF == 11) or "database disk image is malformed" in str(orig).lower()


def _translate_errors(store: "Store"):
    """An engine ``handle_error`` hook: the faults no caller can recover from become StoreErrors
    wherever they happen (a disk fills in the middle of a sweep, not when the database is opened).
    Everything else (a busy database, a lost connection) stays a DBAPIError for its callers."""

    def handle(ctx):
        exc = ctx.original_exception
        if _is_disk_full(exc):
            raise StoreError(f"results database {store.url} is full ({_describe(exc)}): the measurements recorded so "
                             "far are kept; free some space (or point CALIB_DB_URL elsewhere) and run the same "
                             "command again to measure the rest") from None
        if _is_not_a_database(exc):
            raise StoreError(f"{store.url} is not an SQLite database ({_describe(exc)}): check the path") from None
        if _is_corrupt(exc):
            raise StoreError(f"results database {store.url} is corrupt ({_describe(exc)}): calib leaves it as it is; "
                             "move it aside (sqlite3's .recover may save its rows) and run the command again") from None

    return handle


def _describe(exc: Exception) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


class Store:
    """A handle on one tuning database; cheap to open, safe to share between processes."""

    def __repr__(self):  # the URL without its password; frame(), sessions_frame() and jobs_frame() are the tables
        return f"<Store {self.url}{' (read-only)' if getattr(self, 'readonly', False) else ''}>"

    def __init__(self, url: str, *, readonly: bool = False):
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise StoreError(f"{url!r} is not a database URL (expected e.g. sqlite:///path/results.sqlite or "
                             "postgresql+psycopg://user@host/db)") from None
        self.url = parsed.render_as_string(hide_password=True)
        self._raw_url = url
        if readonly:
            parsed = _read_only_mount_url(parsed, self.url)
        try:
            kwargs = {"pool_pre_ping": True} if parsed.get_backend_name() == "postgresql" else {}
            self.engine = create_engine(parsed, future=True, **kwargs)
        except (NoSuchModuleError, ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot open results database {self.url}: {_describe(exc)} (for PostgreSQL: "
                             "pip install 'calib[postgres]')") from None
        self.dialect = self.engine.dialect.name
        event.listen(self.engine, "handle_error", _translate_errors(self))
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "begin", _sqlite_begin)
            path = parsed.database
            if path and path != ":memory:" and not path.startswith("file:"):
                self._check_sqlite_path(Path(path), readonly)
        try:
            with self.engine.connect() as conn:
                if self.dialect == "sqlite":  # opening is lazy: read the header now, not mid-command
                    conn.exec_driver_sql("SELECT count(*) FROM sqlite_master")
        except DBAPIError as exc:
            raise StoreError(f"cannot connect to results database {self.url}: {_describe(exc)}") from None
        if readonly:
            self._check_revision()
        else:
            self._migrate()
            self._probe_write()

    @staticmethod
    def _check_sqlite_path(path: Path, readonly: bool):
        """SQLite creates a missing file on connect: right for a sweep, wrong for ``calib status``
        on a mistyped path, which would report an empty database that it has just made."""
        if path.is_dir():
            raise StoreError(f"results database {path} is a folder, not a file")
        if readonly:
            if not path.exists():
                raise StoreError(f"no results database at {path} (a command that only reads does not create one): "
                                 "check the path")
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise StoreError(f"cannot create results database {path}: a file is in the way of its folder "
                             f"{path.parent}") from None
        except OSError as exc:
            raise StoreError(f"cannot create results database {path}: its folder {path.parent} cannot be made "
                             f"({exc.strerror or exc})") from None

    def _probe_write(self):
        """Fail now, with a clear message, rather than at the first result of a long sweep."""
        try:
            with self.engine.begin() as conn:
                conn.execute(text("UPDATE alembic_version SET version_num = version_num"))
        except DBAPIError as exc:
            message = _describe(exc)
            if "readonly" in message.replace("-", "").replace(" ", "").lower() or "read-only" in message:
                raise StoreError(f"results database {self.url} is read-only ({message}): calib must write to it; "
                                 "copy it somewhere writable or point CALIB_DB_URL elsewhere") from None
            raise StoreError(f"cannot write to results database {self.url}: {message}") from None

    def _check_revision(self):
        from alembic.script import ScriptDirectory

        scripts = ScriptDirectory(str(MIGRATIONS))
        head = scripts.get_current_head()
        try:
            current = self.schema_revision()
            if current is None:
                with self.engine.connect() as conn:
                    tables = _has_table(conn, "session") or _has_table(conn, "calib_meta")
                if not tables:
                    raise StoreError(f"results database {self.url} is empty: not a calib results database, or one "
                                     "no calib has written to yet")
        except DBAPIError as exc:
            raise StoreError(f"cannot read results database {self.url}: {_describe(exc)}") from None
        if current is not None and current not in {r.revision for r in scripts.walk_revisions()}:
            raise StoreError(f"results database {self.url} is at schema revision {current!r}, which this calib does "
                             f"not know (it reads up to {head!r}): it was written by a newer calib; upgrade calib")
        if current != head:
            raise StoreError(f"results database {self.url} is at schema revision {current!r}, this calib reads "
                             f"{head!r}: open it writable once to migrate it")

    # -- schema -----------------------------------------------------------------------------
    def _alembic_config(self, connection):
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = connection
        return cfg

    def schema_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def _at_head(self) -> bool:
        """Whether the database is already at the newest migration, read without alembic: importing
        alembic takes 0.5-0.9 s, paid by each of the eleven notebooks of a ``calib run`` as they
        start together, though only the first one to open a fresh database has anything to migrate.
        Anything unexpected (no version table, several heads, an unreadable migration) says no, and
        the full path decides."""
        head = _static_head()
        if head is None:
            return False
        try:
            with self.engine.connect() as conn:
                if not _has_table(conn, "alembic_version"):
                    return False
                rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        except (OperationalError, DBAPIError):
            return False
        return rows == [head]

    def _migrate(self):
        """Bring the schema to the newest migration; refuse a database newer than this calib."""
        if self._at_head():
            return
        from alembic import command
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
        try:
            with self._migration_lock() as conn:
                current = MigrationContext.configure(conn).get_current_revision()
                known = {r.revision for r in ScriptDirectory(str(MIGRATIONS)).walk_revisions()}
                if current is not None and current not in known:
                    raise StoreError(f"results database {self.url} is at schema revision {current!r}, which this "
                                     f"calib does not know (it knows up to {head!r}): it was written by a newer "
                                     "calib; upgrade calib")
                if current is None and _has_table(conn, "calib_meta"):
                    current = "0001"  # written by calib 0.1 before migrations existed
                    command.stamp(self._alembic_config(conn), "0001")
                if current != head:
                    command.upgrade(self._alembic_config(conn), "head")
                conn.commit()
        except StoreError:
            raise
        except (OperationalError, DBAPIError) as exc:
            message = _describe(exc)
            if "readonly" in message.replace("-", "").replace(" ", "").lower():
                raise StoreError(f"results database {self.url} is read-only ({message}): calib must write to it; "
                                 "copy it somewhere writable or point CALIB_DB_URL elsewhere") from None
            raise StoreError(f"cannot migrate results database {self.url} to schema {head}: {message}") from None

    @contextmanager
    def _migration_lock(self):
        """One migrator at a time: PostgreSQL's advisory lock, a lock file beside a SQLite file."""
        conn = self.engine.connect()
        file_lock = None
        try:
            if self.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_lock(7254061)"))
                conn.commit()
            elif self.dialect == "sqlite":
                # Batch migrations rebuild tables; SQLite checks foreign keys per statement unless
                # told not to, which it only takes outside a transaction.
                conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=OFF")
                path = self.engine.url.database
                if path and path != ":memory:" and not path.startswith("file:"):
                    file_lock = _acquire_file_lock(path + ".migrate.lock", self.url)
            yield conn
        finally:
            try:
                conn.rollback()
                if self.dialect == "postgresql":
                    conn.execute(text("SELECT pg_advisory_unlock(7254061)"))
                    conn.commit()
                elif self.dialect == "sqlite":
                    conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=ON")
            finally:
                conn.close()
                if file_lock:
                    file_lock.release()

    # -- sessions ---------------------------------------------------------------------------
    def open_session(self, label: str, device: dict, software: dict, *, reason: str | None = None,
                     ticket: str | None = None, container: str | None = None) -> int:
        """The session called ``label`` for this device, created if new: re-running a sweep under
        the same label resumes it. A label already used by another device, or by the simulated
        device under another spec, is an error (:func:`calib.fingerprint.measurement_differences`)."""
        from ..fingerprint import measurement_differences

        container = container or os.environ.get("CALIB_CONTAINER")
        if not isinstance(label, str) or not label.strip():
            raise StoreError(f"a session label is a non-empty name, not {label!r:.40}")
        columns = SessionRow.__table__.c
        for what, column, value in (("label", "label", label), ("reason", "reason", reason),
                                    ("ticket", "ticket", ticket), ("container", "container", container),
                                    ("device name", "device_name", device.get("name"))):
            _check_text(what, value, columns[column].type.length)
        with Session(self.engine) as s, s.begin():
            rows = s.scalars(select(SessionRow).where(SessionRow.label == label).order_by(SessionRow.id)).all()
            for row in rows:
                if not measurement_differences(row.device, device):
                    return row.id
            if rows:
                diffs = "; ".join(measurement_differences(rows[-1].device, device))
                raise StoreError(f"session {label!r} in {self.url} was measured on another device ({diffs})")
            row = SessionRow(label=label, device_name=str(device.get("name")), arch=device.get("compute_capability"),
                             sm_count=device.get("sm_count"), simulated=bool(device.get("simulated")),
                             driver=software.get("driver"), cuda_runtime=software.get("cuda_runtime"),
                             cupy_version=software.get("cupy"), calib_version=software.get("calib"),
                             device=device, software=software, reason=reason, ticket=ticket,
                             container=container,
                             machine_name=socket.gethostname())
            s.add(row)
            s.flush()
            return row.id

    def sessions_for_device(self, device: dict) -> list[int]:
        """Sessions whose device this one can measure for (:func:`calib.fingerprint.measurement_differences`)."""
        from ..fingerprint import measurement_differences

        with Session(self.engine) as s:
            rows = s.execute(select(SessionRow.id, SessionRow.device)).all()
        return [sid for sid, dev in rows if not measurement_differences(dev, device)]

    def link_profile(self, session_id: int, profile_path: str | os.PathLike):
        with Session(self.engine) as s, s.begin():
            s.get(SessionRow, session_id).profile_path = str(profile_path)

    # -- configs and jobs -------------------------------------------------------------------
    def config_id(self, descriptor: dict, s: Session | None = None) -> int:
        own = s is None
        s = s or Session(self.engine)
        try:
            h = descriptor_hash(descriptor)
            cid = s.scalar(select(ConfigRow.id).where(ConfigRow.descriptor_hash == h))
            if cid is None:
                row = ConfigRow(experiment=str(descriptor.get("calibration", "")),
                                descriptor=canonical_json(descriptor), descriptor_hash=h)
                s.add(row)
                s.flush()
                cid = row.id
            if own:
                s.commit()
            return cid
        finally:
            if own:
                s.close()

    def enqueue(self, session_id: int, descriptors: list[dict], *, retry_failed: bool = True) -> list[int]:
        """Job ids for these configs in this session: ``new`` jobs where none exist; failed or
        timed-out jobs go back to ``new`` (a sweep run again runs what is not completed)."""
        out = []
        with Session(self.engine) as s, s.begin():
            existing = dict(s.execute(select(JobRow.config_id, JobRow.id).where(JobRow.session_id == session_id)).all())
            for d in descriptors:
                cid = self.config_id(d, s)
                jid = existing.get(cid)
                if jid is None:
                    job = JobRow(session_id=session_id, config_id=cid, state="new", retries=0)
                    s.add(job)
                    s.flush()
                    jid = existing[cid] = job.id
                out.append(jid)
            if retry_failed:
                s.execute(update(JobRow).where(JobRow.id.in_(out), JobRow.state.in_(("failed", "timed_out")))
                          .values(state="new"))
        return out

    def claim(self, session_ids: list[int], *, worker: str, gpu_id: int | None = None,
              limit: int = 1, job_ids: list[int] | None = None) -> list[tuple[int, dict]]:
        """Hand up to ``limit`` ``new`` jobs of these sessions to ``worker``, atomically. One job is
        started as it is claimed; of several, each is ``started_at`` only once the worker begins it
        (:meth:`start`), so that a worker that dies mid-batch is charged a retry for the jobs it had
        begun, not for the ones it never touched (calib.store.dead). ``job_ids``: only these (an
        in-process sweep's own points: the notebooks of one run share its session, and one sweep had
        measured another's points with its own backend after a resume)."""
        if not session_ids or job_ids == []:
            return []
        now = utcnow()
        pick = select(JobRow.id).where(JobRow.session_id.in_(session_ids), JobRow.state == "new")
        if job_ids is not None:
            pick = pick.where(JobRow.id.in_(job_ids))
        pick = pick.order_by(JobRow.id).limit(limit).with_for_update(skip_locked=True)
        stmt = (update(JobRow).where(JobRow.id.in_(pick.scalar_subquery()), JobRow.state == "new")
                .values(state="running", claimed_at=now, started_at=now if limit == 1 else None,
                        heartbeat_at=now, worker=worker,
                        gpu_id=gpu_id, machine_name=socket.gethostname(), finished_at=None)
                .returning(JobRow.id, JobRow.config_id))
        with Session(self.engine) as s, s.begin():
            rows = sorted(s.execute(stmt).all())
            if not rows:
                return []
            descriptors = dict(s.execute(select(ConfigRow.id, ConfigRow.descriptor)
                                         .where(ConfigRow.id.in_([r.config_id for r in rows]))).all())
        return [(r.id, json.loads(descriptors[r.config_id])) for r in rows]

    def pending(self, session_ids: list[int]) -> int:
        """Jobs of these sessions not yet in a terminal state (new or running)."""
        if not session_ids:
            return 0
        with Session(self.engine) as s:
            return s.scalar(select(func.count()).where(JobRow.session_id.in_(session_ids),
                                                       JobRow.state.not_in(TERMINAL_STATES)))

    def start(self, job_ids: list[int], worker: str) -> None:
        """Mark claimed jobs begun (``started_at``): the ones a worker's death is charged for."""
        with Session(self.engine) as s, s.begin():
            s.execute(update(JobRow).where(JobRow.id.in_(job_ids), JobRow.worker == worker,
                                           JobRow.state == "running").values(started_at=utcnow()))

    def heartbeat(self, job_id: int, worker: str) -> bool:
        """Refresh the job's heartbeat; False if the job is no longer this worker's."""
        with Session(self.engine) as s, s.begin():
            n = s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.worker == worker,
                                               JobRow.state == "running").values(heartbeat_at=utcnow())).rowcount
        return n == 1

    def _owned(self, job_id: int, worker: str | None):
        cond = [JobRow.id == job_id, JobRow.state == "running"]
        return cond + ([JobRow.worker == worker] if worker is not None else [])

    def complete(self, job_id: int, measurement, *, worker: str | None = None, candidates=()) -> bool:
        """Record the measurement (and the candidates it was chosen from: tuning candidates, or
        attempts set aside, whose protocol names their role) and mark the job completed, in one
        transaction; refused (False) if the job was reclaimed from this worker meanwhile.

        A tuning candidate whose protocol names the problem it was timed on (``tuned_on``) is filed
        under that problem's config, which may be another size than this job's: its time is a time
        of that problem, and the ``winner`` view ranks it there."""
        with Session(self.engine) as s, s.begin():
            row = s.execute(update(JobRow).where(*self._owned(job_id, worker))
                            .values(state="completed", finished_at=utcnow(), error=None)
                            .returning(JobRow.session_id, JobRow.config_id)).first()
            if row is None:
                return False
            for cand in candidates:
                protocol = cand.protocol or {}
                role = protocol.get("role", "tuning")
                config_id = row.config_id
                if role == "tuning" and protocol.get("tuned_on") is not None:
                    config_id = self.config_id(protocol["tuned_on"], s)
                s.add(_result_row(row.session_id, config_id, job_id, cand, role=role))
            tuned_on = (measurement.protocol or {}).get("tuned_on")
            tuned_on_id = None if tuned_on is None else self.config_id(tuned_on, s)
            s.add(_result_row(row.session_id, row.config_id, job_id, measurement, role="measurement",
                              tuned_on_config_id=tuned_on_id))
        return True

    def fail(self, job_id: int, error: str, *, worker: str | None = None, max_retries: int = 0) -> str | None:
        """Count a failed attempt: back to ``new`` while retries remain, else ``failed`` with the
        error kept. Returns the new state (None if the job was not this worker's any more)."""
        retry = JobRow.retries + 1 <= max_retries
        with Session(self.engine) as s, s.begin():
            row = s.execute(update(JobRow).where(*self._owned(job_id, worker))
                            .values(retries=JobRow.retries + 1, error=error,
                                    state=case((retry, "new"), else_="failed"),
                                    finished_at=case((retry, None), else_=utcnow()))
                            .returning(JobRow.state)).first()
        return None if row is None else row.state

    def release_process(self, host: str, pid: int) -> int:
        """This process's running jobs back to ``new``, no retry charged: what an interrupted worker
        or sweep (Ctrl-C) does on its way out. Its claims had stayed ``running`` until another worker
        reclaimed them, each charged a retry, so that a few interruptions timed a job out."""
        from .dead import worker_name

        prefix = worker_name(host=host, pid=pid)
        with Session(self.engine) as s, s.begin():
            rows = s.execute(update(JobRow).where(JobRow.state == "running",
                                                  (JobRow.worker == prefix) | JobRow.worker.startswith(prefix + ":"))
                             .values(state="new", worker=None, claimed_at=None, started_at=None, heartbeat_at=None)
                             .returning(JobRow.id)).all()
        return len(rows)

    def reclaim_stale(self, *, timeout_s: float, max_retries: int) -> int:
        """Jobs whose worker stopped heartbeating: back to ``new``, or ``timed_out`` when they have
        used up their retries. Returns how many were reclaimed."""
        cutoff = utcnow() - _dt.timedelta(seconds=timeout_s)
        retry = JobRow.retries + 1 <= max_retries
        note = f"worker stopped heartbeating for over {timeout_s:g} s (was "
        with Session(self.engine) as s, s.begin():
            rows = s.execute(update(JobRow).where(JobRow.state == "running", JobRow.heartbeat_at < cutoff)
                             .values(retries=JobRow.retries + 1,
                                     error=literal(note) + func.coalesce(JobRow.worker, "?") + literal(")"),
                                     state=case((retry, "new"), else_="timed_out"),
                                     finished_at=case((retry, None), else_=utcnow()))
                             .returning(JobRow.id)).all()
        return len(rows)

    # -- reading back -----------------------------------------------------------------------
    def counts(self, session_id: int | None = None) -> dict:
        """Jobs by state, per session: {session_id: {state: n}}."""
        q = select(JobRow.session_id, JobRow.state, func.count()).group_by(JobRow.session_id, JobRow.state)
        if session_id is not None:
            q = q.where(JobRow.session_id == session_id)
        out: dict = {}
        with Session(self.engine) as s:
            for sid, state, n in s.execute(q):
                out.setdefault(sid, {st: 0 for st in JOB_STATES})[state] = n
        return out

    def sessions_frame(self):
        import pandas as pd

        cols = [SessionRow.id, SessionRow.label, SessionRow.device_name, SessionRow.arch, SessionRow.sm_count,
                SessionRow.simulated, SessionRow.created, SessionRow.reason, SessionRow.ticket, SessionRow.profile_path]
        with Session(self.engine) as s:
            rows = s.execute(select(*cols).order_by(SessionRow.id)).all()
        return pd.DataFrame(rows, columns=[c.key for c in cols])

    def frame(self, session_id: int, experiment: str | None = None, *, role: str = "measurement"):
        """One row per result of ``role``: the descriptor's fields as columns, then the timing."""
        import pandas as pd

        q = (select(ResultRow, ConfigRow.descriptor, JobRow.gpu_id)
             .join(ConfigRow, ResultRow.config_id == ConfigRow.id)
             .outerjoin(JobRow, ResultRow.job_id == JobRow.id)
             .where(ResultRow.session_id == session_id, ResultRow.role == role).order_by(ResultRow.id))
        if experiment:
            q = q.where(ConfigRow.experiment == experiment)
        rows = []
        with Session(self.engine) as s:
            for res, descriptor, gpu_id in s.execute(q):
                rows.append({**json.loads(descriptor), "time_us": res.kernel_time_us, "se_us": res.se_us,
                             "median_us": res.median_us, "n_samples": res.n_samples, "stop_reason": res.stop_reason,
                             "throttled": res.throttled, "simulated": res.simulated, "perf_config": res.perf_config,
                             "attempt": res.attempt, "cooldown_s": res.cooldown_s,
                             "set_aside_because": res.set_aside_because, "tuned_on_config_id": res.tuned_on_config_id,
                             "gpu_id": gpu_id, "result_id": res.id, **_host_unsteady(res.protocol),
                             **_inlier_shape(res.samples_us, res.protocol)})
        return pd.DataFrame(rows)

    def jobs_frame(self, session_id: int):
        import pandas as pd

        q = (select(JobRow.id, JobRow.state, JobRow.retries, JobRow.error, JobRow.gpu_id, JobRow.worker,
                    ConfigRow.descriptor)
             .join(ConfigRow, JobRow.config_id == ConfigRow.id).where(JobRow.session_id == session_id)
             .order_by(JobRow.id))
        with Session(self.engine) as s:
            rows = [{"job_id": j, "state": st, "retries": r, "error": e, "gpu_id": g, "worker": w, **json.loads(d)}
                    for j, st, r, e, g, w, d in s.execute(q)]
        return pd.DataFrame(rows)

    def samples(self, result_id: int) -> list[float]:
        with Session(self.engine) as s:
            return list(s.get(ResultRow, result_id).samples_us)

    def job_state_counts(self, job_ids: list[int]) -> dict[str, int]:
        with Session(self.engine) as s:
            return dict(s.execute(select(JobRow.state, func.count()).where(JobRow.id.in_(job_ids))
                                  .group_by(JobRow.state)).all())

    def all_done(self, job_ids: list[int]) -> bool:
        with Session(self.engine) as s:
            n = s.scalar(select(func.count()).where(JobRow.id.in_(job_ids), JobRow.state.not_in(TERMINAL_STATES)))
        return n == 0


def _check_text(what: str, value, most: int) -> None:
    """Refuse text no database stores: an argument with bytes that are not UTF-8 reaches Python as
    lone surrogates (``--label $'run-\\xff'``), and the insert failed with a traceback; text longer
    than its column SQLite stores and PostgreSQL refuses, part way through a fleet's sweep."""
    if not isinstance(value, str):
        return
    if len(value) > most:
        raise StoreError(f"the session's {what} is {len(value)} characters long; the results database keeps at most "
                         f"{most}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StoreError(f"the session's {what} {value!r:.80} is not text that can be stored as UTF-8 (character "
                         f"{exc.start + 1} is {value[exc.start]!r}): use a UTF-8 name") from None


def _acquire_file_lock(lock_file: str, url: str):
    """The lock file beside the database; a folder calib may not write is a StoreError naming it."""
    from filelock import FileLock, Timeout

    lock = FileLock(lock_file, timeout=120)
    try:
        lock.acquire()
    except Timeout:
        raise StoreError(f"another calib has held {lock_file} for 120 s while migrating {url}; if none is "
                         "running, remove the lock file") from None
    except OSError as exc:
        raise StoreError(f"cannot create the migration lock {lock_file} ({exc.strerror or exc}): calib writes "
                         f"beside results database {url}, so its folder must be writable; copy the database "
                         "somewhere writable or point CALIB_DB_URL elsewhere") from None
    return lock


def _has_table(conn, name: str) -> bool:
    from sqlalchemy import inspect

    return inspect(conn).has_table(name)


# Bookkeeping that runners before schema 0003 wrote into perf_config. A launch shape is its knobs
# alone, so these never reach the perf_config column (the protocol column keeps them as written).
LEGACY_BOOKKEEPING = ("tuned_at_bytes", "cooldown_s", "attempt")


def _host_unsteady(protocol) -> dict:
    """``n_set_aside``: how many interleaved rounds a host-timed measurement set aside as the host's
    slow state (``calib.timing.unsteady_rounds``), for the fit's flag; absent for every other result."""
    note = (protocol or {}).get("host_unsteady")
    return {"n_set_aside": len(note.get("set_aside_rounds") or [])} if isinstance(note, dict) else {}


def _inlier_shape(samples_us, protocol) -> dict:
    """``n_inliers`` and ``inlier_skew`` of a result's samples, as its Measurement had them (its
    set-aside rounds left out): the fit's check for interference inside the outlier cut
    (``calib.fit``) reads them from the frame, recomputed here from the stored samples."""
    import numpy as np

    from ..timing import Measurement

    samples = np.asarray(samples_us if samples_us is not None else [], dtype=float).ravel()
    note = (protocol or {}).get("host_unsteady")
    aside = None
    if isinstance(note, dict) and isinstance(note.get("set_aside_rounds"), list) and note["set_aside_rounds"]:
        # a damaged entry (not a whole number) is left out: it must not end the frame of the whole session
        rounds = np.asarray([i for i in note["set_aside_rounds"] if type(i) is int], dtype=int)
        aside = np.zeros(samples.size, dtype=bool)
        aside[rounds[(rounds >= 0) & (rounds < samples.size)]] = True
    m = Measurement(samples, set_aside=aside)
    return {"n_inliers": m.n_inliers, "inlier_skew": m.inlier_skew}


def _result_row(session_id: int, config_id: int, job_id: int | None, measurement, *, role: str,
                tuned_on_config_id: int | None = None) -> ResultRow:
    """The result row of a measurement. The protocol contract (see calib/tuning): ``perf_config``
    holds knobs only; ``attempt``, ``cooldown_s``, ``set_aside_because`` and ``tuned_on`` are
    protocol keys of their own, and get columns of their own here."""
    protocol = measurement.protocol or {}
    perf = dict(protocol.get("perf_config") or {})
    legacy = {k: perf.pop(k) for k in LEGACY_BOOKKEEPING if k in perf}
    attempt = protocol.get("attempt", legacy.get("attempt"))
    cooldown_s = protocol.get("cooldown_s", legacy.get("cooldown_s"))
    because = protocol.get("set_aside_because")
    summary = measurement.summary()
    return ResultRow(session_id=session_id, config_id=config_id, job_id=job_id, role=role,
                     perf_config=canonical_json(perf), attempt=None if attempt is None else int(attempt),
                     cooldown_s=None if cooldown_s is None else float(cooldown_s),
                     set_aside_because=None if because is None else str(because),
                     tuned_on_config_id=tuned_on_config_id,
                     kernel_time_us=summary["time_us"], median_us=summary["median_us"], se_us=summary["se_us"],
                     n_samples=summary["n_samples"], stop_reason=summary["stop_reason"],
                     throttled=summary["throttled"], simulated=summary["simulated"],
                     samples_us=[float(v) for v in measurement.samples_us], protocol=measurement.protocol,
                     clocks=measurement.clocks, warnings=measurement.warnings)


def _static_head() -> str | None:
    """The newest migration's revision, from the ``revision = "..."`` and ``down_revision = ...``
    lines of the migration files (what alembic's ScriptDirectory reads, without importing it); None
    unless the revisions form one chain with one head."""
    import re

    revisions, parents = set(), set()
    try:
        for path in (MIGRATIONS / "versions").glob("*.py"):
            source = path.read_text(encoding="utf-8")
            rev = re.search(r'^revision\s*=\s*"([^"]+)"\s*$', source, re.M)
            down = re.search(r'^down_revision\s*=\s*(None|"([^"]+)")\s*$', source, re.M)
            if not rev or not down:
                return None
            revisions.add(rev.group(1))
            if down.group(2):
                parents.add(down.group(2))
    except OSError:
        return None
    heads = revisions - parents
    return next(iter(heads)) if len(heads) == 1 and parents <= revisions else None
