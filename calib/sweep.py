"""Running a sweep: enqueue every point as a job, measure what is not completed, record it all.

A sweep killed half way and started again in the same session measures only the points without a
completed result; a point that fails (out of device memory, no kernel) is recorded as failed with
its error and the sweep goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .backends.base import Backend
from .store import Store


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


def frame_from(configs: list[dict], measurements) -> "pandas.DataFrame":
    """The tidy frame of a sweep measured without a store: the same columns as Store.frame."""
    import pandas as pd

    return pd.DataFrame([{**c, **m.summary()} for c, m in zip(configs, measurements) if not isinstance(m, Exception)])


def run_sweep(backend: Backend, configs: list[dict], store: Store, session_id: int, *, desc: str = "sweep",
              progress: bool = True, gpu_id: int | None = None) -> SweepReport:
    from tqdm.auto import tqdm

    job_ids = store.enqueue(session_id, configs)
    states = store.job_states(job_ids)
    pending = [(j, c) for j, c in zip(job_ids, configs) if states[j] != "completed"]
    report = SweepReport(total=len(configs), already_done=len(configs) - len(pending))
    # The simulated device is vectorized: one batch is the whole sweep. A GPU measures point by point.
    batch = max(len(pending), 1) if backend.simulated else 1
    with tqdm(total=len(configs), initial=report.already_done, desc=desc, disable=not progress,
              unit="pt", leave=True) as bar:
        for start in range(0, len(pending), batch):
            chunk = pending[start:start + batch]
            for job_id, _ in chunk:
                store.start_job(job_id, gpu_id=gpu_id)
            outcomes = backend.measure([c for _, c in chunk])
            for (job_id, config), outcome in zip(chunk, outcomes):
                if isinstance(outcome, Exception):
                    message = f"{type(outcome).__name__}: {outcome}"
                    store.fail_job(job_id, message)
                    report.failed.append((config, message))
                else:
                    store.complete_job(job_id, outcome)
                    report.measured += 1
            bar.update(len(chunk))
    return report
