"""Export and import of cache entries as JSON lines: a plain, versioned text a team can ship in
``profiles/`` beside the machine profiles and merge from a colleague.

Every line is one self-contained JSON object with ``"format": "calib.autotune"`` and an integer
``"version"`` (this calib writes and reads version 1), so that one bad line is one lost entry:

- the first line is a header: who exported, when, from which machine and database;
- every other line is an entry: family, descriptor (the object and its key), device (hard fields
  and key), soft fields, timing protocol, winner, the candidates' timings with their samples, and
  provenance (who tuned it, when, on which machine; an import adds who imported it from where).

Reading reports, by line number, a line that is not JSON or not an entry, a version newer than
this calib, and an entry for another device, and keeps every other entry. Importing merges:
timings already in the database win (the user's own measurements before a colleague's), so
importing the same file twice changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .. import strict_json
from ..errors import CalibError
from ..keys import descriptor_hash
from .entries import CorruptEntry, Entry, entry_from_row, provenance, timing_to_row

FORMAT = "calib.autotune"
VERSION = 1
MAX_FILE_BYTES = 256 * 2**20  # an entry with its samples is tens of kilobytes; a file near this is not a cache


class UnreadableFile(CalibError):
    """A cache file that cannot be read at all (not a regular file, too large, not there)."""


def file_lines(path) -> list[bytes]:
    """The lines of ``path``, a regular file of at most MAX_FILE_BYTES, undecoded (each line is
    decoded on its own, so that a stray byte costs its line, not the file). Read as a profile is
    (calib.profile._read_bytes: opened without blocking, judged by what was opened, read to the
    bound): a FIFO with no writer had hung an import (and every select of a family, named like a
    shipped file), and ``/dev/zero`` had been read until memory ran out."""
    from ..profile import ProfileError, _read_bytes

    try:
        return _read_bytes(path, "autotune cache file", max_bytes=MAX_FILE_BYTES).split(b"\n")
    except ProfileError as exc:  # missing, a folder, a FIFO or device, too big, unreadable
        raise UnreadableFile(str(exc)) from None


def _unstorable(obj) -> bool:
    """Whether ``obj`` holds text no database stores: a JSON escape of a lone surrogate ("\\ud800")
    decodes to one, and the insert of its family or candidate name had ended the import in a
    UnicodeEncodeError, losing every line after it."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@dataclass
class ReadReport:
    entries: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # (line number, message)
    other_device: int = 0
    future: int = 0
    corrupt: int = 0
    header: dict | None = None


def entry_line(e: Entry, samples: dict | None = None) -> str:
    timings = []
    for t in e.timings.values():
        row = timing_to_row(t, samples=False)
        s = (samples or {}).get(t.candidate)
        row["samples_us"] = s if s is not None else (list(t.samples_us) if t.samples_us is not None else None)
        timings.append(row)
    obj = {"format": FORMAT, "version": VERSION, "kind": "entry", "family": e.family,
           "descriptor": json.loads(e.descriptor), "descriptor_key": e.descriptor_key, "device": e.device,
           "device_key": e.device_key, "software": e.software, "protocol": e.protocol, "winner": e.winner,
           "winner_time_us": e.winner_time_us, "tied": e.tied, "offered": e.offered, "source": e.source,
           "provenance": e.provenance, "timings": timings}
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def header_line(**extra) -> str:
    return json.dumps({"format": FORMAT, "version": VERSION, "kind": "header", "exported": provenance(**extra)},
                      sort_keys=True, separators=(",", ":"))


