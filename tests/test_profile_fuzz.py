"""A seeded fuzz test of the profile library (issue 10): malformed profiles at every lookup route.

Each case is a profile file (or something else at the profile's path: a FIFO, a device, a
folder) made by one class of damage from a good profile. Every case goes through every route a
heuristic or a tool reads a profile by: ``read_profile``, ``load_profile(path)`` lenient and
strict, ``CALIB_PROFILE``, the user folder under ``XDG_DATA_HOME``, the shipped folder,
``calib.query`` / ``calib.record``, and ``Profile.query`` lenient and strict on every name. The
test counts, and requires to be zero:

- exceptions escaping a lenient route, or anything but ProfileError escaping a strict one;
- hangs (each case runs under a SIGALRM deadline: a FIFO opened for reading would block forever);
- implausible values returned: a value is either the caller's default or the file's own value,
  finite, within its own CI, and possible for its parameter's kind (``calib.catalogue.kind``);
- warnings that do not name the file.

Seeded by ``CALIB_FUZZ_SEED`` (default below) and sized by ``CALIB_FUZZ_CASES`` per class, so that
a failure is reproduced by its seed; the summary line prints both with the counts and the time.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import shutil
import signal
import socket
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest

import calib
from calib import catalogue
from calib.profile import MAX_PROFILE_BYTES, ProfileError, load_profile, read_profile

SEED = int(os.environ.get("CALIB_FUZZ_SEED", "20261201"))
PER_CLASS = int(os.environ.get("CALIB_FUZZ_CASES", "150"))
DEADLINE_S = 10.0

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "memory_bytes": 150754820096,
        "simulated": False}
H200_SW = {"driver": "580.159.04", "cuda_runtime": "13.2", "cupy": "14.2.0", "calib": "0.1.0"}
SLUG = "nvidia-h200.json"


def _rec(value, half, unit, **extra):
    return {"value": value, "ci95": [value - half, value + half], "unit": unit, "n": 9,
            "method": "WLS t ~ x, weights n/t², classical SE", "r2": 0.9999, "flags": [],
            "diagnostics": {"curvature_p": 0.4, "runs_p": 0.3}, "source": "notebooks/x.ipynb",
            "measured": "2026-11-29T17:04:51Z", **extra}


# one record of every kind the catalogue has, a user's own number and flag, and a name to miss
GOOD_V1 = {
    "schema": "calib.profile/1", "device": H200, "software": H200_SW, "created": "2026-11-29T17:05:00Z",
    "params": {
        "memory.dram.read_bandwidth_gbps": _rec(4711.07, 4.2, "GB/s"),
        "compute.fp32.fma_tflops": _rec(60.71, 0.24, "TFLOP/s"),
        "matmul.splitk.elements_reduced_per_second": _rec(1.04e12, 2e10, "elements/s"),
        "launch.latency_us": _rec(12.36, 0.07, "us"),
        "memory.l2.capacity_bytes": _rec(45516148.97, 2.2e6, "bytes", flags=["wide CI: ±5.0%"]),
        "normalization.additional_registers": _rec(19.48, 2.78, "count"),
        "my.own.tile_count": {"value": 7},
        "my.own.use_atomics": {"value": True},
    },
}
GOOD_V0 = {"memory.dram.read_bandwidth_gbps": 4400, "launch.latency_us": 12.5,
           "normalization.additional_registers": 40, "matmul.splitk.use_atomics": True}
NAMES = sorted({*GOOD_V1["params"], *GOOD_V0, "memory.dram.write_bandwidth_gbps"})
DEFAULT = object()  # what every query passes: a returned value that is this is the default

HOSTILE = [None, True, False, 0, -1, 1, -4711.07, 1e308, -1e308, 5e-324, 2.5e-310, 10**400, -(10**400), "",
           "4711", "GB/s", "µs", "\x00", "x" * 10_000, [], [1], [1, 2], [1, 2, 3], [[1, 2]], ["a", "b"], {},
           {"value": 1}, {"value": None}, {"a": {"b": {"c": {}}}}, float("nan"), float("inf"), -0.0]
HUGE = ["1" + "0" * 5000, "-" + "9" * 4301, "1" + "0" * 400, "-1" + "0" * 400, "1e400", "-1e400", "1e308",
        "5e-324", "2.5e-310", "-0.0", "0", "1E+99999", "0.000000000000000000000000000000000000001"]
SCHEMAS = ["calib.profile/-1", "calib.profile/0", "calib.profile/1.0", "calib.profile/ 1", "calib.profile/１",
           "calib.profile/" + "9" * 5000, "calib.profile/", "calib.profile", "calib.profile/+1", "calib.profile/1_0",
           "calib.profile/2", "calib.profile/99999999999", "CALIB.PROFILE/1", 1, None, [], {"v": 1}, True, 1.5]


# ----------------------------------------------------------------------------------------------
# making cases: each is (class, description, maker), maker(path) puts the case at path


def _paths(node, prefix=()):
    """Every path into a JSON document, the root included."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _set(doc, path, value):
    if not path:
        return value
    doc = copy.deepcopy(doc)
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


