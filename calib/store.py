"""The results store: every sweep point as a job on a config inside a session, with all samples.

The tables follow what tuning farms (MIOpen's and rocMLIR's Tuna) use: ``session`` is everything
that may change a measurement (device, software) plus why it was run; ``config`` is the problem
descriptor, kept as canonical JSON with its hash so that the same problem is the same row in any
process on any machine; ``job`` tracks one config's measurement in one session (state, retries,
times, GPU, machine); ``result`` keeps the perf-config, the kernel time and every raw sample.
Notebooks read it back as tidy pandas frames.

SQLite (WAL, foreign keys, a busy timeout) is the embedded default; any SQLAlchemy URL works.
A sweep run again in the same session measures only what is not completed yet.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import socket
from pathlib import Path

from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint,
                        create_engine, event, select)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

STORE_SCHEMA_VERSION = 1
JOB_STATES = ("new", "running", "completed", "failed", "timed_out", "skipped")


class StoreError(RuntimeError):
    pass


def canonical_json(descriptor: dict) -> str:
    """The one text of a descriptor: sorted keys, no spaces. Equal contents, equal text."""
    return json.dumps(descriptor, sort_keys=True, separators=(",", ":"), allow_nan=False)


def descriptor_hash(descriptor: dict) -> str:
    return hashlib.sha256(canonical_json(descriptor).encode()).hexdigest()


def _now():
    return _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Meta(Base):
    __tablename__ = "calib_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


class SessionRow(Base):
    __tablename__ = "session"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    label: Mapped[str] = mapped_column(String(128), index=True)
    created: Mapped[_dt.datetime] = mapped_column(DateTime, default=_now)
    device_name: Mapped[str] = mapped_column(String(128))
    arch: Mapped[str | None] = mapped_column(String(32))
    sm_count: Mapped[int | None] = mapped_column(Integer)
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    driver: Mapped[str | None] = mapped_column(String(64))
    cuda_runtime: Mapped[str | None] = mapped_column(String(64))
    cupy_version: Mapped[str | None] = mapped_column(String(64))
    calib_version: Mapped[str | None] = mapped_column(String(64))
    device: Mapped[dict] = mapped_column(JSON)
    software: Mapped[dict] = mapped_column(JSON)
    reason: Mapped[str | None] = mapped_column(String(128))
    ticket: Mapped[str | None] = mapped_column(String(128))
    container: Mapped[str | None] = mapped_column(String(256))
    machine_name: Mapped[str | None] = mapped_column(String(128))
    profile_path: Mapped[str | None] = mapped_column(Text)


class ConfigRow(Base):
    __tablename__ = "config"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment: Mapped[str] = mapped_column(String(64), index=True)
    descriptor: Mapped[str] = mapped_column(Text)
    descriptor_hash: Mapped[str] = mapped_column(String(64), unique=True)


class JobRow(Base):
    __tablename__ = "job"
    __table_args__ = (UniqueConstraint("session_id", "config_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("session.id"), index=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("config.id"))
    state: Mapped[str] = mapped_column(String(16), default="new", index=True)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    claimed_at: Mapped[_dt.datetime | None] = mapped_column(DateTime)
    started_at: Mapped[_dt.datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[_dt.datetime | None] = mapped_column(DateTime)
    heartbeat_at: Mapped[_dt.datetime | None] = mapped_column(DateTime)
    gpu_id: Mapped[int | None] = mapped_column(Integer)
    machine_name: Mapped[str | None] = mapped_column(String(128))


class ResultRow(Base):
    __tablename__ = "result"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("session.id"), index=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("config.id"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id"))
    perf_config: Mapped[str] = mapped_column(Text)
    kernel_time_us: Mapped[float] = mapped_column(Float)
    median_us: Mapped[float] = mapped_column(Float)
    se_us: Mapped[float | None] = mapped_column(Float)
    n_samples: Mapped[int] = mapped_column(Integer)
    stop_reason: Mapped[str] = mapped_column(String(32))
    throttled: Mapped[bool] = mapped_column(Boolean, default=False)
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    samples_us: Mapped[list] = mapped_column(JSON)
    protocol: Mapped[dict] = mapped_column(JSON)
    clocks: Mapped[dict] = mapped_column(JSON)
    warnings: Mapped[list] = mapped_column(JSON)
    created: Mapped[_dt.datetime] = mapped_column(DateTime, default=_now)


def sqlite_url(path: str | os.PathLike) -> str:
    return f"sqlite:///{Path(path).resolve()}"


def _sqlite_pragmas(dbapi_conn, _record):
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


class Store:
    """A handle on one results database; cheap to open, safe to share between processes."""

    def __init__(self, url: str):
        self.url = url
        try:
            self.engine = create_engine(url, future=True)
        except Exception as exc:
            raise StoreError(f"cannot open results database {url!r}: {exc}") from None
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        try:
            Base.metadata.create_all(self.engine)
            with Session(self.engine) as s, s.begin():
                row = s.get(Meta, "schema_version")
                if row is None:
                    s.add(Meta(key="schema_version", value=str(STORE_SCHEMA_VERSION)))
                elif int(row.value) > STORE_SCHEMA_VERSION:
                    raise StoreError(f"results database {url} has schema {row.value}, newer than this calib "
                                     f"({STORE_SCHEMA_VERSION}): upgrade calib")
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"cannot use results database {url!r}: {exc}") from None

    # -- sessions ---------------------------------------------------------------------------
    def open_session(self, label: str, device: dict, software: dict, *, reason: str | None = None,
                     ticket: str | None = None, container: str | None = None) -> int:
        """The session called ``label`` for this device, created if new: re-running a sweep under
        the same label resumes it. A label already used by another device is an error."""
        from .fingerprint import hard_differences

        with Session(self.engine) as s, s.begin():
            rows = s.scalars(select(SessionRow).where(SessionRow.label == label).order_by(SessionRow.id)).all()
            for row in rows:
                if not hard_differences(row.device, device):
                    return row.id
            if rows:
                diffs = "; ".join(hard_differences(rows[-1].device, device))
                raise StoreError(f"session {label!r} in {self.url} was measured on another device ({diffs})")
            row = SessionRow(label=label, device_name=str(device.get("name")), arch=device.get("compute_capability"),
                             sm_count=device.get("sm_count"), simulated=bool(device.get("simulated")),
                             driver=software.get("driver"), cuda_runtime=software.get("cuda_runtime"),
                             cupy_version=software.get("cupy"), calib_version=software.get("calib"),
                             device=device, software=software, reason=reason, ticket=ticket,
                             container=container or os.environ.get("CALIB_CONTAINER"),
                             machine_name=socket.gethostname())
            s.add(row)
            s.flush()
            return row.id

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
                row = ConfigRow(experiment=str(descriptor.get("experiment", "")), descriptor=canonical_json(descriptor),
                                descriptor_hash=h)
                s.add(row)
                s.flush()
                cid = row.id
            if own:
                s.commit()
            return cid
        finally:
            if own:
                s.close()

    def enqueue(self, session_id: int, descriptors: list[dict]) -> list[int]:
        """Job ids for these configs in this session, creating ``new`` jobs where none exist."""
        out = []
        with Session(self.engine) as s, s.begin():
            for d in descriptors:
                cid = self.config_id(d, s)
                jid = s.scalar(select(JobRow.id).where(JobRow.session_id == session_id, JobRow.config_id == cid))
                if jid is None:
                    job = JobRow(session_id=session_id, config_id=cid, state="new")
                    s.add(job)
                    s.flush()
                    jid = job.id
                out.append(jid)
        return out

    def job_states(self, job_ids: list[int]) -> dict[int, str]:
        with Session(self.engine) as s:
            rows = s.execute(select(JobRow.id, JobRow.state).where(JobRow.id.in_(job_ids))).all()
        return dict(rows)

    def start_job(self, job_id: int, *, gpu_id: int | None = None):
        with Session(self.engine) as s, s.begin():
            job = s.get(JobRow, job_id)
            now = _now()
            job.state, job.started_at, job.claimed_at, job.heartbeat_at = "running", now, now, now
            job.gpu_id, job.machine_name = gpu_id, socket.gethostname()

    def complete_job(self, job_id: int, measurement) -> int:
        """Record the measurement and mark the job completed, in one transaction."""
        with Session(self.engine) as s, s.begin():
            job = s.get(JobRow, job_id)
            summary = measurement.summary()
            res = ResultRow(session_id=job.session_id, config_id=job.config_id, job_id=job.id,
                            perf_config=canonical_json(measurement.protocol.get("perf_config", {})),
                            kernel_time_us=summary["time_us"], median_us=summary["median_us"],
                            se_us=summary["se_us"],
                            n_samples=summary["n_samples"], stop_reason=summary["stop_reason"],
                            throttled=summary["throttled"], simulated=summary["simulated"],
                            samples_us=[float(v) for v in measurement.samples_us], protocol=measurement.protocol,
                            clocks=measurement.clocks, warnings=measurement.warnings)
            s.add(res)
            job.state, job.finished_at, job.error = "completed", _now(), None
            s.flush()
            return res.id

    def fail_job(self, job_id: int, error: str, *, state: str = "failed"):
        if state not in JOB_STATES:
            raise ValueError(f"unknown job state {state!r}")
        with Session(self.engine) as s, s.begin():
            job = s.get(JobRow, job_id)
            job.state, job.error, job.finished_at = state, error, _now()
            job.retries = (job.retries or 0) + 1

    # -- reading back -----------------------------------------------------------------------
    def frame(self, session_id: int, experiment: str | None = None):
        """One row per completed result: the descriptor's fields as columns, then the timing."""
        import pandas as pd

        q = (select(ResultRow, ConfigRow.descriptor, JobRow.gpu_id)
             .join(ConfigRow, ResultRow.config_id == ConfigRow.id).join(JobRow, ResultRow.job_id == JobRow.id)
             .where(ResultRow.session_id == session_id).order_by(ResultRow.id))
        if experiment:
            q = q.where(ConfigRow.experiment == experiment)
        rows = []
        with Session(self.engine) as s:
            for res, descriptor, gpu_id in s.execute(q):
                rows.append({**json.loads(descriptor), "time_us": res.kernel_time_us, "se_us": res.se_us,
                             "median_us": res.median_us,
                             "n_samples": res.n_samples, "stop_reason": res.stop_reason, "throttled": res.throttled,
                             "simulated": res.simulated, "perf_config": res.perf_config, "gpu_id": gpu_id,
                             "result_id": res.id})
        return pd.DataFrame(rows)

    def jobs_frame(self, session_id: int):
        import pandas as pd

        q = (select(JobRow.id, JobRow.state, JobRow.retries, JobRow.error, ConfigRow.descriptor)
             .join(ConfigRow, JobRow.config_id == ConfigRow.id).where(JobRow.session_id == session_id))
        with Session(self.engine) as s:
            rows = [{"job_id": j, "state": st, "retries": r, "error": e, **json.loads(d)}
                    for j, st, r, e, d in s.execute(q)]
        return pd.DataFrame(rows)

    def samples(self, result_id: int) -> list[float]:
        with Session(self.engine) as s:
            return list(s.get(ResultRow, result_id).samples_us)
