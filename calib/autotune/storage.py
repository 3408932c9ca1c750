"""The autotune cache's rows in the tuning database (tables of migration 0004).

Where: ``url`` if given, else ``CALIB_DB_URL`` (a fleet's PostgreSQL, shared by every rank and
machine), else SQLite at ``<user data dir>/calib/autotune.sqlite``.

Reads are one query per (family, device): every entry of the family for this device and its
timings' summaries (not the samples), parsed row by row, so one corrupt entry is reported and
skipped while the others load. On SQLite the read goes through the standard library's ``sqlite3``,
not SQLAlchemy: the first cache hit of a new process must cost milliseconds, and importing
SQLAlchemy and checking the schema's revision costs a hundred. Writes go through
:class:`calib.store.Store` (migrations, SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's pool).

Concurrency: a timing is inserted with ``ON CONFLICT DO NOTHING`` (the first writer's timing of a
candidate stands; a retune overwrites on purpose), and the winner is decided *in the database
transaction* from the rows stored, under the entry's row lock (``SELECT ... FOR UPDATE``; SQLite's
write lock), so two processes tuning one key at once leave one entry consistent with its timings,
and both return what it says. A process killed mid-tune leaves timings without a decided winner;
the next one times only the candidates still missing.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path

from ..keys import canonical_json
from ..profile import user_data_dir
from ..sqlite_files import immutable_uri, in_read_only_folder, path_of, url_of, wal_pending
from .decide import TIE_REL, Timing, decide
from .entries import CorruptEntry, Entry, entry_from_row, provenance, timing_to_row

ENV_DB_URL = "CALIB_DB_URL"
DB_FILE = "autotune.sqlite"


def resolve_url(url: str | None = None) -> str:
    if url:
        return url
    env = os.environ.get(ENV_DB_URL)
    if env:
        return env
    return url_of(Path(user_data_dir()) / DB_FILE)


READ_SQL = """
SELECT e.id, e.family, e.descriptor_key, e.device_key, e.descriptor, e.device, e.software, e.protocol, e.winner,
       e.winner_time_us, e.tied, e.offered, e.source, e.provenance,
       t.candidate, t.status, t.reason, t.time_us, t.ci_low_us, t.ci_high_us, t.se_us, t.n_samples
