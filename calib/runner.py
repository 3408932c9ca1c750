"""``calib run``: execute the suite's notebooks headless and turn their fragments into a profile.

Each notebook runs in a real Jupyter kernel through papermill. The run folder keeps every executed
notebook (with its plots), the raw data (results database, parquet frames) and the fragments, so
that a profile can always be traced back to the measurements behind it. Running again with the
same ``--run-dir`` resumes: sweeps measure only the points not yet completed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import calibrations
from . import fingerprint as fp
from . import lifeline
from . import phases as _phases
from .errors import CalibError
from . import runfolder
from .profile import ProfileError, merge_into, user_profiles_dir
from .timestamps import utc_now

if __name__ != "__main__":
    # Not in a notebook's process (`python -m calib.runner --one`, eleven starting at once beside
    # their kernels), which uses none of these: they import numpy and SQLAlchemy, 0.4 s of that
    # process's 1.1 s start alone on a 2-core CPU host (python -X importtime, 2026-12-02).
    from .backends import get_backend, resolve_backend_name
    from .calibration import (MEASURED_SIGNAL_DIR_ENV, NOTEBOOK_ENV, SIMULATED_BANNER, TURN_READY_ENV,
                              TURN_WAIT_ENV, read_fragment)
    from .store import default_url

# Every suite runs every notebook (one per calibration of the registry, named by its id); the suite
# picks each notebook's grid (passed as `suite`).
SUITES = calibrations.SUITE_NAMES
NOTEBOOKS = list(calibrations.IDS)


def host_timed() -> tuple[str, ...]:
    """Notebooks that time the host (launch submission from Python): with other notebooks importing
    and plotting beside them, launch.overhead_us fell from 6.4 to 4.7 us and its CI widened from ±1%
    to ±9% on an H200 host (2026-11-29). They measure while the others wait, ready (Turns, below)."""
    return tuple(m.ID for m in calibrations.all_calibrations() if m.HOST_TIMED)


def compile_only() -> tuple[str, ...]:
    return tuple(m.ID for m in calibrations.all_calibrations() if m.KIND == "compiled")
# The line by which `python -m calib.runner --one` hands its notebook's result back.
ONE_RESULT_PREFIX = "calib-notebook-result: "


class RunError(CalibError, RuntimeError):
    pass


def notebooks_dir() -> Path:
    from . import resources

    return resources.notebooks_dir()


def default_runs_dir() -> Path:
    from .profile import user_data_dir

    return Path(user_data_dir()) / "runs"


@dataclass
class RunResult:
    run_dir: Path
    profile_path: Path | None
    params: dict = field(default_factory=dict)
    simulated: bool = False
    failed: list[tuple[str, str]] = field(default_factory=list)
    wall_s: float = 0.0
    # where the time went: a row per notebook of this run, a column per phase, then the critical path
    phase_table: str = ""
    # parameter -> why its fit gave nothing (too few points left on a small device, ...): said on the
    # terminal, not only in run.json and the report, since the table simply lacks those rows
    not_fitted: dict = field(default_factory=dict)


def run(*, backend: str = "auto", sim_spec=None, device: int = 0, suite: str = "quick", profile_path=None,
        run_dir=None, notebooks: list[str] | None = None, parameters: dict | None = None, progress: bool = True,
        reason: str | None = None, jobs: int | str | None = "auto", echo=print) -> RunResult:
    """Run a calibration suite; see the module docstring. The run folder is held (:func:`_hold`)
    until the run ends, however it ends."""
    held: list = []
    try:
        return _run(backend=backend, sim_spec=sim_spec, device=device, suite=suite, profile_path=profile_path,
                    run_dir=run_dir, notebooks=notebooks, parameters=parameters, progress=progress,
                    reason=reason, jobs=jobs, echo=echo, held=held)
    finally:
        for lock in held:
            lock.release()


def _run(*, backend, sim_spec, device, suite, profile_path, run_dir, notebooks, parameters, progress, reason,
         jobs, echo, held: list) -> RunResult:
    from ._optional import require

    require("papermill", "calib run")
    t_start, run_started_at = time.perf_counter(), time.time()
    if suite not in SUITES:
        raise RunError(f"unknown suite {suite!r}: choose one of {', '.join(SUITES)}")
    names = _notebook_names(notebooks)
    name, why = resolve_backend_name(backend, device)
    if name == "sim":
        spec_text = f"spec {sim_spec}" if sim_spec else "built-in H200-like spec"
        if sim_spec and not Path(sim_spec).is_file():
            what = "is a folder, not a spec file" if Path(sim_spec).is_dir() else (
                "is not a regular file" if Path(sim_spec).exists() else "does not exist")
            raise RunError(f"simulated-device spec {sim_spec} {what}")
        try:  # once here, rather than the same error from every notebook; before the banner: one line
            sim = get_backend("sim", sim_spec=sim_spec)
            current_device = sim.fingerprint()[0]
            sim.close()
        except Exception as exc:  # noqa: BLE001 - whatever the spec got wrong, said in one line
            text = str(exc)
            raise RunError(text if sim_spec and str(sim_spec) in text else
                           f"simulated-device spec {sim_spec or '(built-in)'} is not usable: {text}") from None
        echo(f"calib run: calibrating the SIMULATED device ({why}; {spec_text}). Nothing here measures real hardware.")
    else:
        echo(f"calib run: calibrating GPU {device} on the cupy backend ({why}).")
        require("cupy", "calib run --backend cupy")  # here, not once per notebook after all of them started
        detected = fp.detect_current(device)
        current_device = detected[0] if detected else None

    if profile_path is not None:
        _refuse_profile_target(Path(profile_path))
    run_dir = Path(run_dir) if run_dir else default_runs_dir() / f"{utc_now().replace(':', '')}-{suite}-{name}"
    _refuse_other_device(run_dir, current_device)
    _make_run_dir(run_dir)
    run_dir = run_dir.resolve()
    held.append(_hold(run_dir))
    label = _run_label(run_dir)
    echo(f"run folder: {run_dir}")

    # progress=False: an executed notebook would keep a stale text bar (and, without ipywidgets, a
    # TqdmWarning) in every sweep cell; calib run shows its own progress.
    base_params = {"backend": name, "device": device, "suite": suite, "output_dir": str(run_dir),
                   "sim_spec": str(Path(sim_spec).resolve()) if sim_spec else None, "label": label,
                   "progress": False, **(parameters or {})}
    # more slots than notebooks would only be said ("99999 notebooks at a time"), never used
    jobs = default_jobs(name, len(names)) if jobs in (None, "auto") else max(1, min(int(jobs), len(names)))
    if jobs > 1:
        notes = ["measurements take turns on the GPU"] if name != "sim" else []
        notes += [f"{nb} measures first, while the others wait" for nb in names if nb in host_timed()]
        echo(f"{jobs} notebooks at a time: one measures while the others start, fit and plot"
             + (f" ({'; '.join(notes)})." if notes else "."))
    tasks = []
    for i, nb in enumerate(names, 1):
        source = notebooks_dir() / f"{nb}.ipynb"
        if not source.is_file():
            raise RunError(f"no notebook {source}")
        bar = {"desc": f"[{i}/{len(names)}] {nb}"} if progress and jobs == 1 else False
        # a folder per calibration (calib.runfolder); the results database stays one, at the top
        folder = runfolder.calibration_dir(run_dir, nb)
        folder.mkdir(exist_ok=True)
        nb_params = {**base_params, "output_dir": str(folder), "db": default_url(run_dir / runfolder.DATABASE),
                     **(parameters or {})}
        tasks.append((nb, str(source), str(runfolder.notebook_path(run_dir, nb)), nb_params, str(folder), bar))
    failed, notebook_wall_s = [], {}
    signal_dir = run_dir / ".measured"
    shutil.rmtree(signal_dir, ignore_errors=True)  # signals of an earlier, resumed run say nothing now
    signal_dir.mkdir()
    # a signal ends every notebook process and kernel of the run, not only this one (calib.lifeline)
    with lifeline.guard(then=f"what they measured is kept in {run_dir}: run the same command with "
                             f"--run-dir {run_dir} to resume"):
        for nb, error, wall_s in _execute_all(tasks, jobs, progress=progress and jobs > 1, signal_dir=signal_dir):
            notebook_wall_s[nb] = round(wall_s, 2)
            if error:
                failed.append((nb, error))
                echo(f"notebook {nb} failed: {error} (see {runfolder.notebook_path(run_dir, nb)})")

    # the run's end (merge, index, report) stops on a signal as the notebooks do: a Ctrl-C here was a traceback
    with lifeline.guard(then=f"every notebook had ended; run the same command with --run-dir {run_dir} to "
                             "write the profile (nothing is measured again)"):
        fragments, by_calibration = [], {}
        for nb in names:
            path = runfolder.fragment_path(run_dir, nb)
            if path.exists():
                fragments.append(read_fragment(path))
                by_calibration[nb] = fragments[-1]
            elif nb not in dict(failed):
                failed.append((nb, f"wrote no fragment ({path})"))
        if not fragments:
            raise RunError(f"no notebook produced parameters; see the executed notebooks in {run_dir}")

        device_fp, software_fp = fragments[0]["device"], fragments[0]["software"]
        for frag in fragments[1:]:
            diffs = fp.hard_differences(frag["device"], device_fp)
            if diffs:
                raise RunError(f"fragments of one run disagree about the device: {'; '.join(diffs)}")
        params = {}
        for frag in fragments:
            params.update(frag["params"])

        target = Path(profile_path) if profile_path else user_profiles_dir() / f"{fp.device_slug(device_fp)}.json"
        try:
            merge_into(target, params, device=device_fp, software=software_fp)
        except ProfileError as exc:
            again = _rerun_command(run_dir, name, sim_spec, suite, notebooks and names)
            raise RunError(f"{exc}. Nothing is lost: the measurements and fragments are kept in {run_dir}; "
                           f"write them to another profile with `{again}`, which measures nothing again") from None
        _link_sessions(fragments, target, run_dir)
        # each notebook's phases (its fragment, if this run wrote it) against its wall time from the launch
        timing = {nb: _phases.notebook_timing(by_calibration.get(nb), notebook_wall_s.get(nb),
                                              run_started_at=run_started_at) for nb in names}
        timing = {nb: t for nb, t in timing.items() if t}
        summary = {"profile": str(target), "notebooks": names, "failed": failed,
                   "simulated": bool(device_fp.get("simulated")),
                   "wall_s": time.perf_counter() - t_start, "notebook_wall_s": notebook_wall_s,
                   "finished": utc_now(), "critical_path": _phases.critical_path(timing),
                   "notebook_timing": {nb: {k: v for k, v in t.items() if k != "spans"} for nb, t in timing.items()}}
        if summary["simulated"]:
            summary["note"] = SIMULATED_BANNER
        index = runfolder.write_index(run_dir, summary, by_calibration, device=device_fp, software=software_fp)
        this_run = [nb for nb in index["notebooks"] if nb["calibration"] in names]
        phase_table = _phases.format_table(this_run, index.get("critical_path"))
        try:  # the report is for people: a failure to write it is a warning, never a lost run
            from .html_report import write_report

            write_report(run_dir)
        except Exception as exc:  # noqa: BLE001
            echo(f"warning: could not write {run_dir / runfolder.REPORT}: {type(exc).__name__}: {exc}")
        not_fitted = {name: f"{nb}: {why}" for nb, frag in by_calibration.items()
                      for name, why in (frag.get("failures") or {}).items() if name not in params}
        return RunResult(run_dir=run_dir, profile_path=target, params=params, simulated=summary["simulated"],
                         failed=failed, wall_s=summary["wall_s"], phase_table=phase_table, not_fitted=not_fitted)


def _notebook_names(notebooks) -> list[str]:
    """The notebooks to run, each once, in the order given; an unknown name is a RunError before
    any folder is made. A name given twice ran twice at once, two processes writing one notebook's
    files."""
    names = list(dict.fromkeys(notebooks or NOTEBOOKS))
    for nb in names:
        try:
            calibrations.get(nb)
        except calibrations.UnknownCalibration as exc:
            raise RunError(str(exc)) from None
    return names


RUN_ID = ".calib-run-id"


def _run_label(run_dir: Path) -> str:
    """The session label of a run folder's sweeps: ``run:<id>``, the id kept in the folder. Keyed by
    the folder's path, as before, a folder moved or copied elsewhere (its database goes with it)
    measured everything again. A folder from before the id keeps its path label, so it resumes."""
    import uuid

    label = _recorded_label(run_dir)
    if label:
        return label
    from . import atomic

    text = uuid.uuid4().hex
    # whole or not at all: a partial id would have labelled the next resume's sweeps anew, and it
    # would have measured everything again
    atomic.replace(run_dir / RUN_ID, (text + "\n").encode("ascii"), RunError, streams=False)
    return f"run:{text}"


def _recorded_label(run_dir: Path) -> str | None:
    """The label a run folder's sweeps already have (its id, else its path beside a database of
    the older layout), or None for a new folder; reads only."""
    import re

    from .profile import ProfileError, _NotThere, _read_bytes

    try:  # a regular file, read to a bound: a FIFO under the id's name had the run wait forever
        text = _read_bytes(run_dir / RUN_ID, "run id", 4096).decode("ascii", "replace").strip()
    except _NotThere:
        text = ""
    except ProfileError as exc:
        raise RunError(f"{exc} (the run folder's id, {RUN_ID}: remove it to measure this folder anew)") from None
    if re.fullmatch(r"[0-9a-f]{32}", text):
        return f"run:{text}"
    if (run_dir / runfolder.DATABASE).exists():
        return f"run:{run_dir}"
    return None


def _refuse_other_device(run_dir: Path, current: dict | None):
    """A run folder resumed for another device, or the simulated device under another spec, is
    refused before any notebook starts. Each notebook had failed on its own ("measured on another
    device"), the folder's index was then rewritten with every notebook failed, and the old run's
    profile written anyway; under another spec of the same device the old points were reused in
    silence, and the profile held the old spec's values. A folder whose run was stopped before
    its profile was written is judged by its sweeps' session in the results database."""
    if current is None:
        return
    recorded = _recorded_device(run_dir)
    if recorded is None:
        return  # a new folder, or nothing readable: the notebooks' own checks speak for it
    diffs = fp.measurement_differences(recorded, current)
    if diffs:
        raise RunError(f"run folder {run_dir} was measured on another device ({'; '.join(diffs)}): resuming it "
                       "would mix the two; give another --run-dir (the folder is left as it is)")


def _recorded_device(run_dir: Path) -> dict | None:
    """The device a run folder was measured on: its profile's, else its session's."""
    if (run_dir / runfolder.PROFILE).is_file():
        try:
            return json.loads((run_dir / runfolder.PROFILE).read_text()).get("device") or {}
        except (OSError, ValueError, RecursionError, AttributeError):
            return None
    return _session_device(run_dir)


def _session_device(run_dir: Path) -> dict | None:
    """The device of the run folder's session in its results database (CALIB_DB_URL, else the
    folder's SQLite file), or None where there is none yet or it cannot be read."""
    from .store import sqlite_url

    run_dir = run_dir.resolve()
    label, database = _recorded_label(run_dir), run_dir / runfolder.DATABASE
    url = default_url(database)
    if label is None or (url == sqlite_url(database) and not database.is_file()):
        return None
    try:
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        from .store import Store
        from .store.tables import SessionRow

        engine = Store(url, readonly=True).engine
        try:
            with Session(engine) as s:
                return s.scalars(select(SessionRow.device).where(SessionRow.label == label)
                                 .order_by(SessionRow.id).limit(1)).first()
        finally:
            engine.dispose()
    except Exception:  # noqa: BLE001 - an unreadable database: the notebooks' own checks speak for it
        return None


def _refuse_profile_target(path: Path):
    """Refuse, before a single notebook runs, a --profile that can never be written (a folder, a
    FIFO, a path under a file): found after the run, it would cost the whole run's time."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # a path under a file, a folder this user may not enter
        raise RunError(f"--profile {path} cannot be written: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise RunError(f"--profile {path} is {what}: give the path of a profile's .json file (it is left as it is)")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise RunError(f"--profile {path} cannot be written: {parent} is a file, not a folder")


def _make_run_dir(run_dir: Path):
    """The run folder, or a one-line RunError: a file of that name, or a folder that cannot be made."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"--run-dir {run_dir} is a file, not a folder: give a folder (a new one, or a run's to resume)")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"cannot make run folder {run_dir}: {exc.strerror or exc}") from None


RUN_LOCK = ".calib-run.lock"


def _hold(run_dir: Path):
    """The run folder's lock, taken without waiting: a second `calib run` on one folder (a resume
    typed while the first still runs) had deleted the first's notebook signals and written the same
    notebooks, fragments and run.json beside it. An OS lock, so a killed run leaves none behind."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(run_dir / RUN_LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunError(f"run folder {run_dir} is in use by another calib run: wait for it to end (then run the "
                       "same command to resume), or give another --run-dir") from None
    except OSError as exc:
        raise RunError(f"cannot lock run folder {run_dir}: {exc.strerror or exc}") from None
    return lock


def _rerun_command(run_dir: Path, backend: str, sim_spec, suite: str, notebooks) -> str:
    """The `calib run` that turns this run folder into a profile elsewhere: the same folder resumes
    its sessions, so every sweep finds its points measured and only the fits run again."""
    parts = ["calib run", f"--backend {backend}", f"--suite {suite}", f"--run-dir {run_dir}"]
    if sim_spec:
        parts.insert(2, f"--sim-spec {Path(sim_spec).resolve()}")
    parts += [f"--notebook {nb}" for nb in notebooks or ()]
    return " ".join(parts + ["--profile OTHER.json"])


def default_jobs(backend_name: str, notebooks: int) -> int:
    """Notebooks in flight at once. On a GPU, all of them where the host has the cores: a notebook
    waiting for the GPU lock costs nothing, and every one in flight has its kernel started, its
    imports done and its kernels compiled by the time the GPU is free (with five slots, an H200
    sat idle for 5 s at a time while the slots held notebooks queuing for the lock and the next
    could not even start). Small hosts run one at a time: the host-side timings need quiet cores.
    The simulated device measures nothing real and uses two cores where there are two."""
    cores = os.cpu_count() or 1
    if backend_name == "sim":
        return min(2, cores, notebooks)
    return max(1, min(notebooks, cores - 4)) if cores >= 8 else 1


def _execute_all(tasks, jobs: int, *, progress: bool, signal_dir: Path | None = None):
    """Yield (notebook, error or None, wall seconds) in the suite's order. With several jobs, as
    many notebooks as there are slots start at once, the host-timed ones first; see :class:`Turns`
    for the order in which they then measure."""
    if jobs == 1:
        for task in tasks:
            yield _execute_one(*task)
        return
    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    first = [t for t in tasks if t[0] in host_timed()]
    # the longest CPU-only work (NVRTC compiling every register variant: 10 s quick, 40 s full on
    # an H200 host) starts as early as it may, so that it does not end the run alone
    rest = sorted((t for t in tasks if t[0] not in host_timed()), key=lambda t: t[0] not in compile_only())
    turns = Turns(signal_dir, [t[0] for t in first], slots=jobs) if first and rest and signal_dir else None
    started = set()

    def start(task):
        started.add(task[0])
        return _execute_in_process(task, signal_dir, turns.env(task[0]) if turns else {})

    # the bar from the launch: made once the host-timed notebooks had measured, it said "0/11, 00:00"
    # with notebooks already done and kept its clock 8 s behind the run's
    with ThreadPoolExecutor(max_workers=jobs) as pool, \
            tqdm(total=len(tasks), desc="notebooks", unit="nb", disable=not progress) as bar:
        tick = _ticker(bar)
        futures = {t[0]: pool.submit(start, t) for t in first + rest}  # the pool starts them in this order
        for future in futures.values():
            future.add_done_callback(tick)
        if turns:
            turns.referee(futures, started, others=len(rest))
        if turns or not first:  # the host-timed notebooks have measured (or none runs): nothing here disturbs them
            _warm_the_end()
        for task in tasks:
            yield futures[task[0]].result()
        with tick.lock:
            bar.n = len(tasks)  # a callback may still be on its way when the last result is in
            bar.refresh()


def _ticker(bar):
    """A done-callback that counts a notebook on the bar as it ends, naming it. Counted as the
    results were read, in the suite's order, the bar said 0 done while the host-timed notebook and
    others had long finished, and then named as last done a notebook that ended first."""
    import threading

    lock = threading.Lock()

    def tick(future):
        with lock:
            bar.update(1)
            if not future.cancelled() and future.exception() is None:
                bar.set_postfix_str(future.result()[0])

    tick.lock = lock
    return tick


# What the run's end imports after the last notebook: the report (calib.html_report) opens the
# results store read-only, which checks its schema revision through alembic's scripts (0.2 s to
# import quiet, 0.6 s under load on a 2-core CPU host, of a 0.4-1.2 s report; 2026-12-02). Imported
# while the notebooks measure instead, it leaves the run's end.
END_MODULES = ("calib.html_report", "alembic.script")


def _warm_the_end():
    import importlib

    for module in END_MODULES:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the report says what it lacks, as a warning, where it matters
            pass


class Turns:
    """The order in which the notebooks in flight measure, told through files in the signal folder.

    Host-timed notebooks (launch submission timed from Python) must measure on a quiet host, yet
    waiting for them before starting the others left an H200 idle for 6 s of a 47 s quick suite
    (2026-11-29): starting ten kernels, importing and compiling. So everything starts together; the
    others prepare (import, compile, allocate), say they are ready and wait; once all are ready the
    host-timed notebooks measure; once they have measured the others go on, taking turns on the
    GPU lock. A notebook that ends, however it ends, counts as ready and as measured, so a crash
    never holds up the rest.
    """

    GO, OPEN = "host-timed.go", "others.go"
    # a notebook that neither gets ready nor ends (a hung kernel) holds up the host-timed ones no longer
    READY_TIMEOUT_S = 120.0

    def __init__(self, folder: Path, host_timed: list[str], *, slots: int):
        self.folder, self.host_timed, self.slots = Path(folder), list(host_timed), slots

    def env(self, notebook: str) -> dict:
        if notebook in self.host_timed:
            return {TURN_WAIT_ENV: str(self.folder / self.GO)}
        return {TURN_READY_ENV: str(self.folder / f"{notebook}.ready"), TURN_WAIT_ENV: str(self.folder / self.OPEN)}

    def referee(self, futures: dict, started: set, *, others: int, echo=None):
        """Create the two files at their moments; return once the second exists. ``started``
        fills as the pool starts notebooks; ``others`` counts the notebooks that are not host-timed."""
        echo = echo or (lambda text: print(text, file=sys.stderr))
        in_flight = min(others, self.slots - len(self.host_timed))  # the others the pool starts at once
        go, deadline = False, time.monotonic() + self.READY_TIMEOUT_S
        while True:
            if all((self.folder / f"{nb}.measured").exists() or futures[nb].done() for nb in self.host_timed):
                (self.folder / self.OPEN).touch()
                return
            if not go:
                waiting = [nb for nb in started - set(self.host_timed)
                           if not ((self.folder / f"{nb}.ready").exists() or futures[nb].done())]
                ready = len(started - set(self.host_timed)) >= in_flight and not waiting
                if not ready and time.monotonic() > deadline:
                    echo(f"calib run: {', '.join(sorted(waiting)) or 'a notebook'} not ready after "
                         f"{self.READY_TIMEOUT_S:.0f} s; {', '.join(self.host_timed)} measures beside it")
                if ready or time.monotonic() > deadline:
                    (self.folder / self.GO).touch()
                    go = True
            time.sleep(0.02)


def _execute_in_process(task, signal_dir: Path | None, turn_env: dict | None = None):
    """One notebook in a Python process of its own (``python -m calib.runner --one``): a process
    that crashes takes only its notebook with it, and nothing depends on how this process was
    started (a process pool would re-import its main module, which a REPL does not have)."""
    nb = task[0]
    env = dict(os.environ)
    # numerical libraries start a thread per core in every kernel: with several notebooks in flight
    # they would crowd the core that times launches
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "2")
    if signal_dir is not None:  # the kernel inherits these: Calibration.release_gpu() says it is done
        env.update({MEASURED_SIGNAL_DIR_ENV: str(signal_dir), NOTEBOOK_ENV: nb})
    env.update(turn_env or {})
    t0 = time.perf_counter()
    env[_phases.LAUNCHED_AT_ENV] = repr(time.time())  # the notebook's start phase counts from here
    # in a process group of its own, which dies with calib run and which a signal to calib run ends
    proc = lifeline.run_child([sys.executable, "-m", "calib.runner", "--one", json.dumps(task)], env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(ONE_RESULT_PREFIX):
            name, error, wall_s = json.loads(line[len(ONE_RESULT_PREFIX):])
            # the wall time until the process ended, as the run waited for it (its exit is `other` too)
            return name, error, max(wall_s, time.perf_counter() - t0)
    tail = " ".join(proc.stderr.strip().splitlines()[-3:])
    return nb, f"its process exited with status {proc.returncode}: {tail}", time.perf_counter() - t0


def _execute_one(nb: str, source: str, output: str, parameters: dict, cwd: str, progress_bar,
                 launched_at: float | None = None):
    """One notebook through papermill in a real kernel; an error comes back as text. The wall
    time counts from ``launched_at`` (when ``calib run`` started this notebook's process; default:
    now), which its kernel learns from the environment (calib.phases). The kernel is started
    before papermill is imported, so that it boots while papermill loads (:func:`_start_kernel`)."""
    launched_at = launched_at or time.time()
    before = os.environ.get(_phases.LAUNCHED_AT_ENV)
    os.environ[_phases.LAUNCHED_AT_ENV] = repr(launched_at)  # the kernel inherits it
    try:
        first = _start_kernel(cwd)
        import papermill

        error = _execute_attempts(papermill, nb, source, output, parameters, cwd, progress_bar, first_kernel=first)
    finally:
        if before is None:
            os.environ.pop(_phases.LAUNCHED_AT_ENV, None)
        else:
            os.environ[_phases.LAUNCHED_AT_ENV] = before
    return nb, error, max(0.0, time.time() - launched_at)


def _start_kernel(cwd: str):
    """A started Jupyter kernel for papermill to run the notebook in (its ``km``), or the exception
    that kept it from starting (papermill's attempt then fails with it, and the next attempt starts
    another). Started here rather than by papermill: the kernel boots (2 s of a notebook's 4.1-5.2 s
    start on the H200 host, 2026-12-01 quick #2) while this process imports papermill, instead of
    after it. IPython's history stays in memory, as papermill's own kernels keep it: eleven kernels
    writing one history file would wait on each other's locks."""
    try:
        from jupyter_client.manager import AsyncKernelManager
        from jupyter_core.utils import run_sync

        km = AsyncKernelManager(kernel_name="python3")
        run_sync(km.start_kernel)(cwd=cwd, extra_arguments=["--HistoryManager.hist_file=:memory:"])
        return km
    except Exception as exc:  # noqa: BLE001 - the attempt that uses it reports it
        return exc


def _end_kernel(km) -> None:
    """Kill the kernel at once. Its notebook is done (outputs received, fragment and figures
    written, the results store committed, the GPU lock released), and a polite shutdown of a kernel
    that has loaded calib's stack took 0.93 s here (0.13 s killed; 2-core CPU host, 2026-12-02):
    0.9 of the 1.0-1.3 s 'other' that the last notebook of a run adds to its end."""
    if km is None or isinstance(km, BaseException):
        return
    from jupyter_core.utils import run_sync

    try:
        run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # noqa: BLE001 - dead already; its process group goes with this process in any case
        pass


class _WholeSaves:
    """papermill's I/O handler for one executed notebook, registered for its path alone (papermill's
    own extension point, ``papermill_io.register``): each of papermill's saves (at the start, as
    every cell starts and ends, at the end) replaces the file whole (calib.atomic). Written in place
    (``open(path, "w")``), a save that failed half-way (a full disk) left a truncated notebook, no
    JSON at all, where the previous save had been. Now the file is the last save that succeeded, so
    it still shows how far the notebook got, no temporary file is left, and the error names it."""

    def read(self, path):  # papermill reads its input, not its output: unless the two are one file
        return Path(path).read_text(encoding="utf-8")

    def listdir(self, path):
        return [os.path.join(path, name) for name in os.listdir(path)]

    def write(self, buf, path):
        from . import atomic

        atomic.replace(path, buf.encode("utf-8"), RunError, streams=False)

    def pretty_path(self, path):
        return path


_SAVED_WHOLE: set = set()  # the executed notebooks this process has registered _WholeSaves for


def _save_whole(output: str):
    from papermill.iorw import papermill_io

    if output not in _SAVED_WHOLE:
        # papermill's I/O for a path goes to the newest handler whose scheme begins it: here, this path's
        papermill_io.register(output, _WholeSaves())
        _SAVED_WHOLE.add(output)


def _execute_attempts(papermill, nb, source, output, parameters, cwd, progress_bar, first_kernel=None):
    error = None
    # absolute: papermill runs the notebook in cwd, and its own handler wrote a relative path from
    # where it was called, as this does
    output = os.path.abspath(output)
    _save_whole(output)
    for attempt in (1, 2):
        km = first_kernel if attempt == 1 and first_kernel is not None else _start_kernel(cwd)
        try:
            if isinstance(km, BaseException):
                raise km
            papermill.execute_notebook(source, output, parameters=parameters, cwd=cwd, kernel_name="python3",
                                       progress_bar=progress_bar, log_output=False, km=km)
            error = None
            break
        except papermill.PapermillExecutionError as exc:  # a cell raised: the notebook's own error
            error = f"{exc.ename}: {exc.evalue}"
            break
        except RunError as exc:  # a save of the executed notebook failed (_WholeSaves): so would a second attempt's
            error = str(exc)
            break
        except Exception as exc:  # noqa: BLE001 - the kernel died or never started
            # One of five kernels started together died at start on an H200 host (2026-11-29; its
            # exception escaped the process pool of the time and was lost). Starting it again is
            # safe: the sweeps resume from the results store and measure only what is missing.
            error = f"{type(exc).__name__}: {exc}"
            if attempt == 1:
                print(f"calib run: {nb}: {error}; starting it again", file=sys.stderr)
        finally:
            # Not on the way out of a signal (KeyboardInterrupt: calib.lifeline has ended every
            # process below this one, the kernel among them): running the event loop again there
            # would print the interrupted cell's "Task exception was never retrieved".
            if sys.exc_info()[0] is None or issubclass(sys.exc_info()[0], Exception):
                _end_kernel(km)
    return error


def _link_sessions(fragments, profile_path: Path, run_dir: Path):
    """Point each session the notebooks measured in at the profile fitted from it. The notebooks
    opened the same database as this (CALIB_DB_URL, else the run folder's SQLite file)."""
    from .store import Store, default_url

    store = None
    # once per session: a run's notebooks share one (its label), and each link is a write (11 of them
    # were 65 ms of a run's end on a 2-core CPU host, 2026-12-02)
    for session_id in dict.fromkeys((frag.get("session") or {}).get("id") for frag in fragments):
        if session_id:
            try:
                store = store or Store(default_url(run_dir / "results.sqlite"))
                store.link_profile(session_id, profile_path)
            except Exception as exc:  # the profile is written; a missing link is worth a line, not a failure
                print(f"warning: could not link session {session_id} to {profile_path}: {exc}", file=sys.stderr)


if __name__ == "__main__":  # python -m calib.runner --one TASK_JSON: what _execute_in_process starts
    if len(sys.argv) != 3 or sys.argv[1] != "--one":
        sys.exit("usage: python -m calib.runner --one TASK_JSON (started by calib run)")
    lifeline.die_with_parent(on_death=lambda: lifeline.end_tree(grace_s=2.0))  # its kernel ends with it
    print(ONE_RESULT_PREFIX + json.dumps(_execute_one(*json.loads(sys.argv[2]),
                                                      launched_at=_phases.launched_at_from_env())), flush=True)
    # Done: the executed notebook is written and its kernel killed. What an interpreter's exit would
    # still do here (nbclient's atexit clean-up of a kernel already gone, its ZeroMQ channels' linger,
    # tearing down papermill's modules) took 0.3-0.5 s on the 2-core CPU host (2026-12-02), and
    # `calib run` waits for this process to end.
    sys.stderr.flush()
    os._exit(0)
