"""Progress bars that tell the truth: a sweep's counts points settled (completed, or failed for
good), never attempts; calib run's counts a notebook when it ends, not when its turn in the suite's
order comes."""

import time

import tqdm
import tqdm.auto

from calib.backends.sim import SimBackend
from calib.calibrations import memory_bandwidth as dram
from calib.store import Store, sqlite_url
from calib.sweep import run_sweep


class FailsFirstAttempt(SimBackend):
    """Every point fails on its first attempt (a busy GPU, a transient launch error) and is measured
    on its retry."""

    def __init__(self):
        super().__init__()
        self.tried = set()

    def measure(self, configs):
        out = super().measure(configs)
        first = [i for i, c in enumerate(configs) if repr(c) not in self.tried]
        self.tried.update(repr(c) for c in configs)
        return [RuntimeError("transient") if i in first else m for i, m in enumerate(out)]


def test_a_sweep_bar_counts_a_retried_point_once_and_never_passes_its_total(tmp_path, monkeypatch):
    """A failed attempt with retries left goes back to the queue: counted as progress, the bar
    reached 100% with half of the sweep still to measure, then counted past its total."""
    seen = []

    class Bar(tqdm.tqdm):
        def update(self, n=1):
            out = super().update(n)
            seen.append(self.n)
            return out

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    backend = FailsFirstAttempt()
    store = Store(sqlite_url(tmp_path / "r.sqlite"))
    sid = store.open_session("t", *backend.fingerprint())
    configs = dram.plan("quick", l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes)[:10]
    report = run_sweep(backend, configs, store, sid, progress=True, max_retries=1)
    assert report.measured == len(configs) and not report.failed
    assert seen and max(seen) <= len(configs), seen
    assert seen[0] == 0  # the first pass settled nothing: every point went back for its retry


def test_the_notebooks_bar_counts_a_notebook_when_it_ends_not_in_the_suites_order(monkeypatch):
    """The second notebook ends first; the bar must say 1 done while the first still runs (it said
    0 until the first ended, then named the second as the last to end)."""
    from calib import runner

    bars, seen = [], []

    class Bar(tqdm.tqdm):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            bars.append(self)

    def fake(task, signal_dir, env):
        if task[0] == "occupancy":  # runs until the bar has counted the other one, at most 10 s
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (bars and bars[0].n == 1):
                time.sleep(0.01)
            seen.append((bars[0].n, bars[0].postfix) if bars else (None, None))
        return task[0], None, 0.0

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    monkeypatch.setattr(runner, "_execute_in_process", fake)
    tasks = [(nb, "in", "out", {}, ".", False) for nb in ("occupancy", "memory_bandwidth")]
    results = list(runner._execute_all(tasks, 2, progress=True))
    assert [r[0] for r in results] == ["occupancy", "memory_bandwidth"]  # still yielded in the suite's order
    assert seen[0][0] == 1 and "memory_bandwidth" in seen[0][1], seen
    assert bars[0].n == 2
