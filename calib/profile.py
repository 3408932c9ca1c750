"""The machine profile: measured parameters that heuristics query by name, with a default.

The profile is forgiving where heuristics read it and strict where calibrations write it. A
heuristic must never crash because a file is missing, truncated, from another GPU or from a newer
calib: ``query`` falls back to the caller's default and says why, once per name. ``strict=True``
turns every such fallback into a ProfileError (and only a ProfileError), for tests and for tools
that must not guess.

A profile is untrusted input: a hostile or broken file may hold any bytes, any nesting, any
number. Everything is checked once, when the file is loaded, so that ``query`` stays one
dictionary lookup: only a regular file of bounded size is read (a FIFO or a device could block or
never end), its text must be UTF-8 JSON of bounded nesting, every record must have the shape
calib writes, and every value must be physically possible for its parameter's kind (a bandwidth
is a positive number below any GPU's, not ``true`` nor 1e308) and lie within its own CI.

Files are JSON only (loading runs no code), carry an integer schema version that older files are
migrated forward from, and are replaced atomically under a file lock so that a killed writer
leaves the previous profile intact and concurrent writers merge rather than overwrite.
"""

from __future__ import annotations

import math
import os
import stat as _stat
import sys
import warnings
from pathlib import Path
from types import MappingProxyType

from . import fingerprint as fp
from .errors import CalibError

SCHEMA_NAME = "calib.profile"
SCHEMA_VERSION = 1
ENV_PROFILE = "CALIB_PROFILE"
LOCK_TIMEOUT_S = 120.0

# The largest file read as a profile. A profile holds about 1 KiB per parameter (the shipped
# H200 profile: 39 parameters in 40 KiB), so 16 MiB is room for some 16,000 parameters, hundreds
# of times the catalogue; and it bounds what a wrong path costs (a log file, /proc, a disk image)
# to a read and a parse of well under a second, rather than all the memory there is.
MAX_PROFILE_BYTES = 16 * 2**20

# How deeply a record, the device or the software may nest. calib writes 3 levels (a record's
# diagnostics hold numbers); anything near Python's recursion limit (about 1,000) would parse
# and then break whoever prints, compares or writes it again (repr and json.dumps recurse).
MAX_NESTING = 32


class ProfileError(CalibError, ValueError):
    """A profile file or parameter cannot be used; the message names the file and the problem."""


class NewerSchemaError(ProfileError):
    """A profile written by a newer calib: readable by that calib, so never moved aside as corrupt."""


class MissingParameterError(ProfileError, KeyError):
    """Strict query of a parameter the profile does not hold."""

    def __str__(self):  # KeyError would quote the message
        return ProfileError.__str__(self)


class CalibWarning(UserWarning):
    """Base of calib's warnings, so that users can filter them all at once."""


class ProfileWarning(CalibWarning):
    """The profile could not be used as a whole, or only with reservations."""


class ParameterWarning(CalibWarning):
    """One parameter is missing or unusable: the caller's default was returned."""


def utc_now() -> str:
    from .timestamps import utc_now as now  # only writers need the time: `import calib` does not pay for it

    return now()


# The modules a profile warning passes through on its way out; ``_warn`` points past them.
_OWN_FILES = frozenset({__file__, os.path.join(os.path.dirname(__file__), "__init__.py")})


