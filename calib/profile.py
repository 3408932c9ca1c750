"""The machine profile: measured parameters that heuristics query by name, with a default.

The profile is forgiving where heuristics read it and strict where calibrations write it. A
heuristic must never crash because a file is missing, truncated, from another GPU or from a newer
calib: ``query`` falls back to the caller's default and says why, once per name. ``strict=True``
turns every such fallback into an exception, for tests and for tools that must not guess.

Files are JSON only (loading runs no code), carry an integer schema version that older files are
migrated forward from, and are replaced atomically under a file lock so that a killed writer
leaves the previous profile intact and concurrent writers merge rather than overwrite.
"""

from __future__ import annotations

import math
import os
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


class ProfileError(CalibError, ValueError):
    """A profile file or parameter cannot be used; the message names the file and the problem."""


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
    import datetime as _dt  # only writers need the time; `import calib` should not pay for datetime

    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


_FIELDS = ("name", "value", "ci95", "unit", "n", "method", "r2", "flags", "diagnostics", "source", "measured")


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

    def __repr__(self):
        return "Parameter(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in _FIELDS) + ")"

    def __reduce__(self):  # pickle and copy go through __init__, since __setattr__ refuses
        return (self.__class__, self._astuple())

    @classmethod
    def from_record(cls, name: str, record) -> "Parameter":
        """Validate one stored record; raises ProfileError naming the parameter and the fault."""
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
                raise ProfileError(f"parameter {name!r}: 'ci95' must be a pair [low, high], got {ci95!r}")
            ci95 = (_finite_number(name, "ci95", ci95[0]), _finite_number(name, "ci95", ci95[1]))
        flags = record.get("flags") or ()
        if not isinstance(flags, (list, tuple)):
            raise ProfileError(f"parameter {name!r}: 'flags' must be a list of strings")
        return cls(name=name, value=value, ci95=ci95, unit=record.get("unit"), n=record.get("n"),
                   method=record.get("method"), r2=record.get("r2"), flags=tuple(map(str, flags)),
                   diagnostics=dict(record.get("diagnostics") or {}), source=record.get("source"),
                   measured=record.get("measured"))

    def to_record(self) -> dict:
        out = {"value": self.value, "ci95": list(self.ci95) if self.ci95 else None, "unit": self.unit,
               "n": self.n, "method": self.method, "r2": self.r2, "flags": list(self.flags),
               "diagnostics": self.diagnostics, "source": self.source, "measured": self.measured}
        return {k: v for k, v in out.items() if v is not None}


