"""Replay a recorded evaluation: every candidate's measured time, read back from the JSON that
``calib heuristics evaluate --out`` wrote on a GPU, so that a heuristic or the predictor can be
changed and judged against real measurements on a machine without one (as Kernel Tuner's
simulation mode replays its cache files).

``calib heuristics evaluate --kind K --backend replay:FILE.json`` (or a gzip-compressed FILE.json.gz,
as bench/results stores them) evaluates the current heuristic, baseline and predictor on the file's
problems; a choice that was not among the recorded candidates cannot be timed and counts as failed
(the report says how many), and a problem that failed on the GPU stays a failed problem. The numbers
are the recorded device's, with its fingerprint; the output says it is a replay.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import strict_json
from .._lazy import lazy
from ..backends.base import UnsupportedConfig
from ..errors import CalibError

np = lazy("numpy")

PREFIX = "replay:"
FORMAT, VERSION = "calib.heuristics.evaluation", 1


class ReplayError(CalibError, ValueError):
    pass


def load(path, kind: str) -> dict:
    """The recorded evaluation at ``path``, checked field by field for what a replay needs."""
    from .registry import read_text

    p = Path(path)
    text = read_text(p, "recorded evaluation", ReplayError)
    try:
        # a key twice in one object (two times for one candidate, two descriptors for one row) is refused:
        # json keeps the last in silence, and which time the replay then ranks is an accident of the file
        rec = strict_json.loads(text, object_pairs_hook=strict_json.unique_keys)
    except json.JSONDecodeError as exc:
        raise ReplayError(f"recorded evaluation {p} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ReplayError(f"recorded evaluation {p} nests deeper than any evaluation does") from None
    except ValueError as exc:  # a number of more digits than Python converts, NaN, Infinity, 1e400, a key twice
        raise ReplayError(f"recorded evaluation {p} cannot be read as JSON ({str(exc)[:120]})") from None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise ReplayError(f"{p} is not a calib heuristics evaluation (format {FORMAT!r})")
    if isinstance(rec.get("version"), bool) or not isinstance(rec.get("version"), int) or rec["version"] > VERSION:
        raise ReplayError(f"{p} has version {rec.get('version')!r}; this calib reads up to {VERSION}")
    if rec.get("kind") != kind:
        raise ReplayError(f"{p} records {rec.get('kind')!r} problems, not {kind!r}")
    for name in ("device", "software"):
        if not isinstance(rec.get(name), dict):
            raise ReplayError(f"{p} has no {name} fingerprint (an object): which GPU's times these are is unknown")
    if not isinstance(rec["device"].get("name"), str) or not rec["device"]["name"].strip():
        raise ReplayError(f"{p}: its device fingerprint has no name: which GPU's times these are is unknown")
    _check_sm_count(p, rec["device"].get("sm_count"))
    rows = rec.get("rows")
    if not isinstance(rows, list):
        raise ReplayError(f"{p} has no rows")
    usable = [r for r in rows if isinstance(r, dict) and isinstance(r.get("times_us"), dict) and r["times_us"]
              and isinstance(r.get("descriptor"), dict)]
    rec["failed_rows"] = [r for r in rows
                          if isinstance(r, dict) and "error" in r and isinstance(r.get("descriptor"), dict)]
    if not usable:
        raise ReplayError(f"{p} holds no row with every candidate's time (times_us): it was written before "
                          "calib recorded them; evaluate on the GPU again")
    for r in usable:
        bad = [c for c, t in r["times_us"].items() if _time_us(t) is None]
        if bad:
            raise ReplayError(f"{p}: problem {r['descriptor']} has times that are not positive numbers for {bad[:3]}")
    rec["rows"] = usable
    return rec


def _time_us(t) -> float | None:
    """A recorded time as a float, or None where it is no positive finite number: an integer of 400
    digits, which float() cannot take, had ended the replay in an OverflowError."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return None
    try:
        t = float(t)
    except OverflowError:
        return None
    return t if math.isfinite(t) and t > 0 else None


def _check_sm_count(p: Path, sm_count):
    """The recorded device's SM count: absent, or a whole number of SMs. "x", a list or NaN there ended
    the replay in a traceback from the tuning cache's device key, and 1.5 was taken as 1."""
    from .knobs import MAX_COUNT

    if sm_count is None:
        return
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or not 1 <= sm_count <= MAX_COUNT:
        raise ReplayError(f"{p}: its device fingerprint's sm_count is {json.dumps(sm_count)[:40]}; an SM count "
                          "is a whole number, 1 or more")


class ReplayCase:
    """``check``, ``time`` and ``library`` for one recorded problem."""

    def __init__(self, row: dict, simulated: bool = False):
        self.row = row
        self.times = row["times_us"]
        self.simulated = simulated

    def _time(self, k) -> float:
        cid = getattr(k, "autotune_name", None) or str(k)
        t = self.times.get(cid)
        if t is None:
            raise UnsupportedConfig(f"{cid} was not among the recorded candidates")
        return float(t)

    def check(self, k):
        self._time(k)
        return True

    def time(self, k):
        return _measurement(self._time(k), self.simulated)

    def library(self):
        t = _time_us(self.row.get("library_us"))
        if t is None:
            raise ReplayError(f"problem {self.row['descriptor']} has no recorded library time")
        return _measurement(t, self.simulated)

    def free(self):
        pass


def _measurement(t_us: float, simulated: bool = False):
    from ..timing import Measurement

    return Measurement(np.array([t_us]), stop_reason="replay", protocol={"timer": "replayed"}, simulated=simulated)