def _warn(message: str, category) -> None:
    """Warn at the first caller outside the profile library.

    A fixed ``stacklevel`` cannot be right for every route: the same warning about a broken file
    is raised through ``load_profile`` (the caller's line is two frames up), through the first
    ``calib.query`` (four) or ``calib.record``. Walking out of this module and ``calib/__init__``
    points every one of them at the heuristic's own line, which is what its author must see.
    """
    frame = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_code.co_filename in _OWN_FILES:
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def _show(value, limit: int = 80) -> str:
    """A short, safe rendering of a value from a file, for a message.

    A hostile file can hold a megabyte string, an integer of thousands of digits (whose repr
    raises ValueError past 4,300 digits) or deep nesting (whose repr raises RecursionError); a
    message about it must neither explode nor fail.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**40:
        return f"an integer of {value.bit_length()} bits"
    try:
        import reprlib

        r = reprlib.Repr()
        r.maxlevel, r.maxstring, r.maxother, r.maxlong = 3, limit, limit, limit
        text = r.repr(value)
    except Exception:
        text = f"<a {type(value).__name__}>"
    return text if len(text) <= limit + 10 else text[:limit] + "..."


# ----------------------------------------------------------------------------------------------
# kinds of parameter, from their unit


class Kind:
    """What values a parameter of one unit can physically take: finite, positive, within
    ``[low, high]``. The bounds are generous on purpose (a thousand times past any GPU measured
    so far, far below any that could be built): they refuse what cannot be right (zero, negative,
    1e308, a subnormal left by a corrupted exponent, a bandwidth of one byte a second), never a
    fast or slow machine."""

    __slots__ = ("name", "unit", "low", "high")

    def __init__(self, name: str, unit: str, low: float, high: float):
        self.name, self.unit, self.low, self.high = name, unit, low, high

    def fault(self, value) -> str | None:
        """Why ``value`` cannot be a measurement of this kind, or None."""
        if isinstance(value, bool):
            return f"is {value}, not a number of {self.unit}"
        if not self.low <= value <= self.high:  # NaN fails this too; values are finite by now
            if value <= 0:
                return f"is {_show(value)} {self.unit}: a {self.name} is positive"
            return f"is {_show(value)} {self.unit}, outside what any GPU can have ({self.low:g} to {self.high:g})"
        return None

    def __repr__(self):
        return f"Kind({self.name!r}, {self.unit!r}, {self.low!r}, {self.high!r})"


# One entry per unit the catalogue uses; tests/test_profile.py checks that every catalogue unit
# has one. H200 figures for scale: DRAM 4.7e3 GB/s, shared memory 3.3e4 GB/s, dense fp16 810
# TFLOP/s, 1e12 elements/s, launch latency 12 us, L2 4.5e7 bytes, 226 elements per thread.
KINDS = {
    "GB/s": Kind("rate", "GB/s", 1e-6, 1e7),              # 1 kB/s .. 10 PB/s
    "TFLOP/s": Kind("rate", "TFLOP/s", 1e-9, 1e6),        # 1 kFLOP/s .. 1 EFLOP/s
    "elements/s": Kind("rate", "elements/s", 1.0, 1e16),
    "us": Kind("time", "us", 1e-6, 1e10),                 # 1 ps .. about 3 hours
    "bytes": Kind("bytes", "bytes", 1.0, 1e15),           # a byte .. a petabyte
    "count": Kind("count", "count", sys.float_info.min, 1e12),
}


def _catalogue_units() -> tuple[dict[str, str], str | None]:
    """name -> unit of every parameter calib measures, and why not, if the catalogue cannot be read.

    Imported only when a record does not state a unit of its own (a hand-written profile, a
    record whose unit is missing or damaged): the catalogue imports the registry of
    calibrations, which costs three to seven times what loading the shipped profile may cost.
    A broken calibration module must not make profiles unreadable, hence the broad except.
    """
    try:
        from .catalogue import parameters

        return {name: info.unit for name, info in parameters().items()}, None
    except Exception as exc:  # noqa: BLE001 - any failure of the registry only weakens the check
        return {}, f"{type(exc).__name__}: {exc}"


_FIELDS = ("name", "value", "ci95", "unit", "n", "method", "r2", "flags", "diagnostics", "source", "measured")
_TEXT_FIELDS = ("unit", "method", "source", "measured")


class Parameter:
    """One measured number and the evidence behind it; immutable.

    Written out by hand rather than as a frozen dataclass: ``dataclasses`` imports ``inspect`` and
    generates code when the class is defined, which together cost about 8 ms, a third of what
    ``import calib`` cost, and heuristics pay ``import calib`` at every start-up.
    """

    __slots__ = _FIELDS

    def __init__(self, name: str, value: float, ci95: tuple[float, float] | None = None, unit: str | None = None,
                 n: int | None = None, method: str | None = None, r2: float | None = None,
                 flags: tuple[str, ...] = (), diagnostics: dict | None = None, source: str | None = None,
                 measured: str | None = None):
        put = object.__setattr__
        put(self, "name", name)
        put(self, "value", value)
        put(self, "ci95", ci95)
        put(self, "unit", unit)
        put(self, "n", n)
        put(self, "method", method)
        put(self, "r2", r2)
        put(self, "flags", flags)
        put(self, "diagnostics", {} if diagnostics is None else diagnostics)
        put(self, "source", source)
        put(self, "measured", measured)

    def __setattr__(self, key, value):
        raise AttributeError(f"Parameter is immutable: cannot assign to {key!r}")

    def __delattr__(self, key):
        raise AttributeError(f"Parameter is immutable: cannot delete {key!r}")

    def _astuple(self) -> tuple:
        return tuple(getattr(self, k) for k in _FIELDS)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._astuple() == other._astuple()

    def __hash__(self):  # the diagnostics dict is left out: it cannot be hashed
        return hash(tuple(getattr(self, k) for k in _FIELDS if k != "diagnostics"))

    def __repr__(self):  # compact: the method, diagnostics and provenance are in _repr_html_ and to_record()
        shown = [k for k in ("name", "value", "ci95", "unit", "n") if k in ("name", "value") or getattr(self, k)]
        if self.flags:
            shown.append("flags")
        return "Parameter(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in shown) + ")"

    def _repr_html_(self):
        from .display import parameter_html

        return parameter_html(self)

    def __reduce__(self):  # pickle and copy go through __init__, since __setattr__ refuses
        return (self.__class__, self._astuple())

    @classmethod
    def from_record(cls, name: str, record) -> "Parameter":
        """Check one stored record's shape; raises ProfileError naming the parameter and the fault.

        This is what writers check too (never write what a reader would refuse to parse): every
        field calib writes has the type calib writes, so that whoever reads a Parameter (the
        report, the CLI, a heuristic) can format and compare its fields without guarding them.
        Whether the value is physically possible for its parameter is judged at load
        (``Profile``), where the unit's kind is known; a fit may write a flagged value that a
        heuristic should not get, and the evidence is kept.
        """
        if isinstance(record, (int, float)) and not isinstance(record, bool):
            record = {"value": record}
        if not isinstance(record, dict):
            raise ProfileError(f"parameter {name!r}: expected an object with a 'value', got {type(record).__name__}")
        if "value" not in record:
            raise ProfileError(f"parameter {name!r}: the record has no 'value'")
        value = _finite_number(name, "value", record["value"])
        ci95 = record.get("ci95")
        if ci95 is not None:
            if not (isinstance(ci95, (list, tuple)) and len(ci95) == 2):
                raise ProfileError(f"parameter {name!r}: 'ci95' must be a pair [low, high], got {_show(ci95)}")
            ci95 = tuple(_finite_number(name, "ci95", bound) for bound in ci95)
            if any(isinstance(bound, bool) for bound in ci95):
                raise ProfileError(f"parameter {name!r}: 'ci95' must be a pair of numbers, got {_show(ci95)}")
        flags = record.get("flags")
        if flags is None:
            flags = ()
        elif not (isinstance(flags, (list, tuple)) and all(isinstance(f, str) for f in flags)):
            raise ProfileError(f"parameter {name!r}: 'flags' must be a list of strings, got {_show(flags)}")
        diagnostics = record.get("diagnostics")
        if diagnostics is not None and not isinstance(diagnostics, dict):
            raise ProfileError(f"parameter {name!r}: 'diagnostics' must be an object, got "
                               f"{type(diagnostics).__name__} {_show(diagnostics)}")
        for key in _TEXT_FIELDS:
            if not isinstance(record.get(key), (str, type(None))):
                raise ProfileError(f"parameter {name!r}: {key!r} must be text, got {_show(record[key])}")
        n = record.get("n")
        if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**63):
            raise ProfileError(f"parameter {name!r}: 'n' must be a whole number of points, got {_show(n)}")
        r2 = record.get("r2")
        if r2 is not None and (isinstance(r2, bool) or not isinstance(r2, (int, float))):
            raise ProfileError(f"parameter {name!r}: 'r2' must be a number, got {_show(r2)}")
        if isinstance(r2, int):
            r2 = _finite_number(name, "r2", r2)
        return cls(name=name, value=value, ci95=ci95, unit=record.get("unit"), n=n, method=record.get("method"),
                   r2=r2, flags=tuple(flags), diagnostics=dict(diagnostics or {}), source=record.get("source"),
                   measured=record.get("measured"))

    def to_record(self) -> dict:
        out = {"value": self.value, "ci95": list(self.ci95) if self.ci95 else None, "unit": self.unit,
               "n": self.n, "method": self.method, "r2": self.r2, "flags": list(self.flags),
               "diagnostics": self.diagnostics, "source": self.source, "measured": self.measured}
        return {k: v for k, v in out.items() if v is not None}


def _finite_number(name: str, key: str, value):
    """``value`` if it is a bool or a finite number a float can hold; ProfileError otherwise.

    An integer is kept as it is (a hand-written 40 stays 40), but must convert to a float: one of
    400 digits is valid JSON, and ``math.isfinite`` raises OverflowError on it.
    """
    if isinstance(value, bool):  # flags such as "matmul.splitk.use_atomics" stay booleans
        return value
    if not isinstance(value, (int, float)):
        raise ProfileError(f"parameter {name!r}: {key!r} must be a number, got {type(value).__name__} "
                           f"{_show(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:
        raise ProfileError(f"parameter {name!r}: {key!r} is {_show(value)}, too large for a number") from None
    if not finite:
        raise ProfileError(f"parameter {name!r}: {key!r} is {value!r}, not a finite number")
    return value


def _implausible(p: Parameter, kind: Kind | None) -> str | None:
    """Why the value of a well-formed record cannot be right, or None.

    ``kind`` is the parameter's, from its unit; None for a name calib does not measure, which
    keeps the generic checks (a finite number or a bool). The CI is checked for every record
    that has one: a value outside its own CI, or a CI whose ends are swapped, is not a
    measurement anyone should use. The tolerance allows for the last bits of a CI computed
    by inverting a slope.
    """
    value = p.value
    if kind is not None:
        why = kind.fault(value)
        if why:
            return f"parameter {p.name!r}: the value {why}"
    if p.ci95 is not None and not isinstance(value, bool):
        lo, hi = p.ci95
        if lo > hi:
            return f"parameter {p.name!r}: 'ci95' [{lo!r}, {hi!r}] ends below where it starts"
        slack = 1e-9 * max(abs(lo), abs(hi))
        if not lo - slack <= value <= hi + slack:
            return f"parameter {p.name!r}: the value {value!r} lies outside its own ci95 [{lo!r}, {hi!r}]"
    return None


def _too_deep(value, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` nests more than ``limit`` lists or objects deep; iterative, so that the
    check itself cannot exceed the recursion limit."""
    if type(value) is not dict and type(value) is not list:
        return False
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return True
        children = v.values() if type(v) is dict else v
        for child in children:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return False


