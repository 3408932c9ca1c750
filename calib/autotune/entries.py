"""Cache entries: what is kept per (family, descriptor key, device key), and when it is stale.

*Hard* device fields (name, compute capability, SM count, simulated) are in the key: one GPU's
winner says nothing about another's, so another device's entries are never looked at (Triton's
cache keys no GPU model at all). *Soft* fields (driver, CUDA runtime, CuPy, calib and library
versions, and the timing protocol) are stored with each entry: when they differ from this process's,
that entry, and only it, is *stale*, reported with the fields named, and the policy decides what to
do (``use`` with a warning, ``retune``, or ``verify``). PyTorch TunableOp instead rejects its whole
file when one validator differs, and MIOpen ignores a user database wholesale after an upgrade.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import math
import socket
from dataclasses import dataclass, field

from .._version import __version__
from ..errors import CalibError
from ..keys import canonical_json, descriptor_hash
from .decide import Timing

HARD_FIELDS = ("name", "compute_capability", "sm_count", "simulated")
# The widths of autotune_entry's text columns (calib.store.tables): PostgreSQL refuses a longer value
# mid-import, where SQLite stores it, so an entry is checked against them wherever it comes from.
FAMILY_MAX_CHARS, SOURCE_MAX_CHARS = 128, 16
SOFT_FIELDS = ("driver", "cuda_runtime", "cupy", "calib", "libraries")


def device_fields(device: dict) -> dict:
    """The hard fields of a device fingerprint (``Backend.fingerprint()[0]``), the part the key hashes."""
    out = {k: device.get(k) for k in HARD_FIELDS}
    out["simulated"] = bool(out.get("simulated"))
    if out["sm_count"] is not None:
        out["sm_count"] = int(out["sm_count"])
    if out["compute_capability"] is not None:
        out["compute_capability"] = str(out["compute_capability"])
    if out["name"] is None:
        raise ValueError(f"a device fingerprint needs at least a name: {device!r:.200}")
    return out


def device_key(device: dict) -> str:
    return descriptor_hash(device_fields(device))


def soft_fields(software: dict | None) -> dict:
    software = software or {}
    return {k: software[k] for k in SOFT_FIELDS if software.get(k) is not None}


def stale_fields(recorded_software: dict | None, recorded_protocol: dict | None, software: dict | None,
                 protocol: dict | None) -> list[str]:
    """The soft fields that differ, as ``field: recorded -> current``; a field missing on either side
    is not a difference (an older entry may not have recorded it)."""
    a, b = soft_fields(recorded_software), soft_fields(software)
    out = [f"{k}: {a[k]!r} -> {b[k]!r}" for k in SOFT_FIELDS
           if k in a and k in b and canonical_json(a[k]) != canonical_json(b[k])]
    pa, pb = dict(recorded_protocol or {}), dict(protocol or {})
    pa.pop("rule_of_decision", None)
    pb.pop("rule_of_decision", None)
    if pa and pb and canonical_json(pa) != canonical_json(pb):
        out.append(f"timing protocol: {canonical_json(pa)} -> {canonical_json(pb)}")
    return out


def provenance(**extra) -> dict:
    """Who wrote an entry, when and where."""
    try:
        who = getpass.getuser()
    except Exception:  # no user name (a container without /etc/passwd entry)
        who = None
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"who": who, "machine": socket.gethostname(), "when": when, "calib": __version__, **extra}


@dataclass
class Entry:
    """One cached problem: its candidates' timings and the winner they decided."""

    family: str
    descriptor_key: str
    device_key: str
    descriptor: str  # canonical JSON
    device: dict
    software: dict
    protocol: dict
    winner: str | None = None
    winner_time_us: float | None = None
    tied: list = field(default_factory=list)
    offered: list = field(default_factory=list)
    source: str = "tuned"
    provenance: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)  # candidate id -> Timing
    origin: str = "user"  # user (the database) | shipped (profiles/)
    id: int | None = None

    def covers(self, offered) -> bool:
        """Every offered candidate has a timing (ok, wrong, unsupported, or skipped by early stop)."""
        return all(c in self.timings for c in offered)


class CorruptEntry(CalibError, ValueError):
    """A stored entry that cannot be read back; it is reported and tuned again, alone."""


def _as_json(value, what: str):
    import json

    if isinstance(value, (bytes, bytearray)):
        value = value.decode()
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise CorruptEntry(f"{what} is not JSON ({exc})") from None
    return value


