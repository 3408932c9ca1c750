"""Layers of a scheduling heuristic: built-in, a user's heuristic from Python, a per-problem override.

For each scheduler kind (``pointwise``, ``normalization``, ``matmul_splitk``) a heuristic is a
function ``(descriptor, profile) -> launch parameters`` (a dict of knobs). :func:`choose` asks the
layers in this order, the first that answers wins:

1. an **override** for this very problem: a mapping from ``calib.autotune.descriptor_key`` to
   parameters (:func:`set_overrides`, :func:`load_overrides` from JSON or JSON lines), because a
   user who measured one shape knows better than any model;
2. the **user's heuristics**, innermost first: one registered with :func:`register` (for the whole
   process) or :func:`using` (inside a ``with`` block). A replacing heuristic is called as
   ``fn(descriptor, profile)``; a wrapping one (``wrap=True``) as ``fn(descriptor, profile,
   builtin)`` where ``builtin`` is the answer of the layer below it (so a user can adjust the
   built-in's answer rather than rewrite it, as the compiler team's proposal asks);
3. the **built-in** heuristic of the kind (it ranks the family's candidates with the predictor).

A user's heuristic that raises (any Exception) comes out as :class:`UserHeuristicError`, which names
the kind, the layer (replacement or wrapper, the function's qualified name, process-wide or in a
``with`` block) and the problem, with the original exception as its ``__cause__``. The built-in's
own exceptions pass unchanged: they are calib's bugs, not the user's.

Thread-safety: process-wide registrations are kept under a lock and replaced as a whole (readers
never see a half-made list); ``with using(...)`` layers are per thread *and* per asyncio task
(a ``contextvars.ContextVar``), so a block in one thread never changes another thread's choices,
and leaving the block restores what was there, also when the block raises.

Profiles are read only through ``query(name, default)`` (:class:`calib.profile.Profile.query` or
an object with that method), so every heuristic works, with warnings, on an empty profile.
``device.<field>`` names (``device.sm_count``) read the profile's fingerprint the same way
(:func:`read`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import threading
import warnings
from pathlib import Path
from typing import Callable

from ..errors import CalibError
from ..strict_json import DuplicateKeyError, unique_keys

KINDS = ("pointwise", "normalization", "matmul_splitk")
_HEX64 = re.compile("[0-9a-f]{64}")
_LINE_END = re.compile(r"\r\n|\r|\n")


class HeuristicError(CalibError, ValueError):
    """A heuristic was registered or asked for wrongly (an unknown kind, a bad answer)."""


class UserHeuristicError(HeuristicError):
    """A user's heuristic (a layer added by :func:`register` or :func:`using`) raised: names the kind,
    the layer (replacement or wrapper, its function's qualified name) and the problem, with what it
    raised; the exception itself is ``__cause__``, its traceback there for debugging the user's code.
    A built-in heuristic that raises is calib's bug and is never turned into this error."""

    def __init__(self, message: str, *, kind: str, layer: str, function: str, wrap: bool, problem_key: str | None):
        super().__init__(message)
        self.kind, self.layer, self.function, self.wrap, self.problem_key = kind, layer, function, wrap, problem_key


class OverrideFileError(CalibError, ValueError):
    """An override file that cannot be read: names the file, the line and what is wrong."""


class HeuristicWarning(UserWarning):
    pass


# ----------------------------------------------------------------------------------------------
# reading the profile: query(name, default) and nothing else

def read(profile, name: str, default):
    """``profile.query(name, default)``; ``device.<field>`` from the profile's fingerprint.

    Never raises: a profile without the name, a broken profile, or an object without ``query``
    gives ``default`` (``Profile.query`` warns once per name; a missing device field warns here)."""
    if not isinstance(name, str):
        _warn_once(("name", type(name).__name__), f"a parameter name must be a string, not {type(name).__name__}; "
                   f"using the default {default!r}")
        return default
    if name.startswith("device."):
        q = getattr(profile, "query_device", None)
        if q is not None:  # a wrapper (ReadRecorder) that wants to see device reads too
            return q(name, default)
        device = getattr(profile, "device", None) or {}
        value = device.get(name[len("device."):]) if isinstance(device, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return value
        _warn_once(("device", id(profile), name),
                   f"the profile has no {name}; using the default {default!r}")
        return default
    try:
        return profile.query(name, default)
    except Exception as exc:  # noqa: BLE001 - a heuristic must never fail for want of a number
        _warn_once(("query", id(profile), name), f"query({name!r}) failed ({type(exc).__name__}: {exc}); "
                   f"using the default {default!r}")
        return default


_warned: set = set()


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, HeuristicWarning, stacklevel=4)


class ReadRecorder:
    """Wraps a profile and records every name a heuristic reads (``names``), with the value served.

    Used by the tests to show which parameters each heuristic depends on, and by
    ``calib heuristics evaluate --json`` to report them."""

    def __init__(self, profile):
        self.profile = profile
        self.names: dict[str, object] = {}

    def query(self, name, default=None, **kw):
        value = self.profile.query(name, default, **kw)
        self.names[name] = value
        return value

    def query_device(self, name, default):
        value = read(self.profile, name, default)
        self.names[name] = value
        return value

    @property
    def device(self):
        return getattr(self.profile, "device", {})

    @property
    def software(self):
        """The wrapped profile's, as its device: a correction checks both (predictor.measured_on)."""
        return getattr(self.profile, "software", {})

    def record(self, name):
        return self.profile.record(name)


# ----------------------------------------------------------------------------------------------
# the layers

class _Layer:
    __slots__ = ("fn", "wrap", "name", "scope")

    def __init__(self, fn: Callable, wrap: bool, name: str, scope: str = "registered for the process"):
        self.fn, self.wrap, self.name, self.scope = fn, wrap, name, scope

    def call(self, kind: str, descriptor, *args):
        """``fn(descriptor, *args)``; whatever it raises (an Exception: never KeyboardInterrupt or
        SystemExit) comes out as UserHeuristicError naming this layer and the problem, chained to it.
        Three pass as they are: a HeuristicError (a layer above or below named itself already, or the
        user declines the problem on purpose: an evaluation counts that choice as failed), and what
        the built-in raised when the layer called it (:func:`calib.heuristics.builtin`: calib's bug,
        not the user's)."""
        try:
            return self.fn(descriptor, *args)
        except HeuristicError:
            raise
        except Exception as exc:
            if getattr(exc, BUILTIN_RAISED, False):
                raise
            raise _user_error(self, kind, descriptor, exc) from exc


BUILTIN_RAISED = "_calib_builtin_raised"  # set on an exception the built-in raised inside a user's layer


def mark_builtin(exc: BaseException) -> None:
    """Mark ``exc`` as the built-in heuristic's own, so that a user layer that called it does not
    take the blame (:meth:`_Layer.call`)."""
    try:
        setattr(exc, BUILTIN_RAISED, True)
    except Exception:  # noqa: BLE001 - an exception type that takes no attribute is wrapped, as before
        pass


def _qualified_name(fn) -> str:
    """``module.Qualified.name`` of a function (of a callable object: its class's), for a message."""
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or repr(fn)
    return f"{module}.{name}" if module and module != "builtins" else name


def _problem_key(descriptor, kind: str) -> str | None:
    """The descriptor key of the problem a layer was asked about: the family's (defaults filled in),
    else as given; None for a descriptor that has neither (the user's layer was given it anyway)."""
    try:
        return _key_of(descriptor, kind)[0]
    except Exception:  # noqa: BLE001 - not the family's descriptor: keyed as given, if it can be
        return _as_written_key(descriptor)


def _user_error(layer: _Layer, kind: str, descriptor, exc: Exception) -> UserHeuristicError:
    import traceback

    function = _qualified_name(layer.fn)
    key = _problem_key(descriptor, kind)
    shown = _desc_text(descriptor)
    frames = traceback.extract_tb(exc.__traceback__)[1:]  # less Layer.call's own frame
    # where: the last line of the user's own function's file that it passed (not NumPy's, nor calib's
    # where their function called in), else where the exception was raised
    own = getattr(getattr(layer.fn, "__code__", None), "co_filename", None)
    frame = next((f for f in reversed(frames) if f.filename == own), frames[-1] if frames else None)
    where = f" at {frame.filename}:{frame.lineno}" if frame is not None else ""
    try:  # on one line, and short: the CLI prints this message alone
        said = " ".join(str(exc).split())
    except Exception:  # noqa: BLE001 - an exception whose own text fails: its type is named
        said = ""
    said = said if len(said) <= 200 else said[:197] + "..."
    what = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    role = "wrapper" if layer.wrap else "replacement"
    named = f"{layer.name!r} ({function})" if layer.name != getattr(layer.fn, "__name__", None) else function
    message = (f"the user heuristic {named}, a {role} layer for {kind} {layer.scope}, raised {what}{where} "
               f"on problem {shown} (key {key or 'none: not a descriptor'})")
    return UserHeuristicError(message, kind=kind, layer=layer.name, function=function, wrap=layer.wrap,
                              problem_key=key)


def _desc_text(descriptor, limit: int = 160) -> str:
    """A descriptor as a short text: its fields (a dataclass's, a mapping's), else its repr."""
    import dataclasses

    try:
        if dataclasses.is_dataclass(descriptor) and not isinstance(descriptor, type):
            fields = {f.name: getattr(descriptor, f.name) for f in dataclasses.fields(descriptor)
                      if not f.name.startswith("_")}
        elif isinstance(descriptor, dict):
            fields = descriptor
        else:
            fields = None
        text = (json.dumps(fields, default=str, sort_keys=False) if fields is not None else repr(descriptor))
    except Exception:  # noqa: BLE001 - a descriptor that cannot even be shown: its type names it
        text = f"<{type(descriptor).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


_lock = threading.Lock()
_process: dict[str, tuple] = {k: () for k in KINDS}  # kind -> layers, outermost last; replaced whole
_scoped: contextvars.ContextVar = contextvars.ContextVar("calib_heuristics_scoped", default=())
_overrides: dict[str, dict] = {}  # descriptor key -> {kind: params} or {"*": params}
_builtins: dict[str, Callable] = {}


def _check_kind(kind: str):
    if kind not in KINDS:
        raise HeuristicError(f"no scheduler kind {kind!r}; the kinds are {', '.join(KINDS)}")


def _builtin(kind: str) -> Callable:
    fn = _builtins.get(kind)  # a test's stand-in; else the family's own, looked up each time
    if fn is None:
        from . import families

        fn = families.family(kind).heuristic
    return fn


def register(kind: str, fn: Callable, *, wrap: bool = False, name: str | None = None) -> Callable:
    """Add ``fn`` as this process's heuristic for ``kind`` (on top of any registered before).

    ``wrap=False``: ``fn(descriptor, profile)`` replaces what is below. ``wrap=True``:
    ``fn(descriptor, profile, below)`` receives the answer of the layer below (the built-in, or a
    heuristic registered earlier). Returns a function that removes this registration."""
    _check_kind(kind)
    if not callable(fn):
        raise HeuristicError(f"a heuristic must be callable, not {type(fn).__name__}")
    layer = _Layer(fn, bool(wrap), name or getattr(fn, "__name__", "user"))
    with _lock:
        _process[kind] = _process[kind] + (layer,)

    def unregister():
        with _lock:
            _process[kind] = tuple(x for x in _process[kind] if x is not layer)

    return unregister


def clear(kind: str | None = None):
    """Remove the process-wide registrations (of one kind, or all) and every override."""
    with _lock:
        for k in ([kind] if kind else KINDS):
            _check_kind(k)
            _process[k] = ()
        if kind is None:
            _overrides.clear()


@contextlib.contextmanager
def using(kind: str, fn: Callable, *, wrap: bool = False, name: str | None = None):
    """``with using("pointwise", my_fn): ...``: ``fn`` is the heuristic of ``kind`` inside the
    block, in this thread (or task) only; on leaving, by any way, the previous layers are back."""
    _check_kind(kind)
    if not callable(fn):
        raise HeuristicError(f"a heuristic must be callable, not {type(fn).__name__}")
    layer = _Layer(fn, bool(wrap), name or getattr(fn, "__name__", "user"), scope="in a `with using(...)` block")
    token = _scoped.set(_scoped.get() + ((kind, layer),))
    try:
        yield
    finally:
        _scoped.reset(token)


def layers(kind: str) -> list[str]:
    """Names of the layers that :func:`choose` would consult for ``kind``, innermost first."""
    _check_kind(kind)
    scoped = [ly.name for k, ly in reversed(_scoped.get()) if k == kind]
    return scoped + [ly.name for ly in reversed(_process[kind])] + ["builtin"]


# ----------------------------------------------------------------------------------------------
# files a user writes: override files here, problem files for the evaluation

def read_text(path: Path, what: str, error: type) -> str:
    """The UTF-8 text of ``path``, or ``error`` (a CalibError) saying in one line why not. Only a
    regular file of a bounded size is read (as a profile is): a FIFO blocked for ever, /dev/zero
    read until memory ran out. A path ending in ``.gz`` is gzip-compressed (the large probe
    recordings under bench/results are stored so, ``gzip -9 -n``): it is decompressed here, to
    the same bound, so a gzip bomb is refused rather than inflated."""
    from ..profile import ProfileError, _read_bytes

    try:
        data = _read_bytes(path, what)
    except ProfileError as exc:  # missing, a directory, a FIFO or device, too big, unreadable
        raise error(str(exc)) from None
    if str(path).endswith(".gz"):
        data = gunzip(data, path, what, error)
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (Windows editors) is not part of line 1
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}"
                    f"{' of its decompressed content' if str(path).endswith('.gz') else ''})") from None