# ----------------------------------------------------------------------------------------------
# schema versions


def schema_version(doc: dict) -> int:
    """0 for a hand-written flat ``{name: number}`` map; N for ``"schema": "calib.profile/N"``.

    The version is ASCII digits only: ``int()`` would also take "-1", " 1", "1_0" and digits
    of other scripts, and a version that no migration starts from must be refused here, not
    looked up later.
    """
    schema = doc.get("schema")
    if schema is None:
        if "params" in doc:
            raise ProfileError("the file has 'params' but no 'schema' field")
        return 0
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_NAME + "/"):
        raise ProfileError(f"'schema' is {_show(schema)}, not {SCHEMA_NAME}/<version>: this is not a calib profile")
    digits = schema[len(SCHEMA_NAME) + 1:]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 9:
        raise ProfileError(f"'schema' is {_show(schema)}: its version is not a whole number")
    version = int(digits)
    if version == 0:
        raise ProfileError(f"'schema' is {_show(schema)}: version 0 is the flat map that has no 'schema' field")
    return version


def _v0_to_v1(doc: dict) -> dict:
    """A flat map that someone typed by hand, as the original proposal allowed."""
    return {"schema": f"{SCHEMA_NAME}/1", "device": {}, "software": {}, "created": None,
            "params": {name: ({"value": v, "method": "entered by hand"} if not isinstance(v, dict) else v)
                       for name, v in doc.items()}}


_MIGRATIONS = {0: _v0_to_v1}


def migrate(doc: dict) -> dict:
    """Bring a profile document of any older schema up to SCHEMA_VERSION; refuse newer ones."""
    version = schema_version(doc)
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(f"schema version {version} is newer than this calib understands "
                           f"({SCHEMA_VERSION}): upgrade calib to read it")
    while version < SCHEMA_VERSION:
        doc = _MIGRATIONS[version](doc)
        version = schema_version(doc)
    return doc


# ----------------------------------------------------------------------------------------------
# the profile object


