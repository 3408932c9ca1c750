"""Winners: the fastest perf-config per (session, config), and the TSV tuning tables built on it.

The ``winner`` view (migration 0002) ranks every result of a (session, config) by kernel time.
The TSV has one winner per line, keyed by architecture and SM count like rocMLIR's tuning tables,
so a library can ship it and look perf-configs up without a database; importing it back records
each line as an ``imported`` result in a session for that architecture.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..keys import canonical_json
from .core import Store, StoreError
from .tables import ResultRow

TSV_HEADER = ["arch", "sm_count", "device", "config", "perf_config", "kernel_time_us"]
TSV_MAGIC = "# calib winners v1"


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
    frame = winners(store, session_id)
    path = Path(path)
    with path.open("w", newline="") as fh:
        fh.write(TSV_MAGIC + "\n")
        w = csv.writer(fh, delimiter="\t", lineterminator="\n")
        w.writerow(TSV_HEADER)
        for r in frame.itertuples():
            w.writerow([r.arch, r.sm_count, r.device, r.config, r.perf_config, repr(float(r.kernel_time_us))])
    return len(frame)


def import_tsv(store: Store, path) -> int:
    """Record each line of a winners TSV as an imported result; every fault names its line."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not lines or lines[0].strip() != TSV_MAGIC:
        raise StoreError(f"{path}: not a calib winners file (first line must be {TSV_MAGIC!r})")
    reader = csv.reader(lines[1:], delimiter="\t")
    header = next(reader, None)
    if header != TSV_HEADER:
        raise StoreError(f"{path}, line 2: expected the columns {TSV_HEADER}, got {header}")
    parsed = []
    for lineno, fields in enumerate(reader, start=3):
        if not fields:
            continue
        if len(fields) != len(TSV_HEADER):
            raise StoreError(f"{path}, line {lineno}: {len(fields)} fields, expected {len(TSV_HEADER)}")
        arch, sm, device, config, perf, t = fields
        try:
            descriptor, perf_config, t_us, sm_count = json.loads(config), json.loads(perf), float(t), int(sm)
        except ValueError as exc:
            raise StoreError(f"{path}, line {lineno}: {exc}") from None
        if not isinstance(descriptor, dict) or not math.isfinite(t_us) or t_us <= 0:
            raise StoreError(f"{path}, line {lineno}: the config must be a JSON object and the time positive")
        parsed.append((arch, sm_count, device, descriptor, perf_config, t_us))
    for arch, sm_count, device_name, descriptor, perf_config, t_us in parsed:
        device = {"name": device_name, "compute_capability": arch, "sm_count": sm_count, "simulated": False}
        sid = store.open_session(f"imported:{path.name}:{device_name}:{arch}:{sm_count}", device, {},
                                 reason=f"imported from {path.name}")
        cid = store.config_id(descriptor)
        with Session(store.engine) as s, s.begin():
            s.add(ResultRow(session_id=sid, config_id=cid, job_id=None, role="imported",
                            perf_config=canonical_json(perf_config), kernel_time_us=t_us, median_us=t_us, se_us=None,
                            n_samples=0, stop_reason="imported", throttled=False, simulated=False, samples_us=[],
                            protocol={"imported_from": str(path)}, clocks={}, warnings=[]))
    return len(parsed)
