"""Jobs left ``running`` by a process known dead: reclaimed at once, not after the whole lease.

A lease (``reclaim_stale``) is the only way to tell that a worker on another machine died. On this
machine there is a better one: every worker's name starts with ``host:pid`` (``worker_name``) and
the job records the host it was claimed on, so a job of this host whose process is gone can be put
back now. A rerun of a killed ``calib run`` waited out the lease (116 s against 50 s uninterrupted)
for jobs whose kernel was long dead. A pid that the system has handed to a new process looks alive:
that job waits for its lease, as before.
"""

from __future__ import annotations

import os
import socket

from sqlalchemy import case, select, update
from sqlalchemy.orm import Session

from ..lifeline import pid_alive
from .tables import JobRow, utcnow


def worker_name(*parts: str, host: str | None = None, pid: int | None = None) -> str:
    """``host:pid[:part...]``: the name a worker claims jobs under, which says where it runs (cut to
    the column's 128 characters: a run's label holds its folder's path)."""
    head = [host or socket.gethostname(), str(os.getpid() if pid is None else pid)]
    return ":".join(head + [p for p in parts if p])[:128]


def _pid_of(worker: str | None, host: str) -> int | None:
    """The pid in a worker name of this host, or None (another host's, or an older name)."""
    fields = (worker or "").split(":")
    if len(fields) >= 2 and fields[0] == host and fields[1].isdigit():
        return int(fields[1])
    return None


def dead_workers_here(store, host: str | None = None) -> list[str]:
    """Names of the workers of this host that hold running jobs and whose process is gone."""
    host = host or socket.gethostname()
    with Session(store.engine) as s:
        names = s.scalars(select(JobRow.worker).distinct()
                          .where(JobRow.state == "running", JobRow.machine_name == host)).all()
    return [w for w in names if (pid := _pid_of(w, host)) is not None and pid != os.getpid() and not pid_alive(pid)]


def reclaim_dead_here(store, *, max_retries: int, host: str | None = None) -> int:
    """Put the running jobs of this host's dead workers back: the ones it had begun (``started_at``
    set) ``new``, or ``timed_out`` once out of retries, as a lease would; the ones it had claimed in a
    batch but never begun ``new`` with no retry charged, since nothing of theirs ran (a killed in-process
    sweep holds 16, and twice killed they had all ended ``timed_out``). Returns how many."""
    host = host or socket.gethostname()
    dead = dead_workers_here(store, host)
    if not dead:
        return 0
    retry = JobRow.retries + 1 <= max_retries
    n = 0
    with Session(store.engine) as s, s.begin():
        for worker in dead:  # the worker's name in the condition: a job claimed again meanwhile stays
            held = (JobRow.state == "running", JobRow.machine_name == host, JobRow.worker == worker)
            n += len(s.execute(update(JobRow).where(*held, JobRow.started_at.is_not(None))
                               .values(retries=JobRow.retries + 1,
                                       error=f"its worker {worker} died (no such process on {host})",
                                       state=case((retry, "new"), else_="timed_out"),
                                       finished_at=case((retry, None), else_=utcnow()))
                               .returning(JobRow.id)).all())
            n += len(s.execute(update(JobRow).where(*held, JobRow.started_at.is_(None)).values(state="new")
                               .returning(JobRow.id)).all())
    return n