class Profile:
    """Parameters plus the fingerprint they were measured under.

    Every record is validated once, here at construction, not at each query: heuristics call
    ``query`` in their hot path, where it is one dictionary lookup. Validation is the record's
    shape (``Parameter.from_record``) and then its plausibility: the value must be possible for
    the parameter's kind and lie within its own CI. The kind comes from the record's unit when
    it states one of the catalogue's units (``KINDS``), else from the catalogue, which is
    imported only then. A record that fails costs only itself: its ProfileError is kept,
    ``query`` returns the default with that reason and the file's name (once per name) and
    ``record`` raises it. ``unusable`` holds the reason when none of the values may be used
    (another GPU, an unreadable file): every query then returns its default. ``params`` (the
    records as stored) is read-only, so that what was validated is what is served.
    """

    def __init__(self, params: dict | None = None, *, device: dict | None = None, software: dict | None = None,
                 created: str | None = None, path: str | os.PathLike | None = None, origin: str = "memory",
                 unusable: str | None = None, notes: list[str] | None = None,
                 duplicated: dict[str, str] | None = None):
        self.params = MappingProxyType(dict(params or {}))
        self.duplicated = dict(duplicated or {})  # name -> why: written twice in the file (``_parse``)
        self.device = dict(device or {})
        self.software = dict(software or {})
        self.created = created
        self.path = Path(path) if path else None
        self.origin = origin
        self.notes = list(notes or [])
        self.looked: list[str] = []  # for the empty profile: the files the lookup tried, and why not
        self._warned: set = set()
        self._records: dict[str, Parameter] = {}
        self._faults: dict[str, ProfileError] = {}
        unstated = []
        for name, record in self.params.items():
            if name in self.duplicated:
                self._faults[name] = ProfileError(self.duplicated[name])
                continue
            try:
                if _too_deep(record):
                    raise ProfileError(f"parameter {name!r}: the record nests more than {MAX_NESTING} levels deep")
                p = Parameter.from_record(name, record)
            except ProfileError as exc:
                self._faults[name] = exc
                continue
            except Exception as exc:  # noqa: BLE001 - a record must cost only itself, whatever it holds
                self._faults[name] = ProfileError(f"parameter {name!r}: cannot be read ({type(exc).__name__})")
                continue
            kind = KINDS.get(p.unit)
            if kind is None:
                unstated.append(p)  # no unit of the catalogue's: the catalogue decides, below
            else:
                self._settle(p, kind)
        if unstated:
            self._settle_by_catalogue(unstated)
        self._usable_values = {name: p.value for name, p in self._records.items()}
        self.unusable = unusable

    def _settle(self, p: Parameter, kind: Kind | None):
        why = _implausible(p, kind)
        if why is None:
            self._records[p.name] = p
        else:
            self._faults[p.name] = ProfileError(why)

    def _settle_by_catalogue(self, params: list[Parameter]):
        """Judge records that state no unit of the catalogue's by the catalogue's unit for their
        name: a bandwidth entered by hand as ``4400`` is still a bandwidth, and one whose unit
        says ``MB/s`` is in a unit the value cannot be read in. Names the catalogue does not know
        (a user's own parameter) keep the generic checks."""
        units, why_not = _catalogue_units()
        if why_not:
            self.notes.append(f"the parameter catalogue could not be read ({why_not}): parameters without a "
                              "unit were checked as plain numbers only")
        for p in params:
            unit = units.get(p.name)
            if unit is not None and p.unit is not None and p.unit != unit:
                self._faults[p.name] = ProfileError(
                    f"parameter {p.name!r}: its unit is {_show(p.unit)}, but calib measures it in {unit!r}")
            else:
                self._settle(p, KINDS.get(unit))

    @property
    def unusable(self) -> str | None:
        return self._unusable

    @unusable.setter
    def unusable(self, reason: str | None):
        # ``query`` reads only ``_values``: an unusable profile serves nothing, so every query
        # misses and takes the slow path, which says why.
        self._unusable = reason
        self._values = {} if reason else self._usable_values

    @property
    def simulated(self) -> bool:
        return bool(self.device.get("simulated"))

    def __contains__(self, name: str) -> bool:
        return name in self.params

    def __len__(self) -> int:
        return len(self.params)

    def names(self) -> list[str]:
        return sorted(self.params)

    def __repr__(self):
        where = f" from {self.path}" if self.path else ""
        return f"<Profile {len(self)} params{where} ({self.origin}){' UNUSABLE' if self.unusable else ''}>"

    def _repr_html_(self):
        from .display import profile_html

        return profile_html(self)

    def record(self, name: str) -> Parameter:
        """The full record of a parameter; raises ProfileError where ``query`` would fall back."""
        if self._unusable:
            raise ProfileError(self._unusable)
        try:
            return self._records[name]
        except KeyError:
            pass
        except TypeError:
            raise ProfileError(f"{self._where()}: parameter names are strings, not {type(name).__name__} "
                               f"{_show(name)}") from None
        except Exception as exc:  # noqa: BLE001 - a name whose __hash__ fails is still only a bad name
            raise ProfileError(f"{self._where()}: cannot look up {_show(name)} ({type(exc).__name__}: "
                               f"{str(exc)[:200]})") from exc
        fault = self._faults.get(name)
        if fault is not None:
            raise ProfileError(f"{self._where()}: {fault}")
        if not isinstance(name, str):
            raise ProfileError(f"{self._where()}: parameter names are strings, not {type(name).__name__} "
                               f"{_show(name)}")
        # _show: a name built at run time can be a megabyte long; the message stays one line
        raise MissingParameterError(f"{self._where()} has no parameter {_show(name)}"
                                    f"{_explain_missing(name, self.params)}")

    def query(self, name: str, default=None, *, strict: bool = False):
        """The value of ``name``, or ``default`` (warning once per name) when it cannot be had.

        Never raises, except with ``strict=True``, where every fallback is a ProfileError.
        """
        try:
            return self._values[name]
        except Exception:  # a miss, or a name that cannot be hashed: the slow path says which
            return self._fallback(name, default, strict)

    def _fallback(self, name, default, strict: bool):
        """Why ``name`` has no usable value: raise it (strict) or warn once and return ``default``.

        The warning points at the caller's line, through ``query`` or ``calib.query`` (``_warn``).
        A name that has warned already returns at once: a heuristic that asks for a parameter this
        profile lacks, in its hot path, should not rebuild the message (and its suggestions) each time.
        Anything unexpected on the way is still a ProfileError (strict) or the default (lenient):
        that is the promise heuristics are written against.
        """
        try:
            key = name if type(name) is str else repr(name)
        except Exception:  # noqa: BLE001 - a name whose repr fails is still only a bad name
            key = f"<{type(name).__name__}>"
        if not strict and key in self._warned:
            return default
        try:
            return self.record(name).value
        except ProfileError as exc:
            if strict:
                raise
            message = str(exc)
        except Exception as exc:  # noqa: BLE001
            message = f"{self._where()}: cannot look up {_show(name)} ({type(exc).__name__}: {exc})"
            if strict:
                raise ProfileError(message) from exc
        self._warned.add(key)
        _warn(f"{message}; using the default {_show(default)}", ParameterWarning)
        return default

    def parameters(self) -> dict[str, Parameter | ProfileError]:
        """Every record, validated: a Parameter, or the ProfileError that says what is wrong with it
        (without the file's name: a report shows the file once, above its parameters)."""
        return {name: self._records.get(name) or self._faults[name] for name in self.names()}

    def to_document(self) -> dict:
        return {"schema": f"{SCHEMA_NAME}/{SCHEMA_VERSION}", "device": self.device, "software": self.software,
                "created": self.created, "params": dict(self.params)}

    def _where(self) -> str:
        if self.path:
            return f"profile {self.path}"
        if self.looked:
            return f"the {self.origin} profile (none usable: {'; '.join(self.looked)})"
        return f"the {self.origin} profile"


