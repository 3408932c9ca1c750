"""Where a notebook's time goes: its phases, recorded as it runs, and the run's table of them.

A notebook of ``calib run`` passes through these phases, in this order:

- ``start``: from ``calib run`` launching the notebook's process to calib's first import in its
  kernel (the process, papermill, the Jupyter kernel, the parameters cell);
- ``setup``: from that import to a ready :class:`calib.calibration.Calibration` (imports, the
  backend, the results store and its session; the fragment's ``timeline.setup_parts_s`` has these
  parts: ``imports``, ``backend``, ``fingerprint``, ``store``);
- ``compile``: the backend's ``prepare`` before the GPU is taken (a compile-only calibration's
  whole collection counts here: compiling is what it does);
- ``wait``: waiting for its turn (``calib.runner.Turns``) and for the GPU lock;
- ``measure``: the sweep, and the rest of ``Calibration.measure``;
- ``fit``, ``plot`` (figures saved and shown), ``write`` (the fragment).

``other`` is the notebook's wall time less its phases: cells between them, papermill writing the
executed notebook, its kernel killed and its process ended. :class:`PhaseRecorder` keeps the spans
without overlap: a phase entered inside another (compile inside measure) pauses the outer one, so the
phases add up to no more than the wall time. Times are seconds since the launch (wall clock across
processes, ``time.time``; monotonic within one). A notebook run by hand has no launch: its spans
count from calib's import, and it has no ``start``.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager

# Set by `calib run` for each notebook process it starts: the wall-clock time (time.time()) of the launch.
LAUNCHED_AT_ENV = "CALIB_LAUNCHED_AT"
PHASES = ("start", "setup", "compile", "wait", "measure", "fit", "plot", "write")
COLUMNS = PHASES + ("other",)
# Phases in the order a notebook passes through them; those within one group interleave.
ORDER = (("start",), ("setup",), ("compile", "wait", "measure"), ("fit",), ("plot",), ("write",))


def launched_at_from_env() -> float | None:
    try:
        value = float(os.environ.get(LAUNCHED_AT_ENV, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


class PhaseRecorder:
    """The phases of one notebook. ``imported_at``: when calib was first imported (wall clock);
    ``launched_at``: when ``calib run`` launched the process (default: from the environment)."""

    def __init__(self, *, imported_at: float | None = None, launched_at: float | None = None,
                 setup_parts: dict | None = None):
        self.setup_parts = dict(setup_parts or {})  # seconds per part of the setup phase, as measured
        self.launched_at = launched_at if launched_at is not None else launched_at_from_env()
        now = time.time()
        self._offset = now - time.monotonic()  # wall clock = monotonic + offset, fixed once
        imported_at = imported_at if imported_at is not None and imported_at <= now else now
        if self.launched_at is not None and self.launched_at > imported_at:
            self.launched_at = None  # a launch after this process began is not this process's launch
        self.origin = self.launched_at if self.launched_at is not None else imported_at
        self.spans: list[list] = []
        self._stack: list[list] = []
        if self.launched_at is not None:
            self._add("start", 0.0, imported_at - self.origin)
        self._add("setup", imported_at - self.origin, self.now())

    def now(self) -> float:
        """Seconds since the origin (the launch, else calib's import)."""
        return time.monotonic() + self._offset - self.origin

    def _add(self, name: str, t0: float, t1: float):
        if t1 > t0:
            self.spans.append([name, round(t0, 4), round(t1, 4)])

    @contextmanager
    def phase(self, name: str):
        """Time the block as ``name``; an enclosing phase is paused meanwhile."""
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}: one of {', '.join(PHASES)}")
        t = self.now()
        if self._stack:
            outer = self._stack[-1]
            self._add(outer[0], outer[1], t)
        self._stack.append([name, t])
        try:
            yield
        finally:
            t = self.now()
            inner = self._stack.pop()
            self._add(inner[0], inner[1], t)
            if self._stack:
                self._stack[-1][1] = t

    def snapshot(self) -> list[list]:
        """The spans so far, those still open closed now (for a fragment written inside ``write``)."""
        t = self.now()
        return self.spans + [[name, round(t0, 4), round(t, 4)] for name, t0 in self._stack if t > t0]

    def timings_s(self) -> dict:
        return durations(self.snapshot())

    def document(self) -> dict:
        """What a fragment keeps: ``timings_s`` and ``timeline`` (see :func:`fragment_fields`)."""
        spans = self.snapshot()
        timeline = {"origin": "launch" if self.launched_at is not None else "import",
                    "launched_at": self.launched_at, "spans": spans}
        if self.setup_parts:
            timeline["setup_parts_s"] = self.setup_parts
        return {"timings_s": durations(spans), "timeline": timeline}


def durations(spans) -> dict:
    """Seconds per phase, in phase order, of the phases that occur."""
    out: dict = {}
    for name, t0, t1 in spans:
        out[name] = out.get(name, 0.0) + (t1 - t0)
    return {name: round(out[name], 3) for name in PHASES if name in out}


def check_fragment_fields(doc: dict) -> str | None:
    """What is wrong with a fragment's ``timings_s`` and ``timeline``, or None (both may be absent:
    fragments written before phases were recorded have neither)."""
    timings = doc.get("timings_s")
    if timings is not None:
        if not isinstance(timings, dict):
            return f"'timings_s' must be an object, not {type(timings).__name__}"
        for name, value in timings.items():
            if not _seconds(value):
                return f"'timings_s'.{name} must be a non-negative number of seconds, not {value!r}"
    timeline = doc.get("timeline")
    if timeline is not None:
        if not isinstance(timeline, dict):
            return f"'timeline' must be an object, not {type(timeline).__name__}"
        launched = timeline.get("launched_at")
        if launched is not None and not _seconds(launched):
            return f"'timeline'.launched_at must be a time in seconds, not {launched!r}"
        parts = timeline.get("setup_parts_s", {})
        if not isinstance(parts, dict) or not all(isinstance(k, str) and _seconds(v) for k, v in parts.items()):
            return "'timeline'.setup_parts_s must map a part of the setup to its seconds"
        spans = timeline.get("spans", [])
        if not isinstance(spans, list) or not all(
                isinstance(s, list) and len(s) == 3 and isinstance(s[0], str) and _number(s[1]) and _number(s[2])
                and s[1] <= s[2] for s in spans):
            return "'timeline'.spans must be a list of [phase, start s, end s]"
    return None


