"""What a calibration notebook does between its parameters cell and its reading.

A notebook opens a :class:`Calibration` for its calibration id (a module of the registry,
``calib.calibrations``) with a backend, a results store and a session; measures the calibration's
plan through it, fits, shows the figures and writes a *fragment*: the parameters it derived plus
the fingerprint they were measured under. ``calib run`` merges the fragments of a run into the
machine profile. Keeping this here rather than in the notebooks keeps them thin and this logic
under test.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from . import calibrations
from .backends import get_backend, resolve_backend_name
from .gpulock import GpuLock, GpuQueue
from .phases import PhaseRecorder, check_fragment_fields
from .profile import ProfileError, Parameter
from .timestamps import utc_now
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
# What a notebook imports after measuring: pandas and pyarrow.parquet for the tidy frame and its
# file, then its fit's (calib.fit: scipy.stats, statsmodels' estimators) and figures' (matplotlib):
# most of the last notebook's fit and plot, which end a run (H200 2026-12-01 quick #2: shared_memory
# fit 2.0 s, plot 1.2 s after measuring; the fit and plot imports alone take 1.5 s quiet on a 2-core
# CPU host, 2026-12-02). A notebook queued for the GPU behind others imports them while it waits
# (GpuQueue.wait), one module a step, in this order.
WARM_UP_MODULES = ("pandas", "pyarrow.parquet", "scipy.stats", "statsmodels.regression.linear_model",
                   "statsmodels.robust.robust_linear_model", "matplotlib.pyplot", "calib.plotting")
SIMULATED_BANNER = ("SIMULATED DEVICE: these numbers come from calib's simulated GPU, not from real "
                    "hardware. They demonstrate the pipeline and test the statistics.")


def interactive_dir(calibration_id: str) -> Path:
    """Where a notebook run by hand (JupyterLab, ``output_dir = None``) keeps its results: a folder
    per calibration in the user data directory, never the notebooks' own folder, so that exploring
    leaves the source tree clean. ``calib run`` passes its run folder instead."""
    from .profile import user_data_dir

    return Path(user_data_dir()) / "interactive" / calibration_id


class Calibration:
    """One calibration's session in a notebook: ``Calibration("memory_bandwidth", backend=...)``."""

    def __init__(self, calibration: str, *, backend: str = "auto", sim_spec=None, device: int = 0,
                 db: str | None = None, output_dir: str | os.PathLike | None = None, label: str | None = None,
                 reason: str | None = None, ticket: str | None = None, rule: StoppingRule | None = None,
                 seed: int | None = None, progress: bool = True):
        began_at = time.time()  # the setup phase in parts (calib.phases): imports until here, then each step
        self.definition = calibrations.get(calibration)
        self.id = self.definition.ID
        self.progress = progress
        self.output_dir = Path(output_dir) if output_dir is not None else interactive_dir(self.id)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        name, self.backend_reason = resolve_backend_name(backend, device)
        self.backend = get_backend(name, sim_spec=sim_spec or None, device=device, rule=rule, seed=seed)
        backend_at = time.time()
        self.device_index = device
        self.device, self.software = self.backend.fingerprint()
        fingerprint_at = time.time()
        self.store = Store(db or default_url(self.output_dir / "results.sqlite"))
        self.label = label or f"calib-{utc_now()}"
        self.session_id = self.store.open_session(self.label, self.device, self.software, reason=reason, ticket=ticket)
        self._gpu_lock = None if self.simulated else GpuLock(device)
        self._turn_taken = False
        # where this notebook's time goes (calib.phases): from the launch, through this setup, onwards
        import calib

        imported_at = getattr(calib, "_IMPORTED_AT", None)
        self.phases = PhaseRecorder(imported_at=imported_at, setup_parts=_setup_parts(
            imported_at, began_at, [("backend", backend_at), ("fingerprint", fingerprint_at), ("store", time.time())]))

    @property
    def simulated(self) -> bool:
        return self.backend.simulated

    def banner(self) -> str:
        """The first thing a notebook prints: which device, and plainly whether it is simulated."""
        head = f"calib {self.software.get('calib')} on {self.device.get('name')} [{self.backend.name} backend: " \
               f"{self.backend_reason}]"
        return f"{SIMULATED_BANNER}\n{head}" if self.simulated else head

    def measure(self, suite: str = "quick", *, wait_for_workers: bool = False, **options):
        """Measure this calibration's plan for the suite (``options`` go to its plan: the extra
        parameters of its notebook), print what was measured, keep the tidy frame beside the run
        and return it. The GPU is released at the end, so that the next notebook of a run can
        measure while this one fits and plots."""
        with self.phases.phase("measure"):
            device_fp = self.device
            configs = self.definition.plan(suite, l2_bytes=self.backend.l2_bytes,
                                           memory_bytes=self.backend.memory_bytes,
                                           sm_count=device_fp.get("sm_count", 132), **options)
            if self.definition.KIND == "compiled":
                self.await_turn()  # in calib run, compiling waits while a host-timed notebook measures
                with self.phases.phase("compile"):  # compiling is all a compile-only calibration does
                    frame = self.definition.collect(self.backend, configs)
                frame["simulated"] = self.simulated
                print(f"{len(frame)} kernels compiled")
            else:
                frame, report = self.sweep(configs, desc=self.id, wait_for_workers=wait_for_workers, release=True)
                print(report)
            self.release_gpu()
            # replaced whole: written in place, a full disk left a truncated file under the frame's
            # name and an error that named no file; now the old file or the new one, no temporary
            # file left, and the notebook's error says which file could not be written and why
            from . import atomic
            from .runfolder import RunFolderError

            atomic.replace(self.output_dir / f"{self.id}.parquet", frame.to_parquet(), RunFolderError,
                           streams=False)
        return frame

    def fit(self, data, *, robust: bool = False):
        """The calibration's fit, held to its declared parameters (``calib.calibrations.fit``)."""
        with self.phases.phase("fit"):
            return calibrations.fit(self.id, data, robust=robust)

    def show_figures(self, data, result) -> None:
        """Every figure of the calibration, saved beside the run's data and shown here."""
        with self.phases.phase("plot"):
            for name, fig in self.definition.figures(data, result, title=self.title).items():
                self.save_figure(fig, name)

    def reading(self, result) -> str:
        """What the notebook prints last: the calibration's own reading, then flags and failures."""
        parts = [self.definition.reading(result), result.summary()]
        if self.simulated:
            parts.append("(SIMULATED DEVICE: these values are the spec's planted truth plus noise.)")
        return "\n".join(p for p in parts if p)

    def sweep(self, configs: list[dict], *, desc: str = "sweep", progress: bool | None = None,
              wait_for_workers: bool = False, release: bool = False):
        """Measure the configs not yet completed in this session (here, or by ``calib worker``
        processes with ``wait_for_workers``); return the tidy frame of all, and the report.
        ``release``: give the GPU back (:meth:`release_gpu`) as soon as the last point is measured,
        before the report and the frame are read from the store (pandas: its first import held the
        GPU idle in every notebook after its last kernel)."""
        from .worker import physical_gpu_id

        if wait_for_workers:
            self.await_turn()
            self.release_gpu()  # the workers measure; one of them may be on this GPU
        else:
            with self.phases.phase("compile"):
                self.backend.prepare(configs)  # compile while another notebook may be measuring
            self.await_turn()
            if self._gpu_lock is not None:
                # before the points are enqueued: a run's notebooks share one session, and a sweep's
                # worker measures every new job of its session, so points enqueued while another
                # notebook measures would be measured by that notebook
                with self.phases.phase("wait"):
                    self._take_gpu()
        progress = self.progress if progress is None else progress
        with self.phases.phase("measure"):
            report = run_sweep(self.backend, configs, self.store, self.session_id, desc=desc, progress=progress,
                               gpu_id=None if self.simulated else physical_gpu_id(self.device_index),
                               wait_for_workers=wait_for_workers, after_measuring=self.release_gpu if release else None)
        wanted = {c["calibration"] for c in configs}
        frame = self.store.frame(self.session_id)
        if frame.empty:
            first = report.failed[0][1] if report.failed else "no point was measured"
            raise RuntimeError(f"none of the {len(configs)} points of this sweep has a result; first error: {first}")
        return frame[frame["calibration"].isin(wanted)].reset_index(drop=True), report

    def await_turn(self):
        """Inside ``calib run``: say that this notebook is ready, then wait until the run lets it
        go on. A notebook calls this before work that would disturb a host-timed measurement
        (sweeps call it themselves); outside a run, and after the first call, it returns at once."""
        if self._turn_taken:
            return
        self._turn_taken = True
        with self.phases.phase("wait"):
            self._await_turn()

    def _await_turn(self):
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

    def _take_gpu(self):
        """The GPU lock; inside ``calib run``, after the waiters with longer tails (``GpuQueue``)."""
        folder = os.environ.get(MEASURED_SIGNAL_DIR_ENV)
        if self._gpu_lock.held or not folder or not Path(folder).is_dir():
            self._gpu_lock.acquire()
            return
        queue = GpuQueue(folder, os.environ.get(NOTEBOOK_ENV) or self.id, self.definition.TAIL_S)
        try:  # in turn after the host-timed notebooks (await_turn): nothing here disturbs their timing
            queue.wait(TURN_TIMEOUT_S, meanwhile=[_importer(m) for m in WARM_UP_MODULES])
            self._gpu_lock.acquire()
        finally:
            queue.leave()

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

    def save_figure(self, fig, name: str) -> None:
        """Save the figure beside the run's data (``<output_dir>/<name>.png``) and show that same
        PNG in the notebook: rendering once instead of twice (file and inline output) halves the
        plotting time of a run. Returns nothing, so that a cell ending in it shows the figure and
        no ``PosixPath``. Titles are wrapped to fit, log axes tidied, and a simulated device's
        figure marked SIMULATED (``calib.plotting.finish``).

        The file is replaced whole (``calib.plotting.save``). A write that fails (a full disk) costs
        only this figure: one line on stderr names the file and the reason, and the notebook goes on
        to write its fragment; an exception here had ended it before the fit's numbers were written.
        Written in place, the failure had left a truncated PNG, which the report showed broken."""
        import matplotlib.pyplot as plt

        from .plotting import FigureError, finish, save

        path = self.output_dir / f"{name}.png"
        finish(fig, simulated=self.simulated)
        try:
            png = save(fig, path, dpi=100)
        except FigureError as exc:
            print(f"calib: figure {name} not saved: {exc}; the fit's numbers are not affected", file=sys.stderr)
            return None
        finally:
            plt.close(fig)
        try:
            from IPython import get_ipython
            from IPython.display import Image, display
        except ImportError:
            return None
        if get_ipython() is not None:
            display(Image(data=png, format="png"))
        return None

    def write_fragment(self, result) -> Path:
        """The fitted parameters, with the fingerprint and session they come from; the failures
        too, so that a merge can say what this calibration could not give."""
        source = f"notebooks/{self.id}.ipynb"
        path = self.output_dir / f"fragment-{self.id}.json"
        with self.phases.phase("write"):  # the fragment's own phases end as it is written
            write_fragment(path, result.records, device=self.device, software=self.software, source=source,
                           session={"db": self.store.url, "id": self.session_id, "label": self.label},
                           failures=result.failures, timings=self.phases)
        print("wrote", path)
        return path