def _finite_number(name: str, key: str, value) -> float:
    if isinstance(value, bool):  # flags such as "matmul.splitk.use_atomics" stay booleans
        return value
    if not isinstance(value, (int, float)):
        raise ProfileError(f"parameter {name!r}: {key!r} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ProfileError(f"parameter {name!r}: {key!r} is {value!r}, not a finite number")
    return value


# ----------------------------------------------------------------------------------------------
# schema versions


def schema_version(doc: dict) -> int:
    """0 for a hand-written flat ``{name: number}`` map; N for ``"schema": "calib.profile/N"``."""
    schema = doc.get("schema")
    if schema is None:
        if "params" in doc:
            raise ProfileError("the file has 'params' but no 'schema' field")
        return 0
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_NAME + "/"):
        raise ProfileError(f"'schema' is {schema!r}, not {SCHEMA_NAME}/<version>: this is not a calib profile")
    try:
        return int(schema.split("/", 1)[1])
    except ValueError:
        raise ProfileError(f"'schema' is {schema!r}: its version is not an integer") from None


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
        raise ProfileError(f"schema version {version} is newer than this calib understands "
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
    ``query`` in their hot path, where it is one dictionary lookup. A record that fails
    validation costs only itself: its ProfileError is kept, ``query`` returns the default with
    that reason (once per name) and ``record`` raises it. ``unusable`` holds the reason when none
    of the values may be used (another GPU, an unreadable file): every query then returns its
    default. ``params`` (the records as stored) is read-only, so that what was validated is what
    is served.
    """

    def __init__(self, params: dict | None = None, *, device: dict | None = None, software: dict | None = None,
                 created: str | None = None, path: str | os.PathLike | None = None, origin: str = "memory",
                 unusable: str | None = None, notes: list[str] | None = None):
        self.params = MappingProxyType(dict(params or {}))
        self.device = dict(device or {})
        self.software = dict(software or {})
        self.created = created
        self.path = Path(path) if path else None
        self.origin = origin
        self.notes = list(notes or [])
        self._warned: set = set()
        self._records: dict[str, Parameter] = {}
        self._faults: dict[str, ProfileError] = {}
        for name, record in self.params.items():
            try:
                self._records[name] = Parameter.from_record(name, record)
            except ProfileError as exc:
                self._faults[name] = exc
        self._usable_values = {name: p.value for name, p in self._records.items()}
        self.unusable = unusable

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

    def record(self, name: str) -> Parameter:
        """The full record of a parameter; raises where ``query`` would fall back."""
        if self._unusable:
            raise ProfileError(self._unusable)
        try:
            return self._records[name]
        except KeyError:
            pass
        fault = self._faults.get(name)
        if fault is not None:
            raise ProfileError(str(fault))
        raise MissingParameterError(f"{self._where()} has no parameter {name!r}{_explain_missing(name, self.params)}")

    def query(self, name: str, default=None, *, strict: bool = False):
        """The value of ``name``, or ``default`` (warning once per name) when it cannot be had.

        Never raises, except with ``strict=True``, where every fallback is a ProfileError.
        """
        try:
            return self._values[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name, which the slow path reports
            return self._fallback(name, default, strict, 3)

    def _fallback(self, name, default, strict: bool, stacklevel: int):
        """Why ``name`` has no usable value: raise it (strict) or warn once and return ``default``.

        ``stacklevel`` points the warning at the caller's line, through ``query`` or ``calib.query``.
        A name that has warned already returns at once: a heuristic that asks for a parameter this
        profile lacks, in its hot path, should not rebuild the message (and its suggestions) each time.
        """
        if not strict and isinstance(name, str) and name in self._warned:
            return default
        try:
            if not isinstance(name, str):
                raise ProfileError(f"parameter names are strings, not {type(name).__name__} {name!r}")
            return self.record(name).value
        except ProfileError as exc:
            if strict:
                raise
            key = name if isinstance(name, str) else repr(name)
            if key not in self._warned:
                self._warned.add(key)
                warnings.warn(f"{exc}; using the default {default!r}", ParameterWarning, stacklevel=stacklevel)
            return default

    def parameters(self) -> dict[str, Parameter | ProfileError]:
        """Every record, validated: a Parameter, or the ProfileError that says what is wrong."""
        return {name: self._records.get(name) or self._faults[name] for name in self.names()}

    def to_document(self) -> dict:
        return {"schema": f"{SCHEMA_NAME}/{SCHEMA_VERSION}", "device": self.device, "software": self.software,
                "created": self.created, "params": dict(self.params)}

    def _where(self) -> str:
        return f"profile {self.path}" if self.path else f"the {self.origin} profile"


def _explain_missing(name: str, have) -> str:
    """What to say after "has no parameter NAME": a close name, or which calibration measures it.

    The parameter catalogue knows every parameter calib can measure; it is imported here, on a
    miss only, so that neither ``import calib`` nor a query that hits pays for it.
    """
    try:
        from .catalogue import explain_missing
    except ImportError:  # a calib without the catalogue: suggest a close name among those we have
        import difflib

        close = difflib.get_close_matches(name, list(have), n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""
    return explain_missing(name, have)


# ----------------------------------------------------------------------------------------------
# reading


def read_profile(path: str | os.PathLike) -> Profile:
    """Parse and migrate one file; any fault raises ProfileError naming the file."""
    import json  # here, not at the top: `import calib` need not pay for it when nothing is read

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = " (the file looks truncated)" if exc.pos >= len(text.rstrip()) else ""
        raise ProfileError(f"profile {path} is not valid JSON{hint}: {exc.msg} (line {exc.lineno}, "
                           f"column {exc.colno})") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"profile {path} must hold a JSON object, not {type(doc).__name__}")
    try:
        doc = migrate(doc)
    except ProfileError as exc:
        raise ProfileError(f"profile {path}: {exc}") from None
    for key, kind in (("params", dict), ("device", dict), ("software", dict)):
        if not isinstance(doc.get(key, {}), kind):
            raise ProfileError(f"profile {path}: {key!r} must be an object, not {type(doc[key]).__name__}")
    return Profile(doc.get("params"), device=doc.get("device"), software=doc.get("software"),
                   created=doc.get("created"), path=path, origin="file")


def user_profiles_dir() -> Path:
    """``profiles/`` of calib's folder in the user's data directory (platformdirs' ``user_data_dir``)."""
    return Path(_user_data_dir()) / "profiles"


def _user_data_dir() -> str:
    """platformdirs' ``user_data_dir("calib")``, without importing platformdirs where the answer is plain.

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
    raises and ends, at worst, in an empty profile whose queries return their defaults.
    """
    # Without a device to check against, the software is not compared either: do not detect it.
    if device == "auto" or (software == "auto" and device is not None):
        detected = fp.detect_current()
        cur_device, cur_software = detected if detected else (None, None)
        device = cur_device if device == "auto" else device
        software = cur_software if software == "auto" else software

    for origin, candidate in _candidates(path, device):
        explicit = origin in ("explicit", ENV_PROFILE)
        if not candidate.exists():
            if explicit:
                _fail(strict, f"profile {candidate} ({origin}) does not exist")
            continue
        try:
            profile = read_profile(candidate)
        except ProfileError as exc:
            _fail(strict, str(exc))
            if explicit:
                return Profile(origin=origin, path=candidate, unusable=str(exc))
            continue
        profile.origin = origin
        _check_fingerprint(profile, device, software, strict=strict, allow_foreign=allow_foreign)
        return profile
    note = "no calib profile found for this machine: every query returns its default (run `calib run`)"
    if strict:
        raise ProfileError(note)
    return Profile(origin="empty", notes=[note])


def _fail(strict: bool, message: str):
    if strict:
        raise ProfileError(message)
    warnings.warn(message, ProfileWarning, stacklevel=3)


def _check_fingerprint(profile: Profile, device, software, *, strict: bool, allow_foreign: bool):
    where = profile._where()
    if profile.simulated:
        profile.notes.append("measured on the SIMULATED device, not a real GPU")
        warnings.warn(f"{where} was measured on the SIMULATED device: its numbers are a demo, "
                      "not this machine's", ProfileWarning, stacklevel=3)
    if device is None:
        if profile.device and not profile.simulated:
            profile.notes.append("this machine's GPU could not be identified; the device was not checked")
        return
    hard = fp.hard_differences(profile.device, device)
    if hard:
        message = (f"{where} was measured on another device ({'; '.join(hard)}): its numbers are not this "
                   "machine's")
        if strict:
            raise ProfileError(message)
        if not allow_foreign:
            profile.unusable = message + "; queries return their defaults (allow_foreign=True to use it anyway)"
        warnings.warn(message, ProfileWarning, stacklevel=3)
        return
    soft = fp.soft_differences(profile.software, software)
    if soft:
        message = f"{where} was measured under other software ({'; '.join(soft)}): re-measure when you can"
        profile.notes.append(message)
        warnings.warn(message, ProfileWarning, stacklevel=3)
    elif profile.origin == "shipped":
        message = (f"{where} is the profile shipped with calib for this GPU, not a measurement of this "
                   "machine: run `calib run` for your own")
        profile.notes.append(message)
        warnings.warn(message, ProfileWarning, stacklevel=3)


# ----------------------------------------------------------------------------------------------
# writing


def _lock(path: Path):
    from filelock import FileLock

    return FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)


def _write_atomic(path: Path, doc: dict):
    """Write to a temporary file beside the target, fsync, then rename over it: a reader sees the
    old file or the new one, never half of one, even if this process is killed."""
    import json
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=2, sort_keys=False, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
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


def _validated(params: dict) -> dict:
    for name, record in params.items():
        Parameter.from_record(name, record)
    return params


def write_profile(path, profile: Profile | dict) -> Path:
    """Replace ``path`` with ``profile`` atomically, under the profile's lock."""
    path = Path(path)
    doc = profile.to_document() if isinstance(profile, Profile) else migrate(dict(profile))
    _validated(doc.get("params", {}))
    with _lock(path):
        _write_atomic(path, doc)
    return path


def merge_into(path, params: dict, *, device: dict, software: dict, replace: bool = False) -> Profile:
    """Add ``params`` (name -> record) to the profile at ``path`` under its lock.

    Read-modify-write happens inside the lock, so several processes merging their fragments into
    one profile lose nothing. An existing profile of another device is refused rather than mixed;
    an unreadable one is kept beside the new file as ``<name>.corrupt-<time>`` and replaced.
    ``replace`` starts from no parameters (a fresh calibration of the whole suite).
    """
    path = Path(path)
    _validated(params)
    with _lock(path):
        merged: dict = {}
        if path.exists() and not replace:
            try:
                current = read_profile(path)
            except ProfileError as exc:
                backup = path.with_name(f"{path.name}.corrupt-{utc_now().replace(':', '')}")
                os.replace(path, backup)
                warnings.warn(f"{exc}; moved it to {backup} and started a new profile", ProfileWarning,
                              stacklevel=2)
            else:
                hard = fp.hard_differences(current.device, device)
                if current.device and hard:
                    raise ProfileError(f"profile {path} belongs to another device ({'; '.join(hard)}); "
                                       "write this calibration to another path")
                merged = dict(current.params)
        merged.update(params)
        doc = {"schema": f"{SCHEMA_NAME}/{SCHEMA_VERSION}", "device": device, "software": software,
               "created": utc_now(), "params": dict(sorted(merged.items()))}
        _write_atomic(path, doc)
    return Profile(doc["params"], device=device, software=software, created=doc["created"], path=path,
                   origin="file")
