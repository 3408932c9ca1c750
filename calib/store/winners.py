"""Winners: the fastest perf-config per (session, config), and the TSV tuning tables built on it.

The ``winner`` view (migration 0002) ranks every result of a (session, config) by kernel time.
The TSV has one winner per line, keyed by architecture and SM count like rocMLIR's tuning tables,
so a library can ship it and look perf-configs up without a database; importing it back records
each line as an ``imported`` result in a session for that architecture.

Both directions are all-or-nothing. Export writes a temporary file beside the target, fsyncs it and
renames it over the target, so a full disk or a killed process leaves the previous TSV as it was.
Import checks the whole file before it writes anything, then writes every line in one
transaction; an imported row is identified by its content (device, architecture, SM count, config,
perf-config and time), so importing a file again, or a line twice, adds nothing.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import socket
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ..errors import CalibError
from ..keys import canonical_json
from ..strict_json import DuplicateKeyError, unique_keys
from .core import Store, StoreError, _describe
from .tables import ResultRow, SessionRow

TSV_HEADER = ["arch", "sm_count", "device", "config", "perf_config", "kernel_time_us"]
TSV_VERSION = 1
TSV_MAGIC = f"# calib winners v{TSV_VERSION}"
MAX_TSV_BYTES = 256 * 2**20  # a tuning table is kilobytes; anything near this is not one
# Column widths of the session and config tables (tables.py): a longer value would fail mid-import.
_WIDTHS = {"arch": 32, "device": 128}


def winners(store: Store, session_id: int | None = None):
    """One row per (session, config): the fastest perf-config and its time."""
    import pandas as pd

    sql = ("SELECT w.session_id, s.arch, s.sm_count, s.device_name, c.descriptor, w.perf_config, w.kernel_time_us, "
           "w.result_id FROM winner w JOIN session s ON s.id = w.session_id JOIN config c ON c.id = w.config_id")
    params = {}
    if session_id is not None:
        sql += " WHERE w.session_id = :sid"
        params["sid"] = session_id
    sql += " ORDER BY w.session_id, c.id"
    with store.engine.connect() as conn:
        rows = conn.execute(text(sql), params).all()
    return pd.DataFrame(rows, columns=["session_id", "arch", "sm_count", "device", "config", "perf_config",
                                       "kernel_time_us", "result_id"])


def export_tsv(store: Store, path, session_id: int | None = None) -> int:
    """Write the winners as a TSV, atomically: the target is either the old file or the new one.
    One line per key of the table (architecture, SM count, device, config): where several sessions
    tuned a config (a rerun, an imported table), the fastest of their winners. One line per
    session's winner had given a library two answers for one lookup."""
    frame = winners(store, session_id)
    key = ["arch", "sm_count", "device", "config"]
    frame = (frame.sort_values(["kernel_time_us", "session_id"], kind="mergesort")
             .drop_duplicates(key, keep="first").sort_values(["session_id", "result_id"], kind="mergesort"))
    buf = io.StringIO(newline="")
    buf.write(TSV_MAGIC + "\n")
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(TSV_HEADER)
    for r in frame.itertuples():
        w.writerow([r.arch, r.sm_count, r.device, r.config, r.perf_config, repr(float(r.kernel_time_us))])
    _replace_atomically(Path(path), buf.getvalue().encode())
    return len(frame)


def _replace_atomically(path: Path, data: bytes):
    """The target replaced whole (calib.atomic); StoreError names why not."""
    from .. import atomic

    atomic.replace(path, data, StoreError)


def read_tsv(path) -> list[tuple]:
    """Every line of a winners TSV, checked: (arch, sm_count, device, descriptor, perf_config,
    time_us). The first fault raises a StoreError naming the file, the line and the problem."""
    path = Path(path)
    try:
        if not path.is_file():
            raise StoreError(f"{path}: not a file" if path.exists() else f"{path}: no such file")
        if path.stat().st_size > MAX_TSV_BYTES:
            raise StoreError(f"{path}: {path.stat().st_size:,} bytes, more than a winners file can be "
                             f"({MAX_TSV_BYTES:,})")
        raw = path.read_bytes()
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    texts = []
    for lineno, line in enumerate(lines, start=1):
        try:
            texts.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as exc:
            raise StoreError(f"{path}, line {lineno}: not UTF-8 (byte {line[exc.start]:#04x} at column "
                             f"{exc.start + 1})") from None
    if not texts:
        raise StoreError(f"{path}: empty; a winners file starts with {TSV_MAGIC!r}")
    first = texts[0].lstrip("\ufeff").strip()  # a byte-order mark (Windows editors) is not part of line 1
    version = re.fullmatch(r"# calib winners v(\d+)", first)
    if version and _newer(version.group(1)):
        raise StoreError(f"{path}, line 1: winners format v{version.group(1)[:12]}, written by a newer calib (this one "
                         f"reads v{TSV_VERSION}): upgrade calib")
    if first != TSV_MAGIC:
        raise StoreError(f"{path}, line 1: not a calib winners file (the first line must be {TSV_MAGIC!r})")
    if len(texts) < 2 or texts[1].split("\t") != TSV_HEADER:
        got = texts[1].split("\t") if len(texts) > 1 else "nothing"
        raise StoreError(f"{path}, line 2: expected the columns {TSV_HEADER}, got {got}")
    parsed = []
    for lineno, line in enumerate(texts[2:], start=3):
        if not line.strip():
            continue
        try:
            fields = next(csv.reader([line], delimiter="\t"))
            parsed.append(_parse_line(fields))
        except (StoreError, csv.Error) as exc:
            raise StoreError(f"{path}, line {lineno}: {exc}") from None
    return parsed


