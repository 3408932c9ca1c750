"""``calib worker``: one process per GPU that drains jobs from the tuning database.

A worker claims jobs of the sessions measured on its kind of device, heartbeats while it measures,
records each result in the same transaction that completes the job, and retries a failing job up
to a limit before marking it failed with the error. Jobs whose worker died (no heartbeat for
``lease_timeout_s``) are put back by whichever worker notices first. A sweep run in-process is
this same loop, so the two paths cannot drift apart.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from .backends.base import Backend
from .store import Store
from .store.dead import reclaim_dead_here, worker_name


@dataclass
class WorkerStats:
    completed: int = 0
    failed_attempts: int = 0
    reclaimed: int = 0
    lost: int = 0  # results refused because the job had been reclaimed meanwhile
    errors: list[str] = field(default_factory=list)


class _Heartbeat:
    def __init__(self, store: Store, job_ids: list[int], worker: str, every_s: float):
        self.store, self.job_ids, self.worker, self.every_s = store, job_ids, worker, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(self.every_s):
            for jid in self.job_ids:
                try:
                    self.store.heartbeat(jid, self.worker)
                except Exception:  # a missed beat is retried; a dead database shows up in the main loop
                    pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def physical_gpu_id(device: int) -> int:
    """The GPU's index on the host, honouring CUDA_VISIBLE_DEVICES, for the job record."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if device < len(ids) and ids[device].isdigit():
        return int(ids[device])
    return device


class Worker:
    def __init__(self, store: Store, backend: Backend, *, sessions: list[int] | None = None,
                 gpu_id: int | None = None, name: str | None = None, max_retries: int = 2,
                 heartbeat_s: float = 5.0, lease_timeout_s: float = 60.0, batch: int | None = None,
                 jobs: list[int] | None = None):
        self.store, self.backend = store, backend
        self.sessions = sessions
        self.jobs = jobs  # only these (an in-process sweep's own points), else any of the sessions
        self.gpu_id = gpu_id
        self.name = name or worker_name(f"gpu{gpu_id}" if gpu_id is not None else "")
        self.max_retries, self.heartbeat_s, self.lease_timeout_s = max_retries, heartbeat_s, lease_timeout_s
        # The simulated device is vectorized: claim many jobs at a time. A GPU claims one at a time unless
        # told (calib worker --batch; an in-process sweep claims calib.sweep.IN_PROCESS_BATCH, 16).
        self.batch = batch or (32 if backend.simulated else 1)
        self.device, _ = backend.fingerprint()

    def _session_ids(self) -> list[int]:
        return self.sessions if self.sessions is not None else self.store.sessions_for_device(self.device)

    def _nothing_pending(self, sessions) -> bool:
        if self.jobs is not None:
            return self.store.all_done(self.jobs)
        return self.store.pending(sessions) == 0

    def run(self, *, exit_when_empty: bool = True, idle_poll_s: float = 0.5, max_jobs: int | None = None,
            stop: threading.Event | None = None, on_progress=None) -> WorkerStats:
        stats = WorkerStats()
        while not (stop and stop.is_set()):
            stats.reclaimed += self.store.reclaim_stale(timeout_s=self.lease_timeout_s, max_retries=self.max_retries)
            stats.reclaimed += reclaim_dead_here(self.store, max_retries=self.max_retries)  # no lease to wait for
            sessions = self._session_ids()
            limit = self.batch if max_jobs is None else max(1, min(self.batch, max_jobs - stats.completed))
            jobs = self.store.claim(sessions, worker=self.name, gpu_id=self.gpu_id, limit=limit, job_ids=self.jobs)
            if not jobs:
                if exit_when_empty and self._nothing_pending(sessions):
                    break
                time.sleep(idle_poll_s)
                continue
            settled = self._measure(jobs, stats)
            if on_progress:
                on_progress(settled)
            if max_jobs is not None and stats.completed >= max_jobs:
                break
        return stats

    def _measure(self, jobs: list[tuple[int, dict]], stats: WorkerStats) -> int:
        """A batch the backend measures in one call (the simulated device, vectorized; points a
        calibration times together) is begun as a whole. On a GPU the jobs of a batch are begun,
        measured and recorded one after another, so that a worker killed mid-batch leaves its
        measured points recorded and is charged a retry for the one point in flight only
        (calib.store.dead): the others were never begun. Returns how many of the jobs are settled
        (completed, or failed for good), which is what a progress bar may count."""
        from . import calibrations

        ids = [j for j, _ in jobs]
        configs = [d for _, d in jobs]
        with _Heartbeat(self.store, ids, self.name, self.heartbeat_s):
            if len(jobs) == 1 or self.backend.simulated or calibrations.measured_together(configs) is not None:
                self.store.start(ids, self.name)  # a batch's claim begins none of them (Store.claim)
                return sum(self._record(job_id, outcome, stats)
                           for job_id, outcome in zip(ids, self._outcomes(configs)))
            settled = 0
            for job_id, config in jobs:
                self.store.start([job_id], self.name)
                settled += self._record(job_id, self._outcomes([config])[0], stats)
            return settled

    def _record(self, job_id: int, outcome, stats: WorkerStats) -> bool:
        """Record one outcome; whether the job is settled. A failed attempt with retries left goes
        back to the queue: counted as progress, it was counted again when measured again, and a
        sweep whose points each failed once showed 100% with a third of its work still to do."""
        if isinstance(outcome, Exception):
            message = f"{type(outcome).__name__}: {outcome}"
            stats.failed_attempts += 1
            stats.errors.append(message)
            return self.store.fail(job_id, message, worker=self.name, max_retries=self.max_retries) not in (None, "new")
        if self.store.complete(job_id, outcome, worker=self.name, candidates=outcome.candidates):
            stats.completed += 1
            return True
        stats.lost += 1
        return False

    def _outcomes(self, configs: list[dict]) -> list:
        """The backend's outcome per config. A measure call that raised (anything but the errors a
        backend returns per config: NoCandidateSurvived from a shape search, a kernel's RuntimeError)
        is made again one config at a time, so that the error fails its own point only: an in-process
        sweep on a GPU claims calib.sweep.IN_PROCESS_BATCH jobs, and one such point failed the batch's
        other 15 on both attempts (max_retries 1) when the batch failed as a whole. Points that a
        calibration times together (measured_together) fail together, as one measurement."""
        from . import calibrations

        try:
            return self.backend.measure(configs)
        except Exception as exc:  # noqa: BLE001 - recorded as the job's error, never lost
            if len(configs) == 1 or calibrations.measured_together(configs) is not None:
                return [exc] * len(configs)
        return [self._outcomes([c])[0] for c in configs]