def _number(v) -> bool:
    """A finite number a float can hold: an integer of 400 digits is valid JSON, and
    ``math.isfinite`` raises OverflowError on it (a fragment or run index from a hand edit)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _seconds(v) -> bool:
    return _number(v) and v >= 0


# --- the run's view: a row per notebook, and the critical path ---------------------------------------------------

def notebook_timing(fragment: dict | None, wall_s: float | None, *, run_started_at: float) -> dict:
    """The run index's timing fields for a notebook launched in this run: ``timings_s`` (with
    ``other``), ``started_s`` and ``finished_s`` (seconds since the run started), and ``spans``
    (seconds since the run started; the runner's own use). Empty for a fragment of an earlier run
    or without phases."""
    timeline = (fragment or {}).get("timeline") or {}
    launched = timeline.get("launched_at")
    if not _number(launched) or launched < run_started_at or not _number(wall_s):
        return {}
    timings = dict((fragment or {}).get("timings_s") or {})
    timings["other"] = round(max(0.0, wall_s - sum(timings.values())), 3)
    started = launched - run_started_at
    return {"timings_s": timings, "started_s": round(started, 3), "finished_s": round(started + wall_s, 3),
            "spans": [[name, round(started + t0, 3), round(started + t1, 3)] for name, t0, t1 in timeline.get("spans")
                      or []]}


def critical_path(timing: dict) -> dict | None:
    """Which notebook finished last, and what it waited for: a slot (started only when another
    notebook ended), its turn on the GPU (while others measured), and its longest phase.
    ``timing``: notebook -> :func:`notebook_timing`'s fields."""
    done = {nb: t for nb, t in timing.items() if t.get("finished_s") is not None}
    if not done:
        return None
    last = max(done, key=lambda nb: done[nb]["finished_s"])
    t = done[last]
    before = [nb for nb, o in done.items() if nb != last and o["finished_s"] <= t["started_s"] + 0.5]
    slot_after = max(before, key=lambda nb: done[nb]["finished_s"]) if before and t["started_s"] > 0.5 else None
    waits = [(a, b) for name, a, b in t.get("spans", []) if name == "wait"]
    held = sorted({nb for nb, o in done.items() if nb != last for name, a, b in o.get("spans", [])
                   if name in ("measure", "compile") and any(a < wb and b > wa for wa, wb in waits)})
    phases = {k: v for k, v in t["timings_s"].items() if k != "other"}
    longest = max(phases, key=phases.get) if phases else None
    return {"notebook": last, "finished_s": t["finished_s"], "started_s": t["started_s"], "slot_after": slot_after,
            "wait_s": t["timings_s"].get("wait", 0.0), "waited_while": held,
            "longest_phase": [longest, phases[longest]] if longest else None}


def describe_critical_path(path: dict | None) -> str:
    if not isinstance(path, dict) or not isinstance(path.get("notebook"), str):
        return ""

    def s(v):
        return f"{v:.1f} s" if _number(v) else "?"

    parts = [f"critical path: {path['notebook']} finished last, {s(path.get('finished_s'))} into the run"]
    started = path.get("started_s")
    if _number(started) and started > 0.5:
        after = path.get("slot_after")
        parts.append(f"it waited {s(started)} for a free slot"
                     + (f" (until {after} finished)" if isinstance(after, str) else ""))
    wait = path.get("wait_s")
    if _number(wait) and wait >= 0.05:
        held = [x for x in path.get("waited_while") or [] if isinstance(x, str)]
        parts.append(f"it waited {s(wait)} for its turn on the GPU"
                     + (f" while {', '.join(held)} measured or compiled" if held else ""))
    longest = path.get("longest_phase")
    if isinstance(longest, list) and len(longest) == 2 and isinstance(longest[0], str):
        parts.append(f"its longest phase was {longest[0]} ({s(longest[1])})")
    return "; ".join(parts)


def table_rows(notebooks) -> list[list[str]]:
    """Header and rows (notebook, wall, a column per phase, other) of a run index's notebooks;
    a notebook without phases (an older run, a failure) has its wall time only."""
    rows = [["notebook", "wall"] + list(COLUMNS)]
    for nb in notebooks or []:
        if not isinstance(nb, dict):
            continue
        timings = nb.get("timings_s") if isinstance(nb.get("timings_s"), dict) else {}
        cells = [str(nb.get("calibration", "?")), _cell(nb.get("wall_s"))]
        cells += [_cell(timings.get(c)) if timings else "" for c in COLUMNS]
        rows.append(cells)
    return rows


def _cell(v) -> str:
    return f"{v:.1f}" if _number(v) else ("" if v is None else str(v))


def format_table(notebooks, path: dict | None = None, *, markdown: bool = False) -> str:
    """The phase table as text (aligned columns, seconds) or as a markdown table, then the
    critical path."""
    rows = table_rows(notebooks)
    if len(rows) == 1:
        return ""
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|---|" + "---:|" * (len(rows[0]) - 1)]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in rows]
    text = describe_critical_path(path)
    return "\n".join(lines + ([""] + [text] if text else []))