def read_lines(lines, *, source: str = "<lines>", device_key: str | None = None, family: str | None = None,
               origin: str = "user") -> ReadReport:
    """Entries from JSON lines; everything that cannot be used is a problem with its line number."""
    from .entries import device_key as key_of

    report = ReadReport()
    for number, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                report.corrupt += 1
                report.problems.append((number, f"not UTF-8 (byte {line[exc.start]:#04x} at column {exc.start + 1}); "
                                                "line skipped"))
                continue
        if not line.strip():
            continue
        try:
            obj = strict_json.loads(line)
        except RecursionError:
            report.corrupt += 1
            report.problems.append((number, "not JSON (nested deeper than any entry); line skipped"))
            continue
        except ValueError as exc:
            report.corrupt += 1
            report.problems.append((number, f"not JSON ({exc}); line skipped"))
            continue
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            report.corrupt += 1
            report.problems.append((number, f"not a {FORMAT} line; skipped"))
            continue
        if "\\u" in line and _unstorable(obj):
            report.corrupt += 1
            report.problems.append((number, "text with a lone surrogate escape (\\ud800-\\udfff), which no database "
                                            "stores; line skipped"))
            continue
        version = obj.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            report.corrupt += 1
            report.problems.append((number, f"format version {version!r:.20} is not an integer from 1; line skipped"))
            continue
        if version > VERSION:
            report.future += 1
            report.problems.append((number, f"format version {version} is newer than this calib reads ({VERSION}): "
                                            "upgrade calib to import it; line skipped"))
            continue
        if obj.get("kind") == "header":
            report.header = obj
            continue
        if family is not None and obj.get("family") != family:
            continue
        try:
            device = obj["device"]
            if not isinstance(device, dict):
                raise CorruptEntry("device is not an object")
            dev_key = key_of(device)
            if obj.get("device_key") not in (None, dev_key):
                raise CorruptEntry("device_key does not match the device")
            if device_key is not None and dev_key != device_key:
                report.other_device += 1
                report.problems.append((number, f"entry for another device ({device.get('name')}, "
                                                f"{device.get('compute_capability')}, {device.get('sm_count')} SMs); "
                                                "skipped"))
                continue
            descriptor = obj["descriptor"]
            text = json.dumps(descriptor, sort_keys=True, separators=(",", ":"), allow_nan=False)
            if obj.get("descriptor_key") not in (None, descriptor_hash(descriptor)):
                raise CorruptEntry("descriptor_key does not match the descriptor")
            timings = obj.get("timings")
            if not isinstance(timings, list) or not all(isinstance(t, dict) for t in timings):
                raise CorruptEntry("timings is not a list of objects")
            row = {**{k: obj.get(k) for k in ("family", "software", "protocol", "winner", "winner_time_us", "tied",
                                               "offered", "source", "provenance")},
                   "descriptor": text, "descriptor_key": descriptor_hash(descriptor), "device": device,
                   "device_key": dev_key}
            if not isinstance(row["family"], str) or not row["family"]:
                raise CorruptEntry("family is missing")
            report.entries.append(entry_from_row(row, timings, origin=origin))
        except (CorruptEntry, KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
            report.corrupt += 1
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            report.problems.append((number, f"corrupt entry ({what}); line skipped"))
    return report


def export(db, path, *, family: str | None = None, device_key: str | None = None) -> int:
    """Write the database's entries (with every candidate's samples) to ``path``; returns how many."""
    entries, _bad = db.read_all(family, device_key)
    lines = [header_line(database=db.url)] + [entry_line(e, db.samples(e.id)) for e in entries]
    # every line made before the file is touched, and a regular file replaced whole: an export that failed
    # half-way (a database of a newer calib, a full disk) had already emptied the file it was to replace
    text = "\n".join(lines) + "\n"
    from .. import atomic
    from ..store import StoreError

    atomic.replace(path, text.encode("utf-8"), StoreError)  # /dev/stdout, a FIFO: written as a stream
    return len(entries)


@dataclass
class ImportReport:
    read: ReadReport
    new: int = 0
    changed: int = 0
    unchanged: int = 0


def import_file(db, path, *, device_key: str | None = None) -> ImportReport:
    """Merge a file into the database: new entries and new candidates' timings are added, what is
    already there stays. ``device_key``: import only this device's entries (the others are
    reported); None imports every device's."""
    report = read_lines(file_lines(path), source=str(path), device_key=device_key)
    out = ImportReport(report)
    who = (report.header or {}).get("exported") or {}
    for e in report.entries:
        e.provenance = {**(e.provenance or {}), "imported": provenance(source=str(path), exported_by=who.get("who"),
                                                                       exported_on=who.get("machine"))}
        if e.source == "tuned":
            e.source = "imported"
        state = db.replace(e, keep_existing=True)
        setattr(out, state, getattr(out, state) + 1)
    return out
