"""Running a sweep: enqueue every point as a job, then measure in-process or wait for workers.

A sweep killed half way and started again in the same session measures only the points without a
completed result; a point that fails (out of device memory, no kernel) is retried, then recorded
as failed with its error, and the sweep goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .backends.base import Backend
from .store import Store, TERMINAL_STATES
from .store.dead import worker_name
from .worker import Worker


@dataclass
class SweepReport:
    total: int
    already_done: int = 0
    measured: int = 0
    failed: list[tuple[dict, str]] = field(default_factory=list)

    def __str__(self):
        text = f"{self.total} points: {self.measured} measured now, {self.already_done} already done"
        if self.failed:
            text += f", {len(self.failed)} failed (first: {self.failed[0][1]})"
        return text


def frame_from(configs: list[dict], measurements):
    """The tidy frame of a sweep measured without a store: the same columns as Store.frame."""
    import pandas as pd

    return pd.DataFrame([{**c, **m.summary()} for c, m in zip(configs, measurements) if not isinstance(m, Exception)])


# Jobs an in-process sweep claims at a time; the backend still measures them one after another.
# Claimed one by one, a point paid the worker loop's own transactions (reclaim, claim, a heartbeat
# thread) besides its result's: on the simulated device 11.3 ms a point against 3.4-4.6 ms claimed 16
# at a time (the quick L2 plan's 262 points, this 2-core CI host, 2026-12-02), and on the H200 the quick
# suite's L2 sweep of 263 points took 4.2-5.1 s in the suite where the same kernels took 1.5 s timed
# alone (session 5 calls 1 and 2; 3.0-3.4 s claimed 16 at a time, call 3). The worker begins, measures
# and records a GPU batch's jobs one after another (Worker._measure), so a killed sweep loses only the
# point in flight, the one job charged a retry on resume; the batch's others were never begun and go back
# with none (calib.store.dead). A point whose measure call raises fails alone
# (Worker._outcomes measures its batch again one by one). ``calib worker`` keeps claiming one job at a
# time on a GPU, so that a fleet's GPUs share a session's last jobs; the simulated device, vectorized,
# claims its own larger batches (Worker).
IN_PROCESS_BATCH = 16


def run_sweep(backend: Backend | None, configs: list[dict], store: Store, session_id: int, *, desc: str = "sweep",
              progress: bool = True, gpu_id: int | None = None, wait_for_workers: bool = False,
              max_retries: int = 1, poll_s: float = 1.0, after_measuring=None) -> SweepReport:
    """Enqueue ``configs`` in the session; measure them here (``backend``) or let ``calib worker``
    processes do it (``wait_for_workers``), with a progress bar either way.

    ``after_measuring`` is called once every point is measured, before the report is built:
    ``Calibration.sweep`` gives the GPU back there. In the H200 quick suite of 2026-12-01 (quick #2,
    the jobs' own timestamps) each GPU-timed notebook held the GPU 0.29-0.50 s after its last point
    (the report's jobs frame: pandas' first import), 3.9 s of the 20.1 s of measurements one after
    another."""
    from tqdm.auto import tqdm

    job_ids = store.enqueue(session_id, configs)
    done_before = store.job_state_counts(job_ids).get("completed", 0)
    report = SweepReport(total=len(configs), already_done=done_before)
    with tqdm(total=len(configs), initial=done_before, desc=desc, disable=not progress, unit="pt") as bar:
        if wait_for_workers:
            while not store.all_done(job_ids):
                time.sleep(poll_s)
                bar.n = _terminal(store, job_ids)
                bar.refresh()
        else:
            # points a calibration times in rounds are claimed together (one measure call for all)
            from . import calibrations

            together = len(configs) if calibrations.measured_together(configs) is not None else None
            worker = Worker(store, backend, sessions=[session_id], gpu_id=gpu_id, max_retries=max_retries,
                            name=worker_name("in-process", desc),  # host:pid first: see calib.store.dead
                            batch=together or (None if backend.simulated else IN_PROCESS_BATCH),
                            jobs=job_ids)  # this sweep's points: the run's other notebooks share the session
            worker.run(exit_when_empty=True, on_progress=bar.update)
        bar.n = _terminal(store, job_ids)
        bar.refresh()
    if after_measuring is not None:
        after_measuring()
    jobs = store.jobs_frame(session_id)
    jobs = jobs[jobs["job_id"].isin(job_ids)]
    report.measured = int((jobs["state"] == "completed").sum()) - done_before
    by_job = dict(zip(job_ids, configs))
    report.failed = [(by_job[j], e) for j, st, e in zip(jobs["job_id"], jobs["state"], jobs["error"])
                     if st in ("failed", "timed_out")]
    return report


def _terminal(store: Store, job_ids: list[int]) -> int:
    counts = store.job_state_counts(job_ids)
    return sum(counts.get(s, 0) for s in TERMINAL_STATES)
