"""Argument types for the command line: a bad value is argparse's one-line error and exit 2.

Each checks a range as well as a type, because values of the right type did the damage: a
heartbeat of 0 s spun a worker at 9x the CPU, a lease of 0 s threw 423 measurements away, a batch
of -5 claimed nothing for ever, ``nan`` and ``inf`` passed every comparison.
"""

from __future__ import annotations

import argparse
import math

from .errors import CalibError

# A job is reclaimed once its worker has been silent for the lease: it must outlast a few missed
# heartbeats (a busy database, a paused VM), or live workers lose the jobs they are measuring.
MIN_HEARTBEATS_PER_LEASE = 3
# Below this a heartbeat thread is a busy loop against the database.
MIN_HEARTBEAT_S = 0.1


def _number(text: str, kind):
    try:
        value = kind(text)
    except (TypeError, ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _at_least(kind, low, *, strict: bool = False, what: str = ""):
    def check(text: str):
        value = _number(text, kind)
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {'over' if strict else 'at least'} {low:g}{what}")
        return value

    check.__name__ = kind.__name__  # argparse names the type in its message
    return check


positive_int = _at_least(int, 1)
non_negative_int = _at_least(int, 0)
positive_float = _at_least(float, 0, strict=True)
non_negative_float = _at_least(float, 0)
finite_float = _at_least(float, -math.inf)
heartbeat_s = _at_least(float, MIN_HEARTBEAT_S, what=" s")


# Past these a worker's argument is a typo, and the database or the clock cannot hold it: a retry
# count or a session id over 2**63 overflowed SQLite's INTEGER, a lease of 1e300 s the datetime
# arithmetic, each a traceback from inside the worker loop.
MAX_RETRIES = 1000
MAX_BATCH = 10000  # jobs claimed at once: every id goes into one IN (...) of the claim
MAX_LEASE_S = 365 * 86400.0
MAX_ROW_ID = 2**63 - 1


def float_at_least(low: float, *, what: str = ""):
    """A finite number at least ``low``."""
    return _at_least(float, low, what=what)


def at_most(check, high, *, what: str = ""):
    """``check`` (one of the above), and at most ``high``: a count that would take days, or the
    memory to draw it, is a typo."""
    def bounded(text: str):
        value = check(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"{text!r}: must be at most {high:g}{what}")
        return value

    bounded.__name__ = check.__name__
    return bounded


retries = at_most(non_negative_int, MAX_RETRIES)
batch = at_most(positive_int, MAX_BATCH)
lease_s = at_most(positive_float, MAX_LEASE_S, what=" s (a year)")
row_id = at_most(positive_int, MAX_ROW_ID)


def open_fraction(text: str) -> float:
    """A probability strictly between 0 and 1 (a significance level)."""
    value = _number(text, float)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must lie between 0 and 1 (0.05 is 5%)")
    return value


open_fraction.__name__ = "float"


def jobs(text: str):
    """``auto`` or a whole number of notebooks in flight, at least 1."""
    return text if text == "auto" else positive_int(text)


class BadArgument(CalibError):
    """Arguments that each pass their own check but not together."""


def check_lease(heartbeat: float, lease_timeout: float):
    """Refuse a lease that a live worker's heartbeats cannot keep."""
    if lease_timeout < MIN_HEARTBEATS_PER_LEASE * heartbeat * (1 - 1e-9):  # 0.3 s is 3 x 0.1 s
        raise BadArgument(f"--lease-timeout-s {lease_timeout:g} must be at least {MIN_HEARTBEATS_PER_LEASE} "
                          f"heartbeats (--heartbeat-s {heartbeat:g}): a shorter lease takes jobs from live workers "
                          "and throws their measurements away")