def _float_or_none(value, what: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CorruptEntry(f"{what} is {value!r:.40}, not a number")
    try:
        out = float(value)
    except OverflowError:  # an integer of 400 digits in a hand-edited or hostile file
        raise CorruptEntry(f"{what} is an integer too large for a float") from None
    if not math.isfinite(out):
        raise CorruptEntry(f"{what} is {out!r}, not a finite number")
    return out


def _count_or_none(value, what: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise CorruptEntry(f"{what} is {value!r:.40}, not a count (a whole number from 0 below 2**63)")
    return value


def timing_from_row(row: dict) -> Timing:
    """A Timing from a row (database or JSON line); CorruptEntry when it is not one."""
    from .decide import STATUSES

    cand = row.get("candidate")
    if not isinstance(cand, str) or not cand:
        raise CorruptEntry(f"a timing has no candidate ({cand!r:.40})")
    status = row.get("status")
    if status not in STATUSES:
        raise CorruptEntry(f"candidate {cand}: status {status!r:.40} is none of {', '.join(STATUSES)}")
    t = _float_or_none(row.get("time_us"), f"candidate {cand}: time_us")
    lo = _float_or_none(row.get("ci_low_us"), f"candidate {cand}: ci_low_us")
    hi = _float_or_none(row.get("ci_high_us"), f"candidate {cand}: ci_high_us")
    if status == "ok" and (t is None or not t > 0):
        raise CorruptEntry(f"candidate {cand}: status ok without a positive time ({t!r})")
    if status == "ok" and lo is not None and hi is not None and not lo <= t <= hi:
        raise CorruptEntry(f"candidate {cand}: time {t} outside its CI [{lo}, {hi}]")
    samples = row.get("samples_us")
    if isinstance(samples, list):
        samples = [_float_or_none(v, f"candidate {cand}: a sample") for v in samples]
    reason = row.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise CorruptEntry(f"candidate {cand}: reason is {type(reason).__name__}, not text")
    return Timing(cand, status, t, lo, hi, _float_or_none(row.get("se_us"), f"candidate {cand}: se_us"),
                  _count_or_none(row.get("n_samples"), f"candidate {cand}: n_samples"), reason,
                  tuple(samples) if isinstance(samples, list) else None,
                  _as_json(row.get("software"), "software"), _as_json(row.get("protocol"), "protocol"))


def entry_from_row(row: dict, timings: list[dict], *, origin: str = "user") -> Entry:
    """An Entry from an entry row and its timing rows; CorruptEntry names what is wrong."""
    import json

    descriptor = row.get("descriptor")
    if not isinstance(descriptor, str):
        raise CorruptEntry("descriptor is missing")
    try:
        parsed = json.loads(descriptor)
    except ValueError as exc:
        raise CorruptEntry(f"descriptor is not JSON ({exc})") from None
    if descriptor_hash(parsed) != row.get("descriptor_key"):
        raise CorruptEntry("descriptor does not hash to the entry's key")
    device = _as_json(row.get("device"), "device")
    software = _as_json(row.get("software"), "software")
    protocol = _as_json(row.get("protocol"), "protocol")
    for name, value in (("device", device), ("software", software), ("protocol", protocol)):
        if not isinstance(value, dict):
            raise CorruptEntry(f"{name} is {value!r:.40}, not an object")
    tied = _as_json(row.get("tied"), "tied") or []
    offered = _as_json(row.get("offered"), "offered") or []
    prov = _as_json(row.get("provenance"), "provenance") or {}
    if not isinstance(tied, list) or not isinstance(offered, list) or not isinstance(prov, dict):
        raise CorruptEntry("tied, offered or provenance has the wrong type")
    for name, names in (("tied", tied), ("offered", offered)):  # a list in there had ended `calib cache verify`
        if not all(isinstance(c, str) and c for c in names):
            raise CorruptEntry(f"{name} is not a list of candidate names ({names!r:.60})")
    family, source = row.get("family"), row.get("source") or "tuned"
    for name, value, most in (("family", family, FAMILY_MAX_CHARS), ("source", source, SOURCE_MAX_CHARS)):
        if not isinstance(value, str) or not 1 <= len(value) <= most:
            raise CorruptEntry(f"{name} {value!r:.60} is not a name of 1 to {most} characters")
    by_candidate = {}
    for t in timings:
        timing = timing_from_row(t)
        by_candidate[timing.candidate] = timing
    winner = row.get("winner")
    if winner is not None and (not isinstance(winner, str) or winner not in by_candidate):
        raise CorruptEntry(f"winner {winner!r:.60} has no timing")
    return Entry(family=family, descriptor_key=str(row["descriptor_key"]),
                 device_key=str(row.get("device_key")), descriptor=descriptor, device=device, software=software,
                 protocol=protocol, winner=winner,
                 winner_time_us=_float_or_none(row.get("winner_time_us"), "winner_time_us"), tied=tied,
                 offered=offered, source=source, provenance=prov, timings=by_candidate,
                 origin=origin, id=row.get("id"))


def timing_to_row(t: Timing, *, samples: bool = True) -> dict:
    out = {"candidate": t.candidate, "status": t.status, "reason": t.reason, "time_us": t.time_us,
           "se_us": t.se_us, "ci_low_us": t.ci_low_us, "ci_high_us": t.ci_high_us, "n_samples": t.n_samples,
           "software": t.software, "protocol": t.protocol}
    if samples:
        out["samples_us"] = list(t.samples_us) if t.samples_us is not None else None
    return out
