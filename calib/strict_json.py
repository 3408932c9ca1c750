"""JSON as calib's own files hold it: numbers finite. Python's json reads NaN, Infinity and -Infinity
(no JSON number) and reads 1e400 as infinity; a value so read and stored passed every later check that
forgot it, and ended a later strict dump (an export, an evaluation's --json) in a ValueError. Every file
calib writes is strict JSON (``allow_nan=False``), so a reader of those files refuses them up front."""

from __future__ import annotations

import json
import math

from .errors import CalibError


def no_constant(token: str):
    """json's ``parse_constant``: NaN, Infinity and -Infinity are refused (ValueError)."""
    raise ValueError(f"{token} is not a number JSON allows")


def finite_float(text: str) -> float:
    """json's ``parse_float``: a number past a float's range (1e400) is refused, not read as infinity."""
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"the number {text[:40]} is beyond a float's range")
    return v


def loads(text, **kwargs):
    """:func:`json.loads` refusing NaN, Infinity and numbers past a float's range (ValueError)."""
    return json.loads(text, parse_constant=no_constant, parse_float=finite_float, **kwargs)


def finite(value) -> bool:
    """Whether a JSON number is finite; an integer of 400 digits is valid JSON, and math.isfinite raises
    OverflowError on it (False here)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class DuplicateKeyError(CalibError, ValueError):
    """A JSON object that names one key twice (json.loads keeps the last in silence)."""


def unique_keys(pairs) -> dict:
    """``object_pairs_hook`` for json.loads: the object, or DuplicateKeyError naming the key written
    twice (``{"n": 1, "n": 2}`` was the problem n = 2, and ``{"vec": 4, "vec": 8}`` an override of 8)."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        shown = json.dumps(twice if len(twice) <= 40 else twice[:20] + "...")
        raise DuplicateKeyError(f"key {shown} appears twice in one object")
    return out