MARK = "\u2063FUZZ\u2063"  # stands in a document for text that json.dumps cannot write (a 5,000-digit number)


def _dumps(doc, literal=None) -> bytes:
    text = json.dumps(doc, ensure_ascii=False)
    if literal is not None:
        text = text.replace(json.dumps(MARK, ensure_ascii=False), literal)
    return text.encode("utf-8")


def _bytes_maker(data: bytes):
    def make(path: Path):
        path.write_bytes(data)
    make.data = data
    return make


def _base(rng):
    return GOOD_V1 if rng.random() < 0.8 else GOOD_V0


def _cases(rng: random.Random, per_class: int):
    for _ in range(per_class):
        data = _dumps(_base(rng))
        cut = rng.randrange(len(data))
        yield "truncation", f"first {cut} bytes", _bytes_maker(data[:cut])
    for _ in range(per_class):
        data = bytearray(_dumps(_base(rng)))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        yield "byte flip", "1-4 random bytes", _bytes_maker(bytes(data))
    for _ in range(per_class):
        data = _dumps(_base(rng))
        how = rng.randrange(4)
        if how == 0:  # a latin-1 "µs" typed into a unit, as in the report
            data = data.replace(b'"us"', b'"\xb5s"') if b'"us"' in data else b'{"unit": "\xb5s"}'
        elif how == 1:
            at = rng.randrange(len(data))
            data = data[:at] + bytes([rng.randrange(0x80, 0x100)]) + data[at:]
        elif how == 2:
            data = data.decode().encode(rng.choice(["utf-16", "utf-32", "utf-16-be"]))
        else:
            data = data.decode().encode("utf-8", "replace").replace(b"\xc2\xb2", b"\xb2")  # "t²" as latin-1
        yield "non-UTF-8", ["latin-1 unit", "stray byte", "UTF-16/32", "latin-1 superscript"][how], _bytes_maker(data)
    for _ in range(per_class):
        base = _base(rng)
        path = rng.choice(list(_paths(base)))
        value = rng.choice(HOSTILE)
        yield "wrong type", f"{'/'.join(map(str, path)) or '<root>'} = {str(value)[:40]}", _bytes_maker(
            _dumps(_set(base, path, value)))
    for _ in range(per_class):
        base = _base(rng)
        numbers = [p for p in _paths(base) if isinstance(_get(base, p), (int, float)) and p]
        path = rng.choice(numbers)
        literal = rng.choice(HUGE)
        yield "huge number", f"{'/'.join(map(str, path))} = {literal[:20]}...", _bytes_maker(
            _dumps(_set(base, path, MARK), literal))
    for _ in range(per_class):
        base = _base(rng)
        path = rng.choice(list(_paths(base)))
        depth = rng.choice([31, 33, 200, 900, 999, 1001, 5000, 100_000])
        literal = rng.choice(["[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth,
                              '[{"value":' * depth + "1" + "}]" * depth])
        yield "deep nesting", f"{'/'.join(map(str, path)) or '<root>'}: depth {depth}", _bytes_maker(
            _dumps(_set(base, path, MARK), literal))
    for _ in range(per_class):
        name = rng.choice([n for n in GOOD_V1["params"] if catalogue.kind(n)])
        rec = dict(GOOD_V1["params"][name])
        lo, hi = rec["ci95"]
        how = rng.randrange(9)
        if how == 0:
            rec["value"] = rng.choice([True, False])
        elif how == 1:
            rec["value"] = rng.choice([0, 0.0, -0.0, -rec["value"], -1e-9])
        elif how == 2:
            rec["value"] = rng.choice([5e-324, 2.5e-310, 1e-300])
        elif how == 3:
            rec["value"] = rng.choice([1e308, 1e300, rec["value"] * 1e12])
        elif how == 4:
            rec["value"] = rng.choice([hi + (hi - lo), lo - (hi - lo), hi * 2])
        elif how == 5:
            rec["ci95"] = [hi, lo]
        elif how == 6:
            rec["unit"] = rng.choice(["MB/s", "ms", "GiB", "", "µs", "GB/s "])
        elif how == 7:  # no unit, no CI: only the catalogue knows what it is
            rec = {"value": rng.choice([True, -1, 0, 1e308, 5e-324])}
        else:
            rec["value"] = float(rng.choice(["nan", "inf", "-inf"]))
        doc = _set(GOOD_V1, ("params", name), rec)
        yield "implausible value", f"{name}: case {how}", _bytes_maker(_dumps(doc))
    for _ in range(max(per_class // 2, len(SCHEMAS))):
        schema = rng.choice(SCHEMAS)
        doc = _set(GOOD_V1, ("schema",), schema)
        yield "schema", str(schema)[:30], _bytes_maker(_dumps(doc))
    yield from _special_cases()


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _special_cases():
    """Things at the profile's path that are not a profile file, and paths that cannot be opened."""
    def fifo(path):
        os.mkfifo(path)

    def dev_zero(path):
        path.symlink_to("/dev/zero")

    def dev_null(path):
        path.symlink_to("/dev/null")

    def directory(path):
        path.mkdir()
        (path / "nvidia-h200.json").write_text(json.dumps(GOOD_V1))

    def too_big(path):
        with open(path, "wb") as fh:
            fh.write(_dumps(GOOD_V1))
            fh.truncate(MAX_PROFILE_BYTES + 1)  # sparse: no disk

    def just_too_big_of_spaces(path):
        data = _dumps(GOOD_V1)
        path.write_bytes(data + b" " * (MAX_PROFILE_BYTES + 1 - len(data)))

    def symlink_loop(path):
        path.symlink_to(path.name)

    def dangling(path):
        path.symlink_to(path.parent / "nowhere.json")

    def sock(path):
        # A socket's address is limited to about 107 bytes (sun_path), and a deep temporary
        # folder is longer than that: bind by the name alone from inside its folder.
        s = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        try:
            os.chdir(path.parent)
            s.bind(path.name)
        finally:
            os.chdir(cwd)
            s.close()

    def empty(path):
        path.write_bytes(b"")

    def bom(path):  # a byte-order mark: read, not refused
        path.write_bytes(b"\xef\xbb\xbf" + _dumps(GOOD_V1))

    makers = [("a FIFO", fifo), ("/dev/zero", dev_zero), ("/dev/null", dev_null), ("a directory", directory),
              ("over the size bound (sparse)", too_big), ("over the size bound (spaces)", just_too_big_of_spaces),
              ("a symlink loop", symlink_loop), ("a dangling symlink", dangling), ("an empty file", empty),
              ("a UTF-8 byte-order mark", bom)]
    if hasattr(socket, "AF_UNIX"):
        makers.append(("a socket", sock))
    for what, make in makers:
        yield "special file", what, make


# ----------------------------------------------------------------------------------------------
# the oracle


def _raw_records(case_bytes):
    """name -> the record as the file holds it, by an independent reading; None if the file is
    not a profile at all (then no value may be served from it)."""
    if case_bytes is None:
        return None
    try:
        doc = json.loads(case_bytes.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    params = doc.get("params") if "schema" in doc else doc
    if not isinstance(params, dict):
        return None
    return {k: (v if isinstance(v, dict) else {"value": v}) for k, v in params.items()}


def _implausible(name, value, raw) -> str | None:
    """Why a served value must not have been served, or None."""
    if raw is None or name not in raw:
        return f"{value!r} served for {name} from a file that does not hold it as a profile"
    rec = raw[name]
    if not (value is rec.get("value") or (type(value) is type(rec.get("value")) and value == rec.get("value"))):
        return f"{value!r} served for {name}, but the file holds {rec.get('value')!r}"
    kind = catalogue.kind(name)
    if isinstance(value, bool):
        return f"a bool served for {name}, a number of {kind.unit}" if kind else None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{value!r} served for {name}"
    if kind is not None and kind.fault(value):
        return f"{value!r} served for {name}: {kind.fault(value)}"
    ci = rec.get("ci95")
    if isinstance(ci, list) and len(ci) == 2 and all(isinstance(b, (int, float)) for b in ci):
        if not ci[0] <= value <= ci[1]:
            return f"{value!r} served for {name} outside its own ci95 {ci}"
    return None


class _Hang(BaseException):
    pass


class Tally:
    def __init__(self):
        self.cases = Counter()
        self.calls = Counter()
        self.escaped: list[str] = []
        self.strict_wrong: list[str] = []
        self.hangs: list[str] = []
        self.implausible: list[str] = []
        self.unnamed: list[str] = []
        self.served = 0
        self.defaults = 0

    def check_value(self, where, name, value, raw):
        if value is DEFAULT:
            self.defaults += 1
            return
        self.served += 1
        why = _implausible(name, value, raw)
        if why:
            self.implausible.append(f"{where}: {why}")


def _queries(tally, where, profile, raw, *, strict_too=True):
    for name in NAMES:
        tally.calls[where + " Profile.query"] += 1
        tally.check_value(where, name, profile.query(name, DEFAULT), raw)
        if strict_too:
            tally.calls[where + " Profile.query strict"] += 1
            try:
                tally.check_value(where + " strict", name, profile.query(name, DEFAULT, strict=True), raw)
            except ProfileError:
                pass


def _run_case(tally, label, make, root: Path, monkeypatch):
    """Put the case at each route's path and go through the route; record what goes wrong."""
    raw = _raw_records(getattr(make, "data", None))
    if label.endswith("a UTF-8 byte-order mark"):
        raw = _raw_records(_dumps(GOOD_V1))
    explicit = root / "explicit" / "profile.json"
    user = root / "xdg-data" / "calib" / "profiles" / SLUG
    shipped = root / "shipped" / SLUG
    for folder in (explicit.parent, user.parent, shipped.parent):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)

    def route(name, path, body, strict=False):
        tally.calls[name] += 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                body()
            except _Hang:
                tally.hangs.append(f"{label} via {name}")
            except ProfileError as exc:
                if not strict:
                    tally.escaped.append(f"{label} via {name}: ProfileError {exc}")
            except Exception as exc:  # noqa: BLE001 - counting is the point
                (tally.strict_wrong if strict else tally.escaped).append(
                    f"{label} via {name}: {type(exc).__name__}: {str(exc)[:200]}")
        for w in caught:
            if issubclass(w.category, calib.CalibWarning) and str(path) not in str(w.message):
                tally.unnamed.append(f"{label} via {name}: {str(w.message)[:300]}")

    make(explicit)
    route("read_profile", explicit, lambda: _queries(tally, "read_profile", _read_or_none(explicit), raw)
          if _read_or_none(explicit) else None)
    route("load_profile(path)", explicit, lambda: _queries(
        tally, "load_profile", load_profile(explicit, device=H200, software=H200_SW), raw))
    route("load_profile(path, strict)", explicit, lambda: _queries(
        tally, "load_profile strict", load_profile(explicit, device=H200, software=H200_SW, strict=True), raw),
        strict=True)
    monkeypatch.setenv("CALIB_PROFILE", str(explicit))
    route("CALIB_PROFILE", explicit, lambda: _queries(
        tally, "CALIB_PROFILE", load_profile(device=H200, software=H200_SW), raw, strict_too=False))

    def module_level():
        calib.reset()
        for name in NAMES:
            tally.check_value("calib.query", name, calib.query(name, DEFAULT), raw)
            try:
                tally.check_value("calib.record", name, calib.record(name).value, raw)
            except ProfileError:
                pass
            try:
                tally.check_value("calib.query strict", name, calib.query(name, DEFAULT, strict=True), raw)
            except ProfileError:
                pass

    route("calib.query/record", explicit, module_level)
    monkeypatch.delenv("CALIB_PROFILE")
    make(user)
    route("user folder (XDG_DATA_HOME)", user, lambda: _queries(
        tally, "user", load_profile(device=H200, software=H200_SW), raw, strict_too=False))
    shutil.rmtree(user.parent)
    make(shipped)
    route("shipped folder", shipped, lambda: _queries(
        tally, "shipped", load_profile(device=H200, software=H200_SW), raw, strict_too=False))


def _read_or_none(path):
    try:
        return read_profile(path)
    except ProfileError:
        return None


@pytest.mark.skipif(not hasattr(signal, "setitimer") or not hasattr(os, "mkfifo"),
                    reason="needs POSIX: FIFOs, and SIGALRM to bound each case")
def test_a_thousand_malformed_profiles_at_every_route(tmp_path, monkeypatch):
    rng = random.Random(SEED)
    root = tmp_path / "case"  # _run_case puts each case under it, at each route's path
    monkeypatch.setenv("XDG_DATA_HOME", str(root / "xdg-data"))
    monkeypatch.setattr("calib.profile.shipped_profiles_dir", lambda: root / "shipped")
    monkeypatch.setattr("calib.fingerprint.detect_current", lambda index=0: (H200, H200_SW))
    tally = Tally()

    def alarm(signum, frame):
        raise _Hang()

    old_handler = signal.signal(signal.SIGALRM, alarm)
    started = time.perf_counter()
    slowest = (0.0, "")
    try:
        for cls, what, make in _cases(rng, PER_CLASS):
            label = f"[{cls}] {what}"
            tally.cases[cls] += 1
            t = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, DEADLINE_S)
            try:
                _run_case(tally, label, make, root, monkeypatch)
            except _Hang:
                tally.hangs.append(label)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            slowest = max(slowest, (time.perf_counter() - t, label))
    finally:
        signal.signal(signal.SIGALRM, old_handler)
    elapsed = time.perf_counter() - started
    total = sum(tally.cases.values())
    per_class = ", ".join(f"{k}: {v}" for k, v in tally.cases.items())
    print(f"\nfuzz seed {SEED}: {total} cases in {elapsed:.1f} s ({per_class});"
          f" {sum(tally.calls.values())} route calls; {tally.served} values served, {tally.defaults} defaults;"
          f" slowest case {slowest[0]:.2f} s {slowest[1]}; escaped {len(tally.escaped)}, strict non-ProfileError "
          f"{len(tally.strict_wrong)}, hangs {len(tally.hangs)}, implausible {len(tally.implausible)}, warnings "
          f"without the file {len(tally.unnamed)}")
    assert total >= 1000 and min(tally.cases.values()) >= 10
    assert tally.served > 1000 and tally.defaults > 1000  # the oracle saw both outcomes, many times
    assert tally.escaped == [], tally.escaped[:10]
    assert tally.strict_wrong == [], tally.strict_wrong[:10]
    assert tally.hangs == [], tally.hangs[:10]
    assert tally.implausible == [], tally.implausible[:10]
    assert tally.unnamed == [], tally.unnamed[:10]
    assert elapsed < 60, f"the fuzz test must stay well under a minute; took {elapsed:.0f} s"
