"""The parameter catalogue: every parameter calib can measure, its unit, its meaning and the
calibration that measures it, read from the registry of calibrations (``calib.calibrations``).

Importable without numpy or anything heavy, so that ``calib query`` and ``calib.query`` can say, for
a name the profile lacks, which name was probably meant or which calibration would measure it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class ParameterInfo:
    name: str
    unit: str
    meaning: str
    calibration: str


@lru_cache(maxsize=1)
def parameters() -> dict[str, ParameterInfo]:
    """name -> ParameterInfo, in the suite's order."""
    from . import calibrations

    out = {}
    for module in calibrations.all_calibrations():
        for p in module.PARAMETERS:
            out[p.name] = ParameterInfo(p.name, p.unit, p.meaning, module.ID)
    return out


def info(name: str) -> ParameterInfo | None:
    return parameters().get(name)


def kind(name: str):
    """The kind of a parameter calib measures (``calib.profile.KINDS``: a positive rate, a time, a
    size in bytes or a count, with the range its values can physically take), derived from its
    unit; None for a name the catalogue does not know, or a unit no kind is defined for.

    The profile loader judges a record by its own unit when that is one of the catalogue's units
    (so that loading a profile need not import the registry) and asks the catalogue otherwise.
    """
    from .profile import KINDS

    found = info(name)
    return None if found is None else KINDS.get(found.unit)


def explain_missing(name: str, have=()) -> str:
    """Text to append to "no parameter NAME": the calibration that measures it when it is a catalogue
    name (the profile simply lacks it), else the closest name the profile or the catalogue knows."""
    found = info(name)
    if found is not None:
        return (f" (the {found.calibration!r} calibration measures it: "
                f"calib run --notebook {found.calibration})")
    import difflib

    known = list(dict.fromkeys([*have, *parameters()]))
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return " (not a parameter calib measures: `calib catalogue` lists them)"