def _setup_parts(imported_at, began_at: float, steps) -> dict:
    """Seconds per part of the setup phase: ``imports`` (from calib's import to the Calibration:
    calib.calibration's own imports and the notebook's cells before it), then each step, ending
    at its time. Every notebook's setup comes before the host-timed one may measure, so that it
    is on a run's critical path (3 s per notebook on the H200, 2026-12-01)."""
    parts, last = {}, began_at
    if imported_at is not None and imported_at <= began_at:
        parts["imports"] = round(began_at - imported_at, 4)
    for name, at in steps:
        parts[name] = round(max(0.0, at - last), 4)
        last = at
    return parts


def _importer(module: str):
    """A step that imports ``module`` ahead of its use; a module that cannot be imported is left
    for the code that needs it to report."""
    def step():
        import importlib

        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the fit or the figures say what is missing, where it matters
            pass
    return step


def _signal_measured():
    """Tell ``calib run`` that this notebook has finished measuring (the notebooks that would
    disturb a host-timed one wait until then); nothing outside a run."""
    folder, notebook = os.environ.get(MEASURED_SIGNAL_DIR_ENV), os.environ.get(NOTEBOOK_ENV)
    if folder and notebook and Path(folder).is_dir():
        (Path(folder) / f"{notebook}.measured").touch()


