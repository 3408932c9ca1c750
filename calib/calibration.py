"""What a calibration notebook does between its parameters cell and its plots.

A notebook opens a :class:`Calibration` (backend + results store + session), runs sweeps through it,
fits with :mod:`calib.fit`, and writes a *fragment*: the parameters it derived plus the fingerprint
they were measured under. ``calib run`` merges the fragments of a run into the machine profile.
Keeping this here rather than in the notebooks keeps them thin and this logic under test.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from .backends import get_backend, resolve_backend_name
from .gpulock import GpuLock
from .profile import ProfileError, Parameter, _write_atomic, utc_now
from .store import Store, default_url
from .sweep import run_sweep
from .timing import StoppingRule

FRAGMENT_SCHEMA = "calib.fragment/1"
# Set by `calib run` for the kernels it starts: where a notebook signals that it has measured.
MEASURED_SIGNAL_DIR_ENV, NOTEBOOK_ENV = "CALIB_MEASURED_SIGNAL_DIR", "CALIB_NOTEBOOK"
# Set by `calib run` too: a file to create once this notebook is ready to measure, and a file whose
# appearance says it is this notebook's turn (see calib.runner: the host-timed notebook measures on
# a quiet host while the others wait, ready, for it to finish).
TURN_READY_ENV, TURN_WAIT_ENV = "CALIB_TURN_READY", "CALIB_TURN_WAIT"
# A notebook whose run died would otherwise wait for ever; past this it measures, and says so.
TURN_TIMEOUT_S = 600.0
SIMULATED_BANNER = ("SIMULATED DEVICE: these numbers come from calib's simulated GPU, not from real "
                    "hardware. They demonstrate the pipeline and test the statistics.")


class Calibration:
    def __init__(self, *, backend: str = "auto", sim_spec=None, device: int = 0, db: str | None = None,
                 output_dir: str | os.PathLike = ".", label: str | None = None, reason: str | None = None,
                 ticket: str | None = None, rule: StoppingRule | None = None, seed: int | None = None):
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        name, self.backend_reason = resolve_backend_name(backend, device)
        self.backend = get_backend(name, sim_spec=sim_spec or None, device=device, rule=rule, seed=seed)
        self.device_index = device
        self.device, self.software = self.backend.fingerprint()
        self.store = Store(db or default_url(self.output_dir / "results.sqlite"))
        self.label = label or f"calib-{utc_now()}"
        self.session_id = self.store.open_session(self.label, self.device, self.software, reason=reason, ticket=ticket)
        self._gpu_lock = None if self.simulated else GpuLock(device)
        self._turn_taken = False

    @property
    def simulated(self) -> bool:
        return self.backend.simulated

    def banner(self) -> str:
        """The first thing a notebook prints: which device, and plainly whether it is simulated."""
        head = f"calib {self.software.get('calib')} on {self.device.get('name')} [{self.backend.name} backend: " \
               f"{self.backend_reason}]"
        return f"{SIMULATED_BANNER}\n{head}" if self.simulated else head

    def sweep(self, configs: list[dict], *, desc: str = "sweep", progress: bool = True,
              wait_for_workers: bool = False):
        """Measure the configs not yet completed in this session (here, or by ``calib worker``
        processes with ``wait_for_workers``); return the tidy frame of all, and the report."""
        from .worker import physical_gpu_id

        if wait_for_workers:
            self.await_turn()
            self.release_gpu()  # the workers measure; one of them may be on this GPU
        else:
            self.backend.prepare(configs)  # compile while another notebook may be measuring
            self.await_turn()
            if self._gpu_lock is not None:
                self._gpu_lock.acquire()
        report = run_sweep(self.backend, configs, self.store, self.session_id, desc=desc, progress=progress,
                           gpu_id=None if self.simulated else physical_gpu_id(self.device_index),
                           wait_for_workers=wait_for_workers)
        experiments = {c["experiment"] for c in configs}
        frame = self.store.frame(self.session_id)
        if frame.empty:
            first = report.failed[0][1] if report.failed else "no point was measured"
            raise RuntimeError(f"none of the {len(configs)} points of this sweep has a result; first error: {first}")
        return frame[frame["experiment"].isin(experiments)].reset_index(drop=True), report

    def await_turn(self):
        """Inside ``calib run``: say that this notebook is ready, then wait until the run lets it
        go on. A notebook calls this before work that would disturb a host-timed measurement
        (sweeps call it themselves); outside a run, and after the first call, it returns at once."""
        if self._turn_taken:
            return
        self._turn_taken = True
        ready, wait = os.environ.get(TURN_READY_ENV), os.environ.get(TURN_WAIT_ENV)
        if ready:
            Path(ready).touch()
        if not wait:
            return
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while not Path(wait).exists():
            if time.monotonic() > deadline:
                print(f"calib: waited {TURN_TIMEOUT_S:.0f} s for {wait}, which calib run should have created; "
                      "measuring anyway", file=sys.stderr)
                return
            time.sleep(0.02)

    def release_gpu(self):
        """Say that this notebook has finished measuring: its buffers are freed and the next
        notebook of the run may measure while this one fits and plots. A later sweep takes the GPU
        back; the end of the process releases it in any case."""
        if self._gpu_lock is not None and self._gpu_lock.held:
            release = getattr(self.backend, "release_buffers", None)
            if release:
                release()
            self._gpu_lock.release()
        _signal_measured()

    def title(self, text: str) -> str:
        return f"{text} (SIMULATED DEVICE)" if self.simulated else f"{text} on {self.device.get('name')}"

    def save_figure(self, fig, name: str) -> Path:
        """Save the figure beside the run's data and show that same PNG in the notebook: rendering
        once instead of twice (file and inline output) halves the plotting time of a run."""
        import matplotlib.pyplot as plt

        path = self.output_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        try:
            from IPython import get_ipython
            from IPython.display import Image, display
        except ImportError:
            return path
        if get_ipython() is not None:
            display(Image(filename=str(path)))
        return path

    def write_fragment(self, records: dict, *, source: str) -> Path:
        path = self.output_dir / f"fragment-{Path(source).stem}.json"
        write_fragment(path, records, device=self.device, software=self.software, source=source,
                       session={"db": self.store.url, "id": self.session_id, "label": self.label})
        return path


def _signal_measured():
    """Tell ``calib run`` that this notebook has finished measuring (the notebooks that would
    disturb a host-timed one wait until then); nothing outside a run."""
    folder, notebook = os.environ.get(MEASURED_SIGNAL_DIR_ENV), os.environ.get(NOTEBOOK_ENV)
    if folder and notebook and Path(folder).is_dir():
        (Path(folder) / f"{notebook}.measured").touch()


def write_fragment(path, records: dict, *, device: dict, software: dict, source: str, session: dict | None = None):
    now = utc_now()
    params = {}
    for name, rec in records.items():
        rec = {**rec, "source": rec.get("source") or source, "measured": rec.get("measured") or now}
        Parameter.from_record(name, rec)  # never write what the profile would refuse to read
        params[name] = rec
    doc = {"schema": FRAGMENT_SCHEMA, "simulated": bool(device.get("simulated")), "device": device,
           "software": software, "created": now, "source": source, "session": session or {}, "params": params}
    if doc["simulated"]:
        doc["note"] = SIMULATED_BANNER
    _write_atomic(Path(path), doc)


def read_fragment(path) -> dict:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ProfileError(f"fragment {path} cannot be read: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != FRAGMENT_SCHEMA:
        raise ProfileError(f"fragment {path} is not a {FRAGMENT_SCHEMA} document")
    for name, rec in doc.get("params", {}).items():
        Parameter.from_record(name, rec)
    return doc