def gunzip(data: bytes, path, what: str, error: type) -> bytes:
    """The decompressed bytes of gzip ``data`` (read from ``path``), at most MAX_PROFILE_BYTES of
    them, or ``error`` saying in one line why not: not gzip, corrupt, truncated, or inflating past
    the bound (decompression stops one byte past it, so a bomb costs no more than the bound)."""
    import gzip
    import io
    import zlib

    from ..profile import MAX_PROFILE_BYTES

    if data[:2] != b"\x1f\x8b":
        raise error(f"{what} {path} is not a gzip file (it does not start with the gzip magic bytes 1f 8b)")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as f:
            out = f.read(MAX_PROFILE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; EOFError: truncated
        kind = "zlib.error" if isinstance(exc, zlib.error) else type(exc).__name__
        raise error(f"{what} {path} is a corrupt gzip file ({kind}: {exc})"[:300]) from None
    if len(out) > MAX_PROFILE_BYTES:
        raise error(f"{what} {path} decompresses to more than the {MAX_PROFILE_BYTES} bytes a {what} may have")
    return out


def json_lines(text: str, label, problems: list):
    """(line number, parsed value) for each line of JSON-lines ``text``; blank lines and lines
    starting with ``#`` are skipped, and a line that is not JSON is added to ``problems`` as
    ``label:N: ...``, so that every bad line of a file is reported at once, not the first alone.
    Lines end at \\n, \\r\\n or \\r only: str.splitlines also splits at U+2028, U+0085 and form feeds,
    which JSON allows raw inside a string, so a good line was cut in two and numbered as an editor does not."""
    for n, line in enumerate(_LINE_END.split(text), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            yield n, json.loads(line, object_pairs_hook=unique_keys)
        except DuplicateKeyError as exc:
            problems.append(f"{label}:{n}: {exc}")
        except json.JSONDecodeError as exc:
            problems.append(f"{label}:{n}: not JSON ({exc.msg} at column {exc.colno})")
        except RecursionError:  # [[[[... nested deeper than the parser goes
            problems.append(f"{label}:{n}: not JSON (nested too deeply)")
        except ValueError as exc:  # an integer of more digits than Python converts (4300)
            problems.append(f"{label}:{n}: not JSON that can be read ({str(exc)[:120]})")


# ----------------------------------------------------------------------------------------------
# overrides

def _key_of(descriptor, kind: str | None) -> tuple[str, str | None]:
    """(descriptor key, the kind it is a descriptor of) of a descriptor in an override.

    Keyed by the family's parsed descriptor, not the mapping as written: ``{"op": "add", "n": 1e3}``
    is the problem ``PointwiseDescriptor(op="add", n=1000, dtype="float32")`` that ``choose`` and
    ``evaluate`` are asked about, and must find its override. Without ``kind``, the kind whose
    descriptor it parses as (the three families' fields differ, so at most one); HeuristicError
    when it is none's."""
    (key, _), kind = _parsed(descriptor, kind)
    return key, kind


def _parsed(descriptor, kind: str | None) -> tuple[tuple, str]:
    """((descriptor key, the family's descriptor), kind) of a descriptor, as :func:`_key_of`."""
    from ..autotune.descriptors import DescriptorError, descriptor_key
    from .families import family

    def attempt(k):
        d = family(k).descriptor(descriptor)
        return descriptor_key(d), d

    return _as_kind(kind, attempt, "it is no kind's descriptor", (HeuristicError, DescriptorError))


def _check_key(key: str):
    if not _HEX64.fullmatch(key):
        raise HeuristicError(f"key {key[:20]!r}{'...' if len(key) > 20 else ''} is not a descriptor key (64 "
                             "hexadecimal digits: calib.autotune.descriptor_key, or a row's \"key\" in "
                             "`calib heuristics evaluate --json`)")


def _check_params(params, kind: str | None, descriptor=None) -> dict:
    """The launch parameters of ``kind`` (:func:`calib.heuristics.families.launch`); without a kind,
    those of at least one kind, since the override applies to whichever kind is asked. With the
    override's ``descriptor``, a launch of that very problem: a split that does not divide its K, a
    vector wider than 16 bytes of its dtype, or a normalization vector or persistent buffer that leaves
    part of the row unread, loaded and was then chosen for a kernel that cannot run."""
    from .families import launch

    if not isinstance(params, dict):
        raise HeuristicError(f"parameters must be a mapping, not {type(params).__name__}")
    return _as_kind(kind, lambda k: dict(launch(k, params, descriptor)), "they are no kind's launch",
                    (HeuristicError,))[0]


def _as_kind(kind: str | None, attempt, none_fits: str, errors: tuple):
    """(``attempt(kind)``, kind), or without a kind the first kind ``attempt`` takes; HeuristicError
    with the reason (each kind's, where none took it)."""
    why = []
    for k in ([kind] if kind is not None else KINDS):
        try:
            return attempt(k), k
        except errors as exc:
            why.append(str(exc))
    raise HeuristicError(why[0] if kind is not None else f"{none_fits} ({'; '.join(why)})")


def _entry(key, params, kind: str | None) -> tuple[str, str | None, dict]:
    """(descriptor key, kind or None for any, checked parameters) of one override."""
    if kind is not None:
        _check_kind(kind)
    if isinstance(key, str):
        _check_key(key)
        return key, kind, _check_params(params, kind)
    (key, d), parsed_as = _parsed(key, kind)
    return key, kind, _check_params(params, parsed_as, d)


def set_overrides(mapping: dict, *, kind: str | None = None, replace: bool = False):
    """Per-problem overrides: ``{descriptor key (or descriptor): params}``. With ``kind`` they apply
    to that kind only, else to whichever kind is asked for the problem. Every entry is checked
    before any is installed (HeuristicError): a bad one changes nothing."""
    if kind is not None:
        _check_kind(kind)
    new = {}
    for key, params in mapping.items():
        try:
            k, _, checked = _entry(key, params, kind)
        except HeuristicError as exc:
            raise HeuristicError(f"override for {str(key)[:40]}: {exc}") from None
        new.setdefault(k, {})[kind or "*"] = checked
    _install(new, replace)


def _install(new: dict, replace: bool):
    with _lock:
        if replace:
            _overrides.clear()
        for k, v in new.items():
            _overrides.setdefault(k, {}).update(v)


def load_overrides(path, *, replace: bool = False) -> int:
    """Read overrides from ``path`` and install them; returns how many.

    Formats: a JSON object ``{descriptor_key: params}``; or JSON lines, one object per line, each
    ``{"params": {...}}`` plus either ``"key": "<descriptor key>"`` or ``"descriptor": {...}`` (read
    as the family's descriptor, so defaults may be left out), and optionally ``"kind"``. Blank lines
    and lines starting with ``#`` are skipped. Parameters are checked against the family's knobs.
    Every problem found is reported at once, with its line, and nothing is installed (nor, with
    ``replace``, removed) unless the whole file is good; a file without an override is an error."""
    p = Path(path)
    text = read_text(p, "override file", OverrideFileError)
    entries: list[tuple[str, str | None, dict]] = []
    problems: list[str] = []
    stripped = text.strip()
    whole = None
    if stripped.startswith("{"):
        try:
            whole = json.loads(stripped)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError, as is a 5000-digit number
            whole = None  # perhaps JSON lines: parsed line by line below
    if isinstance(whole, dict) and not ({"params", "key", "descriptor"} & set(whole)):
        try:  # again, for a key written twice: said once, not as every line's "not JSON"
            json.loads(stripped, object_pairs_hook=unique_keys)
        except DuplicateKeyError as exc:
            raise OverrideFileError(f"{p}: {exc}") from None
        for key, params in whole.items():
            try:
                entries.append(_entry(key, params, None))
            except HeuristicError as exc:
                problems.append(f"{p}: key {key[:20]}: {exc}")
    else:
        entries = _override_lines(p, text, problems)
    if problems:
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise OverrideFileError("; ".join(problems[:10]) + more)
    if not entries:
        raise OverrideFileError(f"override file {p} has no override (it is empty, or only comments)"
                                + ("; nothing was replaced" if replace else ""))
    new: dict = {}
    for key, kind, params in entries:
        new.setdefault(key, {})[kind or "*"] = params
    _install(new, replace)
    return len(entries)


def _override_lines(p: Path, text: str, problems: list) -> list:
    """The overrides of a JSON-lines file, each bad line added to ``problems``. A problem given twice
    is one override, and twice with other parameters a problem: the last line had won in silence."""
    entries, first = [], {}
    for n, obj in json_lines(text, p, problems):
        try:
            entry = _override_line(obj)
        except HeuristicError as exc:
            problems.append(f"{p}:{n}: {exc}")
            continue
        seen = first.setdefault(entry[:2], (n, entry[2]))
        if seen[0] == n:
            entries.append(entry)
        elif seen[1] != entry[2]:
            problems.append(f"{p}:{n}: the same problem as line {seen[0]}, with other parameters")
    return entries


def _override_line(obj) -> tuple[str, str | None, dict]:
    """(descriptor key, kind or None, checked parameters) of one line of an override file."""
    if not isinstance(obj, dict):
        raise HeuristicError(f"a line must be a JSON object, not {type(obj).__name__}")
    params, kind = obj.get("params"), obj.get("kind")
    if not isinstance(params, dict):
        raise HeuristicError("needs \"params\": an object of launch parameters")
    if kind is not None and kind not in KINDS:
        raise HeuristicError(f"kind {kind!r} is none of {', '.join(KINDS)}")
    if "key" in obj and not isinstance(obj["key"], str):
        raise HeuristicError(f"\"key\" is {type(obj['key']).__name__}; a descriptor key is a string of 64 "
                             "hexadecimal digits")
    if "descriptor" not in obj:
        if "key" not in obj:
            raise HeuristicError("needs \"key\" (a descriptor key) or \"descriptor\"")
        return _entry(obj["key"], params, kind)
    if not isinstance(obj["descriptor"], dict):
        raise HeuristicError(f"bad descriptor: a JSON object of its fields, not {type(obj['descriptor']).__name__}")
    entry = _entry(obj["descriptor"], params, kind)
    if "key" in obj and obj["key"] not in (entry[0], _as_written_key(obj["descriptor"])):  # one side edited
        raise HeuristicError(f"\"key\" {obj['key'][:20]}... is not the key of its \"descriptor\" "
                             f"({entry[0][:20]}...); give one of them")
    return entry


def _as_written_key(descriptor) -> str | None:
    from ..autotune.descriptors import descriptor_key

    try:
        return descriptor_key(descriptor)
    except Exception:  # noqa: BLE001 - no key as written: only the family's key names it
        return None


def override_for(kind: str, descriptor) -> dict | None:
    if not _overrides:
        return None
    from ..autotune.descriptors import descriptor_key

    keys = []
    try:
        keys.append(_key_of(descriptor, kind)[0])
    except HeuristicError:  # not the family's descriptor: only as given (the built-in will refuse it)
        pass
    try:  # as given too: an override keyed by descriptor_key(d) of a d that leaves defaults out
        keys.append(descriptor_key(descriptor))
    except Exception:  # noqa: BLE001 - no key, so no override by it
        pass
    found = next((_overrides[k] for k in keys if k in _overrides), None)
    if not found:
        return None
    params = found.get(kind, found.get("*"))
    return dict(params) if params is not None else None


# ----------------------------------------------------------------------------------------------
# choosing

def default_profile():
    import calib

    return calib.default_profile()


_profiles_at: dict = {}  # (absolute path, mtime_ns, size) -> the Profile loaded from it


def profile_of(profile):
    """The profile a heuristic reads: this machine's for None; for a path (``str`` or ``os.PathLike``),
    that file as ``calib.load_profile(path)`` opens it (checked against this machine's GPU; a missing
    or broken file warns and reads as empty), loaded once per version of the file; else ``profile``
    itself (anything with ``query``). A path handed to a heuristic used to be read as an object without
    ``query``: every parameter fell back to its default."""
    if profile is None:
        return default_profile()
    if not isinstance(profile, (str, os.PathLike)):
        return profile
    path = os.path.abspath(os.fspath(profile))
    try:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
    except OSError:
        key = (path, None, None)
    if key not in _profiles_at:
        from ..profile import load_profile

        if len(_profiles_at) >= 64:  # a process that walks many files keeps the latest few
            _profiles_at.clear()
        _profiles_at[key] = load_profile(path)
    return _profiles_at[key]


def choose(kind: str, descriptor, profile=None, *, layers_used: list | None = None) -> dict:
    """The launch parameters for ``descriptor``: override, else user layers, else built-in.

    ``profile``: anything with ``query(name, default)``, or a profile file's path (:func:`profile_of`;
    default: this machine's profile). ``layers_used``: a list that receives the names of the layers
    that answered."""
    _check_kind(kind)
    forced = override_for(kind, descriptor)
    if forced is not None:
        if layers_used is not None:
            layers_used.append("override")
        return forced
    profile = profile_of(profile)
    stack = [ly for ly in _process[kind]] + [ly for k, ly in _scoped.get() if k == kind]  # outermost last
    return _ask(kind, stack, descriptor, profile, layers_used)


def _ask(kind, stack, descriptor, profile, layers_used):
    if not stack:
        answer = _builtin(kind)(descriptor, profile)
        name = "builtin"
    else:
        top = stack[-1]
        # Only the user's own call is answered for as theirs: the layers below (the built-in among
        # them) are asked outside it, so that calib's own bug keeps its own exception.
        if top.wrap:
            below = _ask(kind, stack[:-1], descriptor, profile, layers_used)
            answer = top.call(kind, descriptor, profile, dict(below))
        else:
            answer = top.call(kind, descriptor, profile)
        name = top.name
    if not isinstance(answer, dict):
        raise HeuristicError(f"heuristic {name} for {kind} returned {type(answer).__name__}, not a dict of "
                             "launch parameters")
    if layers_used is not None:
        layers_used.append(name)
    return answer