FROM autotune_entry e LEFT JOIN autotune_timing t ON t.entry_id = e.id
WHERE {where}
ORDER BY e.id, t.id
"""
ENTRY_COLS = ("id", "family", "descriptor_key", "device_key", "descriptor", "device", "software", "protocol",
              "winner", "winner_time_us", "tied", "offered", "source", "provenance")
TIMING_COLS = ("candidate", "status", "reason", "time_us", "ci_low_us", "ci_high_us", "se_us", "n_samples")


def group_rows(rows) -> dict:
    """Joined rows grouped per entry: {entry id: (entry row, [timing rows])}, nothing parsed yet."""
    grouped: dict = {}
    n = len(ENTRY_COLS)
    for row in rows:
        slot = grouped.get(row[0])
        if slot is None:
            slot = grouped[row[0]] = (dict(zip(ENTRY_COLS, row[:n])), [])
        if row[n] is not None:
            slot[1].append(dict(zip(TIMING_COLS, row[n:])))
    return grouped


def parse_rows(rows, origin="user") -> tuple[list[Entry], list[tuple[dict, str]]]:
    """Entries from joined rows; the corrupt ones as (entry row, reason), never raising."""
    grouped = group_rows(rows)
    good, bad = [], []
    for e, ts in grouped.values():
        try:
            good.append(entry_from_row(e, ts, origin=origin))
        except (CorruptEntry, ValueError, TypeError, KeyError) as exc:
            bad.append((e, str(exc)))
    return good, bad


def _read_sqlite(path: str, sql: str, params: dict):
    """The rows of ``sql`` read by sqlite3 itself (fast, no SQLAlchemy); None where the database has
    no table yet (the Store creates it) or not the columns this calib reads (a newer calib's: the
    Store says so, where "no such column" had been the message). StoreError names a file that is no
    database.

    A database in a folder nobody may write (a read-only mount, a shared cache) may fail to open: in
    WAL mode a reader needs ``-shm`` beside the file, so every read, a hit included, failed with
    "unable to open database file" though the data was intact. It is then read again as immutable,
    unless a ``-wal`` file holds writes not yet in the database (immutable would not see them)."""
    if os.path.isdir(path):
        from ..store import StoreError  # here, not above: calib.store imports SQLAlchemy (200 ms)

        raise StoreError(f"tuning database {path} is a folder, not a database file")
    here = os.path.abspath(path)
    attempts = [(path, False)]
    if in_read_only_folder(here) and not wal_pending(here):
        attempts.append((immutable_uri(here), True))
    for i, (target, uri) in enumerate(attempts):
        try:
            conn = sqlite3.connect(target, timeout=60, uri=uri)
            try:
                return conn.execute(sql, params).fetchall()
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:  # OperationalError ("no such table") is one too
            text = str(exc)
            if "no such table" in text or "no such column" in text:
                return None  # the Store reads it: it creates the tables, or names a newer calib's schema
            if i + 1 < len(attempts) and "unable to open" in text:
                continue
            from ..store import StoreError

            if "not a database" in text or "malformed" in text:
                raise StoreError(f"tuning database {path} cannot be read ({text}); it is left as it is: move it "
                                 "aside to start a new one") from None
            raise StoreError(f"tuning database {path} cannot be read now ({text})") from None


def _json_list(value) -> list:
    """A JSON list column as read back (a list, or its text where the driver does not decode it)."""
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            return []
    return value if isinstance(value, list) else []


def _finite_samples(value) -> list | None:
    """A samples cell as a list of finite floats, or None where it is not one (not JSON, NaN, text)."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    if not isinstance(value, list):
        return None
    try:
        out = [float(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
    except OverflowError:  # an integer of 400 digits
        return None
    return out if len(out) == len(value) and all(math.isfinite(v) for v in out) else None


class AutotuneDB:
    """The cache's database: fast reads by (family, device), transactional writes."""

    def __init__(self, url: str | None = None):
        self.url = resolve_url(url)
        self._store = None

    @property
    def store(self):
        """calib.store.Store, opened (and migrated) on first write or on a read SQLite cannot serve."""
        if self._store is None:
            from ..store import Store

            self._store = Store(self.url)
        return self._store

    # -- reading ------------------------------------------------------------------------------
    def _rows(self, where: str, params: dict):
        sql = READ_SQL.format(where=where)
        path = path_of(self.url) if self._store is None else None
        if path is not None:
            if not os.path.exists(path):
                return []  # nothing stored yet; created on the first write
            rows = _read_sqlite(path, sql, params)
            if rows is not None:
                return rows
        from sqlalchemy import text

        with self.store.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params).all()]

    def read_raw(self, family: str, device_key: str) -> dict:
        """{descriptor key: (entry row, timing rows)} of a family on a device, unparsed: the
        autotuner parses an entry when it is first asked for, so the first hit of a process does
        not pay for parsing the whole family."""
        grouped = group_rows(self._rows("e.family = :family AND e.device_key = :device_key",
                                        {"family": family, "device_key": device_key}))
        return {row["descriptor_key"]: (row, timings) for row, timings in grouped.values()}

    def read(self, family: str, device_key: str) -> tuple[list[Entry], list[tuple[dict, str]]]:
        return parse_rows(self._rows("e.family = :family AND e.device_key = :device_key",
                                     {"family": family, "device_key": device_key}))

    def read_all(self, family: str | None = None, device_key: str | None = None):
        clauses, params = ["1 = 1"], {}
        if family:
            clauses.append("e.family = :family")
            params["family"] = family
        if device_key:
            clauses.append("e.device_key = :device_key")
            params["device_key"] = device_key
        return parse_rows(self._rows(" AND ".join(clauses), params))

    def samples(self, entry_id: int) -> dict:
        """Every candidate's samples of one entry (for export), read as stored and checked here: a
        cell that is not a list of finite numbers is None (left out of the export), so that one
        damaged cell costs its samples, not the whole export, which it had ended in a traceback."""
        from sqlalchemy import Text, select, type_coerce

        from ..store.tables import AutotuneTimingRow as T

        with self.store.engine.connect() as conn:
            rows = conn.execute(select(T.candidate, type_coerce(T.samples_us, Text))
                                .where(T.entry_id == entry_id)).all()
        return {c: _finite_samples(s) for c, s in rows}

    # -- writing ------------------------------------------------------------------------------
    def _insert(self, conn, table, values: dict, conflict: list, update: list | None = None):
        if self.store.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = insert(table).values(**values)
        if update:
            stmt = stmt.on_conflict_do_update(index_elements=conflict, set_={c: stmt.excluded[c] for c in update})
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=conflict)
        conn.execute(stmt)

    def _entry_id(self, conn, e: Entry) -> int:
        from sqlalchemy import select

        from ..store.tables import AutotuneEntryRow as E
        from ..store.tables import utcnow

        now = utcnow()
        self._insert(conn, E.__table__, {"family": e.family, "descriptor_key": e.descriptor_key,
                                         "device_key": e.device_key, "descriptor": e.descriptor, "device": e.device,
                                         "software": e.software, "protocol": e.protocol, "source": e.source,
                                         "provenance": e.provenance or provenance(), "offered": [], "tied": [],
                                         "created": now, "updated": now},
                     ["family", "descriptor_key", "device_key"])
        eid = conn.execute(select(E.id).where(E.family == e.family, E.descriptor_key == e.descriptor_key,
                                              E.device_key == e.device_key)).scalar_one()
        columns = family_columns(e.family, e.descriptor)
        if columns is not None:
            from ..store.tables import AutotuneConvRow

            self._insert(conn, AutotuneConvRow.__table__, {"entry_id": eid, **columns}, ["entry_id"])
        return eid

    def _put_timing(self, conn, entry_id: int, t: Timing, overwrite: bool):
        from ..store.tables import AutotuneTimingRow as T
        from ..store.tables import utcnow

        row = {**timing_to_row(t), "entry_id": entry_id, "created": utcnow()}
        update = [c for c in row if c not in ("entry_id", "candidate")] if overwrite else None
        self._insert(conn, T.__table__, row, ["entry_id", "candidate"], update)

    def put_timing(self, base: Entry, t: Timing, *, overwrite: bool = False):
        """Keep one candidate's timing now (a killed tune keeps what it timed)."""
        with self.store.engine.begin() as conn:
            self._put_timing(conn, self._entry_id(conn, base), t, overwrite)

    def stored_candidates(self, base: Entry) -> set:
        """Candidates with a timing in the database (another process may have timed some)."""
        from sqlalchemy import select

        from ..store.tables import AutotuneEntryRow as E
        from ..store.tables import AutotuneTimingRow as T

        with self.store.engine.connect() as conn:
            rows = conn.execute(select(T.candidate).join(E, E.id == T.entry_id).where(
                E.family == base.family, E.descriptor_key == base.descriptor_key,
                E.device_key == base.device_key)).scalars().all()
        return set(rows)

    def finalize(self, base: Entry, offered: list, *, tie_rel: float = TIE_REL, winner: str | None = None,
                 source: str = "tuned") -> Entry:
        """Decide the winner among ``offered`` from the timings stored, under the entry's lock, and
        record it with this process's soft fields; ``winner`` forces a choice made elsewhere (the
        DRAM tuner's). Returns the entry as stored."""
        from sqlalchemy import select, update

        from ..store.tables import AutotuneEntryRow as E
        from ..store.tables import AutotuneTimingRow as T
        from ..store.tables import utcnow

        with self.store.engine.begin() as conn:
            eid = self._entry_id(conn, base)
            lock = select(E.id).where(E.id == eid)
            if self.store.dialect == "postgresql":
                lock = lock.with_for_update()
            conn.execute(lock)
            rows = conn.execute(select(*[getattr(T, c) for c in TIMING_COLS]).where(T.entry_id == eid)).all()
            from .entries import timing_from_row

            timings = {}
            for r in rows:
                try:
                    t = timing_from_row(dict(zip(TIMING_COLS, r)))
                    timings[t.candidate] = t
                except CorruptEntry:
                    continue  # a corrupt timing never wins; it is re-timed when offered again
            if winner is not None:
                chosen, time_us, tied = winner, timings[winner].time_us if winner in timings else None, [winner]
            else:
                d = decide(timings, offered, tie_rel=tie_rel)
                chosen, time_us, tied = (d.winner, d.time_us, list(d.tied)) if d else (None, None, [])
            conn.execute(update(E).where(E.id == eid).values(
                winner=chosen, winner_time_us=time_us, tied=tied, offered=list(offered), software=base.software,
                protocol=base.protocol, source=source, provenance=base.provenance or provenance(),
                updated=utcnow()))
        out = Entry(**{**base.__dict__, "winner": chosen, "winner_time_us": time_us, "tied": tied,
                       "offered": list(offered), "source": source, "timings": timings, "origin": "user", "id": eid})
        return out

    def replace(self, e: Entry, *, keep_existing: bool = False) -> str:
        """Write a whole entry in one transaction (an import, or the DRAM tuner's result). With
        ``keep_existing``, timings already stored win over the given ones (an import never
        overwrites the user's own measurements). Returns "new", "changed" or "unchanged"."""
        from sqlalchemy import select, update

        from ..store.tables import AutotuneEntryRow as E
        from ..store.tables import AutotuneTimingRow as T
        from ..store.tables import utcnow

        with self.store.engine.begin() as conn:
            existed = conn.execute(select(E.id, E.winner, E.offered).where(
                E.family == e.family, E.descriptor_key == e.descriptor_key, E.device_key == e.device_key)).first()
            eid = self._entry_id(conn, e)
            if self.store.dialect == "postgresql":
                conn.execute(select(E.id).where(E.id == eid).with_for_update())
            have = set(conn.execute(select(T.candidate).where(T.entry_id == eid)).scalars().all())
            added = 0
            for t in e.timings.values():
                if keep_existing and t.candidate in have:
                    continue
                self._put_timing(conn, eid, t, overwrite=not keep_existing)
                added += 1
            if existed is not None and keep_existing and added == 0:
                return "unchanged"
            if keep_existing and existed is not None and existed.winner is not None:
                # The user's entry decides; imported timings only fill gaps. Its winner, ties, software,
                # protocol and source stay its own: taken from the file, they made the user's entry look
                # stale (timed again on the next select) and its winner absent from its ties.
                offered = list(_json_list(existed.offered))
                offered += [c for c in e.offered if c not in offered]
                conn.execute(update(E).where(E.id == eid).values(offered=offered, updated=utcnow()))
                return "changed"
            winner = e.winner
            conn.execute(update(E).where(E.id == eid).values(
                winner=winner, winner_time_us=(e.timings[winner].time_us if winner in e.timings else
                                               e.winner_time_us), tied=e.tied, offered=e.offered,
                software=e.software, protocol=e.protocol, source=e.source, provenance=e.provenance,
                updated=utcnow()))
        return "new" if existed is None else "changed"

    def delete(self, entry_ids) -> int:
        from sqlalchemy import delete

        from ..store.tables import AutotuneConvRow, AutotuneEntryRow, AutotuneTimingRow

        ids = list(entry_ids)
        if not ids:
            return 0
        with self.store.engine.begin() as conn:
            conn.execute(delete(AutotuneTimingRow).where(AutotuneTimingRow.entry_id.in_(ids)))
            conn.execute(delete(AutotuneConvRow).where(AutotuneConvRow.entry_id.in_(ids)))
            return conn.execute(delete(AutotuneEntryRow).where(AutotuneEntryRow.id.in_(ids))).rowcount


def family_columns(family: str, descriptor_text: str) -> dict | None:
    """Columns of a family's own table (conv2d: ``autotune_conv``), or None."""
    if family != "conv2d":
        return None
    from ..ops.conv2d import conv_columns

    try:
        return conv_columns(json.loads(descriptor_text))
    except (KeyError, TypeError, ValueError):
        return None  # a conv2d-named family with another descriptor: the JSON is the record


__all__ = ["AutotuneDB", "resolve_url", "user_data_dir", "canonical_json"]
