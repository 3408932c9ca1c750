"""How much machines of one model differ: the values other machines gave, beside a shipped profile.

A shipped profile (``profiles/<device slug>.json``) is one machine's measurement. Its CIs say how
precisely *that* machine was measured, not how far another machine of the same model may sit from
it: nine lent H200s gave bf16 matmul rates of 791–822 TFLOP/s and seven DRAM reads of 4571–4710 GB/s over
2026-12-01, each to ±0.1–1%. ``calib verify`` against a shipped profile needs that spread to tell a
machine that differs as machines do from one that drifted (a power cap, a failing part), and a
profile alone cannot carry it.

The file ``<device slug>.machines.json`` beside the shipped profile holds, per parameter, one value
per machine measured (each with its date and where it was recorded)::

    {"schema": "calib.machines/1", "device": "NVIDIA H200",
     "params": {"compute.bf16.tensor_tflops": [
         {"value": 821.5, "measured": "2026-12-01", "source": "bench/results/...: call 5, full"}, ...]}}

Versioned with an integer like every calib file; read field by field, and a malformed file is
refused with the field named (``MachinesError``), never half used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import strict_json
from .errors import CalibError

SCHEMA_NAME = "calib.machines"
SCHEMA_VERSION = 1
MAX_FILE_BYTES = 1 << 20  # a few hundred values; a larger file is not one of these
MIN_MACHINES = 3  # fewer values say nothing of a spread


class MachinesError(CalibError, ValueError):
    """A machines file cannot be read: the message names the file and the field."""


@dataclass(frozen=True)
class Spread:
    """One parameter's values over the machines measured."""

    name: str
    values: tuple[float, ...]
    first: str
    last: str

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def contains(self, value: float, rel_halfwidth: float = 0.0) -> bool:
        """Whether ``value`` (measured to ± ``rel_halfwidth``) lies within the machines' range."""
        h = max(0.0, rel_halfwidth)
        return self.low * (1 - h) <= value <= self.high * (1 + h)


def path_beside(profile_path) -> Path:
    """``nvidia-h200.json`` -> ``nvidia-h200.machines.json`` in the same folder."""
    p = Path(profile_path)
    return p.with_name(p.stem + ".machines.json")


def read_machines(path) -> dict[str, Spread]:
    """The spreads of a machines file, by parameter name; only parameters with at least
    ``MIN_MACHINES`` values. Raises ``MachinesError`` naming what is wrong."""
    from .profile import ProfileError, _read_bytes

    path = Path(path)
    where = str(path)
    try:  # as a profile is read: a regular file, opened without blocking, to a bound
        data = _read_bytes(path, "machines file", max_bytes=MAX_FILE_BYTES)
    except ProfileError as exc:
        raise MachinesError(str(exc)) from None
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=strict_json.no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: [[[[... past the parser
        raise MachinesError(f"{where}: not valid JSON ({str(exc)[:120] or type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise MachinesError(f"{where}: the top level is {type(doc).__name__}, not an object")
    schema = doc.get("schema")
    prefix = SCHEMA_NAME + "/"
    if not isinstance(schema, str) or not schema.startswith(prefix) or not re.fullmatch(r"[0-9]{1,9}",
                                                                                      schema[len(prefix):]):
        raise MachinesError(f"{where}: 'schema' is {schema!r}, not {SCHEMA_NAME}/<version>")
    version = int(schema[len(prefix):])
    if version > SCHEMA_VERSION:
        raise MachinesError(f"{where}: schema version {version} is newer than this calib understands "
                            f"({SCHEMA_VERSION}): upgrade calib to read it")
    if version < 1:
        raise MachinesError(f"{where}: schema version {version} does not exist")
    params = doc.get("params")
    if not isinstance(params, dict):
        raise MachinesError(f"{where}: 'params' is missing or not an object")
    out = {}
    for name, entries in params.items():
        if not isinstance(entries, list):
            raise MachinesError(f"{where}: params[{name!r}] is not a list of machines")
        values, dates = [], []
        for i, entry in enumerate(entries):
            field = f"params[{name!r}][{i}]"
            if not isinstance(entry, dict):
                raise MachinesError(f"{where}: {field} is not an object")
            value = entry.get("value")
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not strict_json.finite(value)
                    or value <= 0):
                raise MachinesError(f"{where}: {field}.value is {value!r}, not a positive finite number")
            measured = entry.get("measured")
            if not isinstance(measured, str) or not measured:
                raise MachinesError(f"{where}: {field}.measured is {measured!r}, not a date")
            source = entry.get("source")
            if not isinstance(source, str) or not source:
                raise MachinesError(f"{where}: {field}.source is {source!r}: say where the value was recorded")
            values.append(float(value))
            dates.append(measured)
        if len(values) >= MIN_MACHINES:
            out[name] = Spread(name, tuple(values), min(dates), max(dates))
    return out


__all__ = ["Spread", "MachinesError", "read_machines", "path_beside", "MIN_MACHINES"]
