"""Tables of the tuning database, after the session / config / job / result tables that the
MIOpen and rocMLIR tuning farms use. Changes go through a migration in ``migrations/versions``."""

from __future__ import annotations

import datetime as _dt

from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

JOB_STATES = ("new", "running", "completed", "failed", "timed_out", "skipped")
TERMINAL_STATES = ("completed", "failed", "timed_out", "skipped")


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class SessionRow(Base):
    """Everything that may change a measurement, and why the measurements were taken."""

    __tablename__ = "session"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    label: Mapped[str] = mapped_column(String(512), index=True)
    created: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
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
    """A problem descriptor: canonical JSON and its hash, the same row for the same contents."""

    __tablename__ = "config"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment: Mapped[str] = mapped_column(String(64), index=True)
    descriptor: Mapped[str] = mapped_column(Text)
    descriptor_hash: Mapped[str] = mapped_column(String(64), unique=True)


class JobRow(Base):
    """One config's measurement in one session: claimed, heartbeated, retried, finished."""

    __tablename__ = "job"
    __table_args__ = (UniqueConstraint("session_id", "config_id"), Index("ix_job_session_state", "session_id", "state"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("session.id"), index=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("config.id"))
    state: Mapped[str] = mapped_column(String(16), default="new")
    retries: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    claimed_at: Mapped[_dt.datetime | None] = mapped_column(DateTime)
    started_at: Mapped[_dt.datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[_dt.datetime | None] = mapped_column(DateTime)
    heartbeat_at: Mapped[_dt.datetime | None] = mapped_column(DateTime)
    gpu_id: Mapped[int | None] = mapped_column(Integer)
    machine_name: Mapped[str | None] = mapped_column(String(128))
    worker: Mapped[str | None] = mapped_column(String(128))


class ResultRow(Base):
    """Every measurement, winner or not: the perf-config, its time and all samples."""

    __tablename__ = "result"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("session.id"), index=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("config.id"), index=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"))
    # "measurement" (the job's own), "tuning" (a candidate the tuner ranked), "set_aside" (an
    # attempt measured again, never a winner), "imported" (a winner read from a TSV).
    role: Mapped[str] = mapped_column(String(16), default="measurement")
    # The knobs alone (threads, blocks per SM, unroll, layout ...), as canonical JSON: one launch
    # shape is one text, so winners group and compare by it. Bookkeeping has the columns below.
    perf_config: Mapped[str] = mapped_column(Text)
    attempt: Mapped[int | None] = mapped_column(Integer)  # 1, 2 ... when a point was measured again
    cooldown_s: Mapped[float | None] = mapped_column(Float)  # idle pause before this measurement
    set_aside_because: Mapped[str | None] = mapped_column(Text)
    # The config the knobs were tuned on (a measurement's; the tuning results are filed under it).
    tuned_on_config_id: Mapped[int | None] = mapped_column(ForeignKey("config.id", name="fk_result_tuned_on_config"))
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
    created: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)


# -- the autotune cache (migration 0004) ------------------------------------------------------
# One entry per (family, descriptor key, device key): the device key hashes the hard device fields
# (name, compute capability, SM count), so another GPU's entries never answer for this one. Soft
# fields (driver, CUDA, CuPy, library and calib versions, the timing protocol) are kept per entry and
# per timing, so that a version change makes entries stale one by one, never a whole file. Every
# candidate's timing is a row of its own: adding a candidate to a family times only the new one.


class AutotuneEntryRow(Base):
    """A problem of a family on a device, and the candidate the timings below chose."""

    __tablename__ = "autotune_entry"
    __table_args__ = (UniqueConstraint("family", "descriptor_key", "device_key", name="uq_autotune_entry_key"),
                      Index("ix_autotune_entry_family_device", "family", "device_key"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    family: Mapped[str] = mapped_column(String(128))
    descriptor_key: Mapped[str] = mapped_column(String(64))
    device_key: Mapped[str] = mapped_column(String(64))
    descriptor: Mapped[str] = mapped_column(Text)  # canonical JSON (calib.autotune.descriptors)
    device: Mapped[dict] = mapped_column(JSON)  # the hard fields the device key hashes
    software: Mapped[dict] = mapped_column(JSON)  # soft fields when the winner was last decided or verified
    protocol: Mapped[dict] = mapped_column(JSON)  # timing protocol and decision rule
    winner: Mapped[str | None] = mapped_column(Text)  # candidate id (canonical JSON)
    winner_time_us: Mapped[float | None] = mapped_column(Float)
    tied: Mapped[list | None] = mapped_column(JSON)  # candidate ids within noise of the fastest
    offered: Mapped[list | None] = mapped_column(JSON)  # candidate ids, preference order, when decided
    source: Mapped[str] = mapped_column(String(16), default="tuned")  # tuned | imported | verified
    provenance: Mapped[dict | None] = mapped_column(JSON)  # who, when, which machine (and imported from)
    created: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)
    updated: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)


class AutotuneTimingRow(Base):
    """One candidate of one entry: its samples and CI, or why it was rejected or skipped."""

    __tablename__ = "autotune_timing"
    __table_args__ = (UniqueConstraint("entry_id", "candidate", name="uq_autotune_timing_candidate"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    entry_id: Mapped[int] = mapped_column(ForeignKey("autotune_entry.id", ondelete="CASCADE"), index=True)
    candidate: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # ok | wrong | unsupported | skipped
    reason: Mapped[str | None] = mapped_column(Text)
    time_us: Mapped[float | None] = mapped_column(Float)  # Measurement.center_us
    se_us: Mapped[float | None] = mapped_column(Float)
    ci_low_us: Mapped[float | None] = mapped_column(Float)
    ci_high_us: Mapped[float | None] = mapped_column(Float)
    n_samples: Mapped[int | None] = mapped_column(Integer)
    samples_us: Mapped[list | None] = mapped_column(JSON)
    software: Mapped[dict | None] = mapped_column(JSON)
    protocol: Mapped[dict | None] = mapped_column(JSON)
    created: Mapped[_dt.datetime] = mapped_column(DateTime, default=utcnow)


class AutotuneConvRow(Base):
    """The conv2d family's descriptor in columns (after MIOpen's and rocMLIR's conv config tables),
    so that entries can be queried by shape in SQL; the entry's canonical JSON stays the key."""

    __tablename__ = "autotune_conv"
    entry_id: Mapped[int] = mapped_column(ForeignKey("autotune_entry.id", ondelete="CASCADE"), primary_key=True)
    direction: Mapped[str] = mapped_column(String(8))
    batch: Mapped[int] = mapped_column(Integer)
    in_channels: Mapped[int] = mapped_column(Integer)
    in_h: Mapped[int] = mapped_column(Integer)
    in_w: Mapped[int] = mapped_column(Integer)
    out_channels: Mapped[int] = mapped_column(Integer)
    fil_h: Mapped[int] = mapped_column(Integer)
    fil_w: Mapped[int] = mapped_column(Integer)
    pad_h: Mapped[int] = mapped_column(Integer)
    pad_w: Mapped[int] = mapped_column(Integer)
    stride_h: Mapped[int] = mapped_column(Integer)
    stride_w: Mapped[int] = mapped_column(Integer)
    dilation_h: Mapped[int] = mapped_column(Integer)
    dilation_w: Mapped[int] = mapped_column(Integer)
    groups: Mapped[int] = mapped_column(Integer)
    in_dtype: Mapped[str] = mapped_column(String(16))
    fil_dtype: Mapped[str] = mapped_column(String(16))
    out_dtype: Mapped[str] = mapped_column(String(16))
    layout: Mapped[str] = mapped_column(String(8))
    math_mode: Mapped[str] = mapped_column(String(16))
