"""The run folder's layout, and reading one back.

``calib run`` writes::

    <run folder>/
      report.html          the run for people: parameters, fits, residuals, fingerprint, protocol
      profile.json         this run's profile: the merged fragments of this run (not the shared profile)
      run.json             the index: notebooks (folder, executed notebook, fragment, figures, wall
                           time, its phases in ``timings_s`` (calib.phases), status), the run's critical
                           path, and every parameter with its value, CI, unit, n and flags
      results.sqlite       every sample of every sweep point (the run's sessions; resumed with --run-dir)
      <calibration>/       one folder per calibration of the suite, named by its id:
        <calibration>.ipynb       the executed notebook, with its outputs
        <calibration>.parquet     the tidy frame the fit read
        fragment-<calibration>.json   the parameters it fitted, with the fingerprint
        *.png                     its figures (fit lines, residuals)

Folders written before this layout had everything flat in the run folder; they are still read
(``fragment_path``, ``RunFolder``), and resuming one writes the new layout beside the old files.
A notebook run by hand in JupyterLab writes the same per-calibration files to
``<user data dir>/calib/interactive/<calibration>/`` (``calib.calibration.interactive_dir``).
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import CalibError

REPORT, PROFILE, INDEX, DATABASE = "report.html", "profile.json", "run.json", "results.sqlite"
FRAGMENT_GLOB = "fragment-*.json"


class RunFolderError(CalibError, ValueError):
    """A path that is not a run folder calib can read."""


def calibration_dir(run_dir, calibration: str) -> Path:
    return Path(run_dir) / calibration


def notebook_path(run_dir, calibration: str) -> Path:
    return calibration_dir(run_dir, calibration) / f"{calibration}.ipynb"


def fragment_path(run_dir, calibration: str) -> Path:
    """Where the calibration's fragment is: its folder, else (a run folder of the flat layout) the
    run folder itself."""
    new = calibration_dir(run_dir, calibration) / f"fragment-{calibration}.json"
    old = Path(run_dir) / f"fragment-{calibration}.json"
    return old if not new.exists() and old.exists() else new


def is_run_folder(path) -> bool:
    path = Path(path)
    return path.is_dir() and ((path / INDEX).is_file() or (path / PROFILE).is_file() or
                              any(path.glob(FRAGMENT_GLOB)) or any(path.glob(f"*/{FRAGMENT_GLOB}")))


def figures_of(folder: Path, calibration: str) -> list[Path]:
    """The calibration's PNGs in reading order: its overview (``<id>.png``), then fit lines, then
    residuals, then the rest. ``folder`` is its own folder (or, flat layout, the run folder, where
    figures of several calibrations lie together: the caller filters)."""
    def rank(p: Path):
        stem = p.stem
        return (0 if stem == calibration else 1 if stem.startswith("line-") else 2 if stem.startswith("residuals-")
                else 3, stem)

    return sorted(folder.glob("*.png"), key=rank)


def write_index(run_dir: Path, summary: dict, fragments: dict, *, device: dict, software: dict) -> dict:
    """``profile.json`` (this run's merged fragments) and ``run.json`` (the index), in the run folder.
    ``fragments``: calibration id -> its fragment document. Returns the index written."""
    from . import atomic
    from .profile import write_profile
    from .timestamps import utc_now

    # A run that resumes part of a folder (``--notebook X``) keeps the rest of the folder in its
    # index and snapshot: the fragments already there, and the earlier index's entries.
    previous = {}
    try:
        old = json.loads((run_dir / INDEX).read_text())
        previous = {nb["calibration"]: nb for nb in old.get("notebooks", []) if isinstance(nb, dict)}
        summary = {**summary, "notebooks": list(summary.get("notebooks", [])) +
                   [nb for nb in previous if nb not in summary.get("notebooks", [])]}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    try:
        fragments = {**RunFolder(run_dir).fragments, **fragments}
    except CalibError:
        pass
    params = {}
    for frag in fragments.values():
        params.update(frag.get("params") or {})
    write_profile(run_dir / PROFILE, {"schema": "calib.profile/1", "device": device, "software": software,
                                      "created": utc_now(), "params": params})
    (run_dir / f"{PROFILE}.lock").unlink(missing_ok=True)  # the snapshot's own lock: nobody else writes it
    failed = dict(summary.get("failed") or [])
    # each notebook's phases (calib.phases): this run's, or, for a notebook it did not run, the earlier index's
    summary = dict(summary)
    timing = summary.pop("notebook_timing", None) or {}
    ran = summary.get("notebook_wall_s") or {}
    notebooks = []
    for nb in summary.get("notebooks", []):
        folder = calibration_dir(run_dir, nb)
        frag = fragments.get(nb) or {}
        notebooks.append({
            "calibration": nb, "folder": nb, "notebook": _rel(notebook_path(run_dir, nb), run_dir),
            "fragment": _rel(fragment_path(run_dir, nb), run_dir) if nb in fragments else None,
            "figures": [_rel(p, run_dir) for p in figures_of(folder, nb)] if folder.is_dir() else [],
            "wall_s": (summary.get("notebook_wall_s") or {}).get(nb, (previous.get(nb) or {}).get("wall_s")),
            "status": "failed" if nb in failed else (previous.get(nb) or {}).get("status", "ok"),
            "error": failed.get(nb, (previous.get(nb) or {}).get("error") if nb not in fragments else None),
            "parameters": sorted(frag.get("params") or {}), "not_fitted": dict(frag.get("failures") or {}),
            **{k: (timing.get(nb) or {}).get(k) if nb in ran else (previous.get(nb) or {}).get(k)
               for k in ("timings_s", "started_s", "finished_s")}})
    index = {**summary, "layout": 2, "report": REPORT, "run_profile": PROFILE, "notebooks": notebooks,
             "parameters": {name: {k: rec.get(k) for k in ("value", "ci95", "unit", "n", "flags")}
                            for name, rec in sorted(params.items())}}
    # replaced whole: a run killed while writing it left a truncated index, which the report refused
    # and a resume read as no index at all, dropping the other notebooks' entries
    atomic.replace(run_dir / INDEX, (json.dumps(index, indent=2) + "\n").encode("utf-8"), RunFolderError, streams=False)
    return index


def _checked_index(doc: dict, p: Path) -> dict:
    """The index with the shapes its readers rely on, or a RunFolderError naming the field: a
    hand-edited or truncated ``run.json`` must give ``calib show``/``calib report`` a one-line
    refusal, not a traceback."""
    notebooks = doc.get("notebooks", [])
    if not isinstance(notebooks, list) or not all(isinstance(nb, (dict, str)) for nb in notebooks):
        raise RunFolderError(f"{p}: 'notebooks' must be a list of objects")  # null too: readers iterate it
    failed = doc.get("failed")
    if failed is not None and (not isinstance(failed, list) or not all(
            isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) for f in failed)):
        raise RunFolderError(f"{p}: 'failed' must be a list of [notebook, reason] pairs")
    huge = _number_too_large(doc)
    if huge:
        raise RunFolderError(f"{p}: {huge}")
    return doc


def _number_too_large(doc) -> str | None:
    """Where the index holds an integer no float can hold (valid JSON, a hand edit or a corrupted
    digit run): the report formats every time as a float, and ``f"{10**400:.1f}"`` raises."""
    stack = [("", doc)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
            try:
                float(value)
            except OverflowError:
                return f"{where or 'a value'} is an integer of {value.bit_length()} bits, too large for a number"
        if isinstance(value, dict):
            stack += [(f"{where}.{k}" if where else repr(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    return None


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


class RunFolder:
    """A run folder read back: its index, fragments, profile snapshot and figures, for ``calib
    report`` and ``calib show RUN_DIR``. Reads both layouts."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise RunFolderError(f"{self.path} is not a folder")
        if not is_run_folder(self.path):
            raise RunFolderError(f"{self.path} is not a calib run folder: it has no {INDEX}, no {PROFILE} and no "
                                 "fragments")
        self.index = self._read_index()
        self.fragments = self._read_fragments()

    def _read_index(self) -> dict:
        p = self.path / INDEX
        if not p.is_file():
            return {}
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or bad UTF-8
            raise RunFolderError(f"{p} cannot be read: {exc}") from None
        if not isinstance(doc, dict):
            raise RunFolderError(f"{p} must hold a JSON object, not {type(doc).__name__}")
        return _checked_index(doc, p)

    def _read_fragments(self) -> dict:
        from . import calibrations
        from .calibration import read_fragment

        found = {}
        paths = sorted(self.path.glob(f"*/{FRAGMENT_GLOB}")) + sorted(self.path.glob(FRAGMENT_GLOB))
        for p in paths:
            cal = p.stem[len("fragment-"):]
            if cal not in found:
                found[cal] = read_fragment(p)
        order = {cid: i for i, cid in enumerate(calibrations.IDS)}
        return dict(sorted(found.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))

    @property
    def calibrations(self) -> list[str]:
        names = list(self.fragments)
        for nb in self.index.get("notebooks", []):
            cal = nb.get("calibration") if isinstance(nb, dict) else nb
            if isinstance(cal, str) and cal not in names:
                names.append(cal)
        return names

    def folder_of(self, calibration: str) -> Path:
        own = calibration_dir(self.path, calibration)
        return own if own.is_dir() else self.path

    def figures(self, calibration: str, parameters) -> list[Path]:
        """The calibration's figures; in a flat folder, only those named for it or its parameters."""
        folder = self.folder_of(calibration)
        figs = figures_of(folder, calibration)
        if folder != self.path:
            return figs
        slugs = {name.replace(".", "_") for name in parameters}
        mine = {calibration} | {f"{kind}-{s}" for s in slugs for kind in ("line", "residuals")}
        if calibration == "memory_bandwidth":
            mine.add("residuals-by-width")
        return [p for p in figs if p.stem in mine]

    def profile(self):
        """This run's profile: the snapshot the run wrote, or (a folder from before snapshots, or a
        run that did not finish) one merged from its fragments, read without device checks."""
        from .profile import Profile, read_profile

        snap = self.path / PROFILE
        if snap.is_file():
            return read_profile(snap)
        if not self.fragments:
            raise RunFolderError(f"{self.path} has neither {PROFILE} nor fragments")
        first = next(iter(self.fragments.values()))
        params = {}
        for frag in self.fragments.values():
            params.update(frag.get("params") or {})
        return Profile(params, device=first.get("device"), software=first.get("software"),
                       created=first.get("created"), path=self.path, origin="run folder, merged fragments")

    @property
    def simulated(self) -> bool:
        return bool(self.index.get("simulated")) or any(f.get("simulated") for f in self.fragments.values())