def write_fragment(path, records: dict, *, device: dict, software: dict, source: str, session: dict | None = None,
                   failures: dict | None = None, timings: PhaseRecorder | None = None):
    now = utc_now()
    params = {}
    for name, rec in records.items():
        rec = {**rec, "source": rec.get("source") or source, "measured": rec.get("measured") or now}
        Parameter.from_record(name, rec)  # never write what the profile would refuse to read
        params[name] = rec
    doc = {"schema": FRAGMENT_SCHEMA, "simulated": bool(device.get("simulated")), "device": device,
           "software": software, "created": now, "source": source, "session": session or {}, "params": params,
           "failures": dict(failures or {})}
    if doc["simulated"]:
        doc["note"] = SIMULATED_BANNER
    if timings is not None:  # where the notebook's time went, up to this write (calib.phases)
        doc.update(timings.document())
    _write_whole(Path(path), (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def _write_whole(path: Path, data: bytes):
    """A fragment replaces its file whole (``calib.atomic``); a write that fails (a full disk)
    leaves the old file and raises a ProfileError naming the file and the reason: it had reached
    the notebook as a bare OSError naming none. Anything but a file (a FIFO, a device, a folder) at
    the path is refused, not written through."""
    import stat

    from . import atomic
    from .profile import _file_type

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ProfileError(f"cannot write {path}: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise ProfileError(f"cannot write {path}: it is {_file_type(mode)}, not a file")
    atomic.replace(path, data, ProfileError)


def read_fragment(path) -> dict:
    """A fragment document, checked: whatever reads it (``calib merge``, ``calib show``, the
    report, ``calib run``'s merge) can use its fields without guarding each, and a corrupt or
    hand-edited file stops with a ProfileError that names the file and the field. A fragment is
    written as strict JSON (:func:`write_fragment`), so NaN, Infinity or 1e400 in one is no calib's:
    read as a float, it passed here and ended ``calib merge`` (and a run's merge) in the profile's
    strict dump, a ValueError traceback, with the profile not written. A key written twice is refused
    too: json.loads kept the second in silence."""
    from . import strict_json
    from .profile import _read_bytes

    path = Path(path)
    data = _read_bytes(path, "fragment")  # a regular file of bounded size: a FIFO named fragment-*.json hung
    try:
        doc = strict_json.loads(data.decode("utf-8"), object_pairs_hook=strict_json.unique_keys)
    except RecursionError:
        raise ProfileError(f"fragment {path} nests lists or objects too deeply to be a fragment") from None
    except ValueError as exc:  # bad JSON, bad UTF-8, NaN, a number past a float's range, a key twice
        raise ProfileError(f"fragment {path} cannot be read: {str(exc)[:200]}") from None
    if not isinstance(doc, dict) or doc.get("schema") != FRAGMENT_SCHEMA:
        raise ProfileError(f"fragment {path} is not a {FRAGMENT_SCHEMA} document")
    for key in ("params", "failures", "device", "software", "session"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise ProfileError(f"fragment {path}: {key!r} must be an object, not {type(doc[key]).__name__}")
    for key in ("note", "created", "source"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise ProfileError(f"fragment {path}: {key!r} must be text, not {type(doc[key]).__name__}")
    session = doc.get("session") or {}
    sid, db = session.get("id"), session.get("db")
    if (sid is not None and (isinstance(sid, bool) or not isinstance(sid, int))) or (db is not None and
                                                                                   not isinstance(db, str)):
        raise ProfileError(f"fragment {path}: the session must have an integer 'id' and a text 'db'")
    problem = check_fragment_fields(doc)  # fragments written before phases were recorded have none
    if problem:
        raise ProfileError(f"fragment {path}: {problem}")
    for name, rec in (doc.get("params") or {}).items():
        try:
            Parameter.from_record(name, rec)
        except ProfileError as exc:
            raise ProfileError(f"fragment {path}: {exc}") from None
    return doc