def _newer(digits: str) -> bool:
    """Whether the format version ``digits`` is newer than this calib reads; a version of thousands
    of digits is newer, not int()'s ValueError (over 4300 digits), a traceback."""
    digits = digits.lstrip("0") or "0"
    return len(digits) > 9 or int(digits) > TSV_VERSION


def _parse_line(fields: list[str]) -> tuple:
    if len(fields) != len(TSV_HEADER):
        raise StoreError(f"{len(fields)} fields, expected {len(TSV_HEADER)} ({', '.join(TSV_HEADER)})")
    arch, sm, device, config, perf, t = fields
    for name, value in (("arch", arch), ("device", device)):
        if not value.strip():
            raise StoreError(f"the {name} is empty")
        if len(value) > _WIDTHS[name]:
            raise StoreError(f"the {name} is {len(value)} characters long, at most {_WIDTHS[name]}")
    try:
        sm_count = int(sm)
    except ValueError:
        raise StoreError(f"sm_count {sm!r} is not an integer") from None
    if not 0 < sm_count < 2**31:
        raise StoreError(f"sm_count {sm_count} is not a positive 32-bit integer")
    try:
        t_us = float(t)
    except ValueError:
        raise StoreError(f"kernel_time_us {t!r} is not a number") from None
    if not math.isfinite(t_us) or t_us <= 0:
        raise StoreError(f"kernel_time_us {t!r} is not a positive finite time")
    out = []
    for name, value in (("config", config), ("perf_config", perf)):
        try:
            obj = json.loads(value, object_pairs_hook=unique_keys)  # a key twice: the second was kept in silence
        except DuplicateKeyError as exc:
            raise StoreError(f"the {name}: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise StoreError(f"the {name} is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise StoreError(f"the {name} is a JSON {type(obj).__name__}, expected an object")
        try:
            canonical_json(obj)  # NaN, infinities, over-deep nesting: refused here, not mid-transaction
        except (CalibError, ValueError, TypeError, RecursionError) as exc:
            raise StoreError(f"the {name}: {exc}") from None
        out.append(obj)
    descriptor, perf_config = out
    calibration = str(descriptor.get("calibration", ""))
    if len(calibration) > 64:
        raise StoreError("the config's calibration name is longer than 64 characters")
    try:  # a JSON escape of a lone surrogate ("\ud800") decodes to text no database stores
        calibration.encode("utf-8")
    except UnicodeEncodeError:
        raise StoreError(f"the config's calibration name {calibration!r:.80} cannot be stored as UTF-8 (a lone "
                         "surrogate escape)") from None
    return arch, sm_count, device, descriptor, perf_config, t_us


def import_tsv(store: Store, path) -> int:
    """Record each line of a winners TSV as an imported result, all or none; returns how many
    rows were new. A line already in the database (same device, architecture, SM count, config,
    perf-config and time, in any imported session) is not added again."""
    path = Path(path)
    parsed = read_tsv(path)
    reason = f"imported, first from {path.name}"[:128]
    added = 0
    try:
        with Session(store.engine) as s, s.begin():
            if store.dialect == "postgresql":  # two importers of one file must not both find it new
                s.execute(text("SELECT pg_advisory_xact_lock(7254062)"))
            sessions: dict[tuple, int] = {}
            seen: set[tuple] = set()
            for arch, sm_count, device_name, descriptor, perf_config, t_us in parsed:
                cid = store.config_id(descriptor, s)
                perf = canonical_json(perf_config)
                key = (arch, sm_count, device_name, cid, perf, t_us)
                if key in seen or _already_imported(s, *key):
                    seen.add(key)
                    continue
                seen.add(key)
                where = (arch, sm_count, device_name)
                if where not in sessions:
                    sessions[where] = _import_session(s, path, *where, reason=reason)
                s.add(ResultRow(session_id=sessions[where], config_id=cid, job_id=None, role="imported",
                                perf_config=perf, kernel_time_us=t_us, median_us=t_us, se_us=None, n_samples=0,
                                stop_reason="imported", throttled=False, simulated=False, samples_us=[],
                                protocol={"imported_from": str(path)}, clocks={}, warnings=[]))
                added += 1
    except DBAPIError as exc:
        raise StoreError(f"cannot import {path} into {store.url}: {_describe(exc)}; nothing was imported") from None
    return added


def _already_imported(s: Session, arch, sm_count, device_name, cid, perf, t_us) -> bool:
    q = (select(ResultRow.id).join(SessionRow, SessionRow.id == ResultRow.session_id)
         .where(ResultRow.role == "imported", ResultRow.config_id == cid, ResultRow.perf_config == perf,
                ResultRow.kernel_time_us == t_us, SessionRow.device_name == device_name, SessionRow.arch == arch,
                SessionRow.sm_count == sm_count).limit(1))
    return s.scalar(q) is not None


def _import_session(s: Session, path: Path, arch, sm_count, device_name, *, reason) -> int:
    """Imported lines of one device go to one session, whichever file brought them, so a faster
    time imported later competes with the earlier ones in the winner view (and a file imported
    under another name finds its rows already there). Older calibs named the session after the
    file; the first such session of the device is reused."""
    sid = s.scalar(select(SessionRow.id).where(SessionRow.label.like("imported:%"),
                                               SessionRow.device_name == device_name, SessionRow.arch == arch,
                                               SessionRow.sm_count == sm_count)
                   .order_by(SessionRow.id).limit(1))
    if sid is not None:
        return sid
    device = {"name": device_name, "compute_capability": arch, "sm_count": sm_count, "simulated": False}
    row = SessionRow(label=f"imported:{device_name}:{arch}:{sm_count}", device_name=device_name, arch=arch,
                     sm_count=sm_count, simulated=False, device=device, software={}, reason=reason,
                     machine_name=socket.gethostname())
    s.add(row)
    s.flush()
    return row.id