def _explain_missing(name: str, have) -> str:
    """What to say after "has no parameter NAME": a close name, or which calibration measures it.

    The parameter catalogue knows every parameter calib can measure; it is imported here, on a
    miss only, so that neither ``import calib`` nor a query that hits pays for it. A catalogue
    that cannot be imported costs only the hint.
    """
    try:
        from .catalogue import explain_missing

        return explain_missing(name, have)
    except Exception:  # noqa: BLE001
        import difflib

        close = difflib.get_close_matches(name, list(have), n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""


# ----------------------------------------------------------------------------------------------
# reading


class _NotThere(ProfileError):
    """The path names nothing (or a folder on the way is a file): the lookup goes on to the next place."""


_FILE_TYPES = ((_stat.S_ISDIR, "a directory"), (_stat.S_ISFIFO, "a FIFO (named pipe)"),
               (_stat.S_ISCHR, "a character device"), (_stat.S_ISBLK, "a block device"),
               (_stat.S_ISSOCK, "a socket"))


def _file_type(mode: int) -> str:
    for test, what in _FILE_TYPES:
        if test(mode):
            return what
    return "not a regular file"


def _read_bytes(path: Path, what: str = "profile", max_bytes: int = MAX_PROFILE_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes``; ``what`` names it in
    the messages (a profile, a fragment, a problems file, an autotune cache file: each is read this way).

    The file is opened with O_NONBLOCK and its type taken from the opened descriptor (fstat),
    not from a stat of the path before opening: opening a FIFO for reading blocks until a writer
    comes (forever, for a heuristic), and a path checked first could be swapped for a FIFO before
    the open. O_NONBLOCK changes nothing for the regular files that are then read. The read stops
    one byte past the bound, so a file that grows, or lies about its size (``/proc``), costs no
    more than the bound either.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        raise _NotThere(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise ProfileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise ProfileError(f"cannot read {what} {path!r}: {exc}") from None
    try:
        st = os.fstat(fd)
        if not _stat.S_ISREG(st.st_mode):
            raise ProfileError(f"{what} {path} is {_file_type(st.st_mode)}, not a file: give the path of a "
                               "regular file")
        if st.st_size > max_bytes:
            raise ProfileError(f"{what} {path} is {st.st_size} bytes, more than the {max_bytes} a "
                               f"{what} may have")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise ProfileError(f"{what} {path} holds more than the {max_bytes} bytes a {what} may have")
        return b"".join(chunks)
    except OSError as exc:
        raise ProfileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _parse(data: bytes, path: Path) -> Profile:
    """A Profile from the bytes of ``path``; any fault of the whole file raises ProfileError."""
    import json  # here, not at the top: `import calib` need not pay for it when nothing is read

    try:
        text = data.decode("utf-8-sig")  # a byte-order mark from a Windows editor is harmless
    except UnicodeDecodeError as exc:
        raise ProfileError(f"profile {path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                           "(JSON files are UTF-8)") from None
    duplicated: dict[int, list[str]] = {}
    try:
        doc = json.loads(text, object_pairs_hook=lambda pairs: _object(pairs, duplicated))
    except json.JSONDecodeError as exc:
        hint = " (the file looks truncated)" if exc.pos >= len(text.rstrip()) else ""
        raise ProfileError(f"profile {path} is not valid JSON{hint}: {exc.msg} (line {exc.lineno}, "
                           f"column {exc.colno})") from None
    except RecursionError:
        raise ProfileError(f"profile {path} nests lists or objects too deeply to be a profile") from None
    except ValueError as exc:  # an integer longer than Python converts (4,300 digits)
        raise ProfileError(f"profile {path} holds a number too long to read: {str(exc).split(';')[0]}") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"profile {path} must hold a JSON object, not {type(doc).__name__}")
    twice = _duplicated_params(doc, duplicated, path)
    try:
        doc = migrate(doc)
    except ProfileError as exc:
        raise type(exc)(f"profile {path}: {exc}") from None
    for key in ("params", "device", "software"):
        if not isinstance(doc.get(key, {}), dict):
            raise ProfileError(f"profile {path}: {key!r} must be an object, not {type(doc[key]).__name__}")
    for key in ("device", "software"):
        section = doc.get(key) or {}
        if _too_deep(section):
            raise ProfileError(f"profile {path}: {key!r} nests more than {MAX_NESTING} levels deep")
        for field in (*fp.HARD_FIELDS, *fp.SOFT_FIELDS):
            why = _fingerprint_fault(section.get(field))
            if why:
                raise ProfileError(f"profile {path}: {key} {field!r} {why}: the fingerprint cannot be checked")
    created = doc.get("created")
    return Profile(doc.get("params"), device=doc.get("device"), software=doc.get("software"),
                   created=created if isinstance(created, str) else None, path=path, origin="file",
                   duplicated=twice)


def _object(pairs: list, duplicated: dict) -> dict:
    """A JSON object as a dict, noting (by the dict's id) the keys it holds more than once: JSON
    keeps the last silently, so a hand edit that pasted a record in again would serve the value
    nobody checked, and a merge would write that one back and lose the other."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set = set()
        duplicated[id(obj)] = sorted({k for k, _ in pairs if k in seen or seen.add(k)})
    return obj


def _duplicated_params(doc: dict, duplicated: dict, path: Path) -> dict[str, str]:
    """Parameter name -> why it is refused, for every record written twice (or holding a field
    twice). A key twice anywhere else (the fingerprint, the schema) leaves the whole file in doubt."""
    if not duplicated:
        return {}
    flat = "schema" not in doc and "params" not in doc  # version 0: the top level is the parameters
    params = doc if flat else doc.get("params")
    twice = {}
    if isinstance(params, dict):
        for name in duplicated.pop(id(params), ()):
            twice[name] = (f"parameter {name!r}: the file holds it more than once, and which one is meant cannot "
                           "be told: keep one")
        for name, record in params.items():
            fields = duplicated.pop(id(record), None) if isinstance(record, dict) else None
            if fields and name not in twice:
                twice[name] = (f"parameter {name!r}: its record holds {', '.join(map(repr, fields[:3]))} more than "
                               "once, and which one is meant cannot be told: keep one")
    for key in ("device", "software"):
        section = doc.get(key)
        if isinstance(section, dict) and id(section) in duplicated:
            keys = ", ".join(map(repr, duplicated[id(section)][:3]))
            raise ProfileError(f"profile {path}: {key!r} holds {keys} more than once: the fingerprint is ambiguous")
    if id(doc) in duplicated:
        keys = ", ".join(map(repr, duplicated[id(doc)][:3]))
        raise ProfileError(f"profile {path} holds {keys} more than once at its top level: keep one")
    return twice


def _fingerprint_fault(value) -> str | None:
    """Why a fingerprint field cannot be compared (``calib.fingerprint`` compares text, and memory
    sizes as floats), or None."""
    if value is None or isinstance(value, (str, bool)):
        return None
    if isinstance(value, (int, float)):
        try:
            float(value)
        except OverflowError:
            return f"is {_show(value)}, too large for a number"
        return None
    return f"is {type(value).__name__} {_show(value)}, not text or a number"


def read_profile(path: str | os.PathLike) -> Profile:
    """Parse and migrate one file; any fault raises ProfileError naming the file."""
    try:
        path = Path(path)
    except TypeError:
        raise ProfileError(f"a profile path is text or a path, not {type(path).__name__} {_show(path)}") from None
    try:
        return _parse(_read_bytes(path), path)
    except ProfileError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in calib, but the caller was promised a ProfileError
        raise ProfileError(f"profile {path} cannot be read: {type(exc).__name__}: {_show(str(exc), 200)}") from exc


def user_profiles_dir() -> Path:
    """``profiles/`` of calib's folder in the user's data directory (platformdirs' ``user_data_dir``)."""
    return Path(user_data_dir()) / "profiles"


def user_data_dir() -> str:
    """platformdirs' ``user_data_dir("calib")``, without importing platformdirs where the answer is plain:
    the one place that says where calib keeps profiles, the autotune cache, runs and notebooks run by hand.

    The lookup of the default profile passes through here on the first ``calib.query``, and
    importing platformdirs (with the ``tempfile`` it imports) cost about as much as the rest of
    the load. On Linux with an absolute ``$XDG_DATA_HOME``, or none and an absolute ``$HOME``,
    every platformdirs version answers ``$XDG_DATA_HOME/calib`` or ``~/.local/share/calib``;
    anything less plain (another OS, a relative or blank value) is left to platformdirs itself.
    tests/test_profile.py checks that both agree.
    """
    if sys.platform.startswith("linux"):
        xdg = os.environ.get("XDG_DATA_HOME")
        if xdg and os.path.isabs(xdg):
            return os.path.join(xdg, "calib")
        home = os.environ.get("HOME")
        if not xdg and home and os.path.isabs(home):
            return os.path.join(home, ".local", "share", "calib")
    import platformdirs

    return platformdirs.user_data_dir("calib")


def shipped_profiles_dir() -> Path:
    """The profiles calib ships: package data of a wheel, or ``profiles/`` of the source tree."""
    from . import resources

    return resources.shipped_profiles_dir()


def candidate_paths(path=None, device: dict | None = None) -> list[tuple[str, Path]]:
    """The lookup order of DESIGN.md, as (origin, path) pairs, first match wins."""
    return list(_candidates(path, device))


def _candidates(path, device):
    """``candidate_paths`` one at a time: a lookup that stops at an explicit path or at
    ``CALIB_PROFILE`` never computes the user folder (``platformdirs`` costs milliseconds to import)."""
    if path is not None:
        yield "explicit", Path(path)
    if os.environ.get(ENV_PROFILE):
        yield ENV_PROFILE, Path(os.environ[ENV_PROFILE])
    slug = fp.device_slug(device)
    yield "user", user_profiles_dir() / f"{slug}.json"
    yield "shipped", shipped_profiles_dir() / f"{slug}.json"


def load_profile(path=None, *, device="auto", software="auto", strict: bool = False,
                 allow_foreign: bool = False) -> Profile:
    """Find and open the profile for this machine.

    ``device``/``software``: the fingerprint to check against; "auto" asks NVML or nvidia-smi,
    None skips the check. A path given explicitly (argument or ``CALIB_PROFILE``) that is missing
    or broken is an error in strict mode and a warning otherwise; in lenient mode the lookup never
    raises and ends, at worst, in an empty profile whose queries return their defaults. In strict
    mode every failure is a ProfileError.
    """
    try:
        return _load(path, device, software, strict, allow_foreign)
    except Exception as exc:  # noqa: BLE001 - "never raises" is what heuristics are written against
        if strict and isinstance(exc, ProfileError):
            raise
        message = f"calib could not look up a profile ({type(exc).__name__}: {_show(str(exc), 200)}); this is a bug"
        if strict:
            raise ProfileError(message) from exc
        _warn(message + ": every query returns its default", ProfileWarning)
        return Profile(origin="empty", unusable=message)


def _load(path, device, software, strict: bool, allow_foreign: bool) -> Profile:
    # Without a device to check against, the software is not compared either: do not detect it.
    undetected = False  # asked to check against this machine's GPU, and none could be identified
    if device == "auto" or (software == "auto" and device is not None):
        detected = fp.detect_current()
        cur_device, cur_software = detected if detected else (None, None)
        undetected = device == "auto" and cur_device is None
        device = cur_device if device == "auto" else device
        software = cur_software if software == "auto" else software

    looked = []
    for origin, candidate in _candidates(path, device):
        explicit = origin in ("explicit", ENV_PROFILE)
        try:
            profile = read_profile(candidate)
        except _NotThere:
            looked.append(f"{candidate} does not exist")
            if explicit:
                # the lookup stops here, as for a broken file: going on to the user's or the shipped
                # profile served another file's numbers (another GPU's, for a mistyped path) under
                # the name asked for, and `calib show MISSING.json` showed them with exit 0
                message = f"profile {candidate} ({origin}) does not exist"
                _fail(strict, message)
                empty = Profile(origin="empty", notes=[message + ": every query returns its default"])
                empty.looked = looked
                return empty
            continue
        except ProfileError as exc:
            _fail(strict, str(exc))
            if explicit:
                return Profile(origin=origin, path=candidate, unusable=str(exc))
            looked.append(f"{candidate} cannot be used")
            continue
        profile.origin = origin
        _check_fingerprint(profile, device, software, strict=strict, allow_foreign=allow_foreign,
                           undetected=undetected)
        _check_limits(profile, device)
        return profile
    note = "no calib profile found for this machine: every query returns its default (run `calib run`)"
    if strict:
        raise ProfileError(f"{note}; looked for: {'; '.join(looked)}")
    empty = Profile(origin="empty", notes=[note])
    empty.looked = looked
    return empty


def _fail(strict: bool, message: str):
    if strict:
        raise ProfileError(message)
    _warn(message, ProfileWarning)


def _check_fingerprint(profile: Profile, device, software, *, strict: bool, allow_foreign: bool,
                       undetected: bool = False):
    """``device`` None: no check, either asked for (``device=None``, ``--no-device-check``: silent)
    or because no GPU could be identified (``undetected``: a real GPU's profile is served with a
    warning that it was not checked)."""
    where = profile._where()
    if profile.simulated:
        profile.notes.append("measured on the SIMULATED device, not a real GPU")
        _warn(f"{where} was measured on the SIMULATED device: its numbers are a demo, not this machine's",
              ProfileWarning)
    if device is None:
        if undetected and profile.device and not profile.simulated:
            # A heuristic developer may well read a GPU's profile on a laptop (to see what a compiler
            # would choose there), but it must not pass for this machine's without a word.
            name = profile.device.get("name") or "a GPU"
            message = (f"{where} was measured on {name}; this machine's GPU could not be identified (no NVML, no "
                       "nvidia-smi), so it was not checked against it: its numbers are used as they are")
            profile.notes.append(message)
            _warn(message, ProfileWarning)
        return
    hard = fp.hard_differences(profile.device, device)
    if hard:
        message = (f"{where} was measured on another device ({'; '.join(hard)}): its numbers are not this "
                   "machine's (`calib run` measures this one)")
        if strict:
            raise ProfileError(message)
        if not allow_foreign:
            profile.unusable = message + "; queries return their defaults (allow_foreign=True to use it anyway)"
        _warn(message, ProfileWarning)
        return
    soft = fp.soft_differences(profile.software, software)
    conditions = fp.condition_differences(profile.device, device)
    if soft or conditions:
        changed = "; ".join([*(["other software (" + "; ".join(soft) + ")"] if soft else []),
                             *(["other device settings (" + "; ".join(conditions) + ")"] if conditions else [])])
        message = (f"{where} was measured under {changed}: its numbers may have drifted; `calib verify` checks "
                   "them in seconds, `calib run` re-measures when you can")
        profile.notes.append(message)
        _warn(message, ProfileWarning)
    elif profile.origin == "shipped":
        message = (f"{where} is the profile shipped with calib for this GPU, not a measurement of this "
                   "machine: `calib verify` checks it here in seconds; run `calib run` for your own")
        profile.notes.append(message)
        _warn(message, ProfileWarning)


def _check_limits(profile: Profile, device):
    """Warn once, at load, about values above the device's theoretical limits (``calib.limits``),
    computed from the profile's own fingerprint, completed by this machine's where it is the same
    device (a profile written before the fingerprint recorded the memory clock). The values are
    still served: the warning and the record's flag say what to distrust."""
    from . import limits

    own = dict(profile.device)
    if isinstance(device, dict) and not profile.unusable and not fp.hard_differences(own, device):
        own = {**device, **own}
    over = limits.exceeded(profile._records, own)
    if over:
        message = (f"{profile._where()} holds values above this device's theoretical limits: {'; '.join(over)}; "
                   "`calib verify` re-measures them, `calib run` calibrates again")
        profile.notes.append(message)
        _warn(message, ProfileWarning)


# ----------------------------------------------------------------------------------------------
# writing


def _lock(path: Path):
    from filelock import FileLock

    return FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)


def _target(path) -> Path:
    """Where a write to ``path`` lands: through a symbolic link to the file it names, so that a
    profile kept elsewhere and linked into place stays linked (and the lock is the target's, which
    every route to the file shares)."""
    path = Path(path)
    if os.path.islink(path):
        return Path(os.path.realpath(path))
    return path


def _temporary_name(path: Path) -> Path:
    """A temporary file beside ``path`` named after this process, so that a later writer can tell
    a dead writer's leftovers from a live one's (``_remove_stale_temporaries``)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def _remove_stale_temporaries(path: Path):
    """Delete the temporary files that killed writers left beside ``path``. Called under the
    profile's lock, where no writer of this calib can be mid-write: what is left is stale, except
    (to be safe on filesystems whose locks do not reach every host) a file named after a process
    that is still alive. Names without a process id come from calibs before this one."""
    prefix = f".{path.name}."
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        try:
            os.unlink(path.parent / name)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process holds the lock and is not writing yet: its own leftovers are stale
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's process, alive
        return True
    return True


def _write_atomic(path: Path, doc: dict):
    """Write to a temporary file beside the target, fsync, then rename over it: a reader sees the
    old file or the new one, never half of one, even if this process is killed.

    The new file keeps the mode (and, where permitted, the owner and group) of the file it
    replaces: a profile shared with 0644 must not become 0600 and unreadable to the others. A new
    file gets the mode any new file gets, 0666 less the umask. A symbolic link is written through.
    """
    import json

    path = _target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=2, sort_keys=False, allow_nan=False) + "\n"
    try:
        old = os.stat(path)
    except FileNotFoundError:
        old = None
    if old is not None and not _stat.S_ISREG(old.st_mode):
        raise ProfileError(f"profile {path} is {_file_type(old.st_mode)}, not a file: give the path of a "
                           "profile's .json file")
    if old is not None and (not old.st_mode & 0o222 or not os.access(path, os.W_OK)):
        # the rename below needs only the folder's permission: a file its owner made read-only (or
        # root's write past any mode) was replaced all the same
        raise ProfileError(f"profile {path} is read-only (mode {_stat.S_IMODE(old.st_mode):04o}); it is left as "
                           "it is: make it writable (chmod u+w) to write to it, or write to another path")
    tmp = _temporary_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        if old is not None:
            if hasattr(os, "fchown") and (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
                try:
                    os.fchown(fd, old.st_uid, old.st_gid)
                except OSError:
                    pass  # not ours to give away: the file becomes the writer's, as any edit would make it
            os.fchmod(fd, _stat.S_IMODE(old.st_mode)) if hasattr(os, "fchmod") else os.chmod(tmp, old.st_mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fd = None
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def _validated(params) -> dict:
    if not isinstance(params, dict):
        raise ProfileError(f"'params' must be an object of records, not {type(params).__name__}")
    for name, record in params.items():
        Parameter.from_record(name, record)
    return params


def _written(path: Path, write):
    """Run ``write`` (a read-modify-write of ``path``) under the profile's lock, after removing
    what killed writers left; an OS error (a full disk, a read-only folder, a lock never
    released) becomes a ProfileError that names the file, like every other refusal."""
    try:
        with _lock(path):
            _remove_stale_temporaries(path)
            return write()
    except ProfileError:
        raise
    except OSError as exc:
        raise ProfileError(f"cannot write profile {path}: {exc.strerror or exc}") from exc


def write_profile(path, profile: Profile | dict) -> Path:
    """Replace ``path`` with ``profile`` atomically, under the profile's lock.

    A directory, FIFO or device at ``path`` is refused, never replaced.
    """
    given = Path(path)
    target = _target(given)
    doc = profile.to_document() if isinstance(profile, Profile) else migrate(dict(profile))
    if isinstance(doc.get("params"), dict) and isinstance(doc.get("device"), dict):
        from .limits import annotate

        doc["params"] = annotate(doc["params"], doc["device"])
    _validated(doc.get("params", {}))
    _written(target, lambda: _write_atomic(target, doc))
    return given


def merge_into(path, params: dict, *, device: dict, software: dict, replace: bool = False) -> Profile:
    """Add ``params`` (name -> record) to the profile at ``path`` under its lock.

    Read-modify-write happens inside the lock, so several processes merging their fragments into
    one profile lose nothing. An existing profile of another device is refused rather than mixed;
    a regular file that is not a valid profile is kept beside the new file as
    ``<name>.corrupt-<time>`` and replaced. Anything else at ``path`` (a directory, a FIFO, a
    file that cannot be read) is refused with a ProfileError and left as it is. ``replace``
    starts from no parameters (a fresh calibration of the whole suite).
    """
    given = Path(path)
    target = _target(given)
    _validated(params)
    if isinstance(params, dict) and isinstance(device, dict):
        from .limits import annotate

        params = annotate(params, device)  # limit and ratio_to_limit in diagnostics; a flag above it

    def merge() -> dict:
        merged: dict = {}
        try:
            data = _read_bytes(target)
        except _NotThere:
            data = None
        # anything else _read_bytes refuses (a directory, a FIFO, a device, no permission) propagates
        if data is not None and not replace:
            try:
                current = _parse(data, given)
            except NewerSchemaError as exc:
                # not corrupt: a newer calib's profile, whose records this calib cannot carry over;
                # replacing it with an older schema would take them from the calib that wrote them
                raise ProfileError(f"{exc}; it is left as it is: merge with that calib, or write this calibration "
                                   "to another path") from None
            except ProfileError as exc:
                backup = _backup_name(target)
                os.replace(target, backup)
                _warn(f"{exc}; moved it to {backup} and started a new profile", ProfileWarning)
            else:
                hard = fp.hard_differences(current.device, device)
                if current.device and hard:
                    raise ProfileError(f"profile {given} belongs to another device ({'; '.join(hard)}); "
                                       "write this calibration to another path")
                if current.duplicated:  # writing back would keep one of the two and lose the other
                    raise ProfileError(f"profile {given}: {next(iter(current.duplicated.values()))}; it is left "
                                       "as it is: mend it, or write this calibration to another path")
                merged = dict(current.params)
                _refuse_unwritable(given, merged)
        merged.update(params)
        doc = {"schema": f"{SCHEMA_NAME}/{SCHEMA_VERSION}", "device": device, "software": software,
               "created": utc_now(), "params": dict(sorted(merged.items()))}
        _write_atomic(target, doc)
        return doc

    doc = _written(target, merge)
    return Profile(doc["params"], device=device, software=software, created=doc["created"], path=given,
                   origin="file")


def _refuse_unwritable(given: Path, records: dict):
    """A record that JSON cannot hold (NaN, infinity: a hand edit, another tool) would fail the
    write after the read; refuse before, naming it, and leave the file as it is: dropping the
    record would lose what the user put there, and the profile is theirs to mend."""
    import json

    bad = []
    for name, record in records.items():
        try:
            json.dumps(record, allow_nan=False)
        except (TypeError, ValueError):
            bad.append(name)
    if bad:
        raise ProfileError(f"profile {given} holds records that cannot be written back (NaN, infinity or an "
                           f"object JSON cannot hold): {', '.join(map(repr, bad[:5]))}"
                           f"{' ...' if len(bad) > 5 else ''}; it is left as it is: mend or remove them, or write "
                           "this calibration to another path")


def _backup_name(path: Path) -> Path:
    """``<name>.corrupt-<time>``, numbered when a backup of the same second exists (two corrupt
    files moved aside in one second must not overwrite one another)."""
    base = path.with_name(f"{path.name}.corrupt-{utc_now().replace(':', '')}")
    candidate, k = base, 1
    while os.path.lexists(candidate):
        candidate = base.with_name(f"{base.name}-{k}")
        k += 1
    return candidate
