"""The autotuner: on a hit the cached choice with no benchmarking; on a miss, check, time, store.

Lookup order for a (family, descriptor) on this device: the in-process memo (a dict keyed by the
family and the descriptor object itself, the ≤2 µs path); the entries of the tuning database
loaded into memory (one query per family and device, on first use); the entries shipped in
``profiles/<device slug>.autotune.jsonl``; then tuning. Only the candidates an entry lacks are
timed: a family that gains a candidate times the new one, and one that loses a candidate decides
among the rest without timing anything.

Policies for a stale entry (its soft fields differ from this process's: driver, CUDA, library or
calib versions, timing protocol):

- ``use``: use it, warning once with the fields named;
- ``retune``: time every offered candidate again;
- ``verify`` (default): time the cached winner once; if its fresh CI lies wholly above its recorded
  one, retune; else keep the winner and record the entry as verified with today's soft fields.

Counters (``hits``, ``misses``, ``benchmarks``, ``stale``, plus ``checks``, ``failed_checks``,
``corrupt``, ``shipped_hits``) are plain attributes of :attr:`Autotuner.counters`.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import os
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..errors import CalibError
from .decide import TIE_REL, Timing, decide, significantly_slower
from .descriptors import candidate_id, descriptor_json, descriptor_key
from .entries import (FAMILY_MAX_CHARS, CorruptEntry, Entry, device_fields, device_key, entry_from_row, provenance,
                      soft_fields, stale_fields)
from .storage import AutotuneDB

POLICIES = ("use", "retune", "verify")
ENV_PERSIST = "CALIB_AUTOTUNE"  # "off": memory only
ENV_SHIPPED = "CALIB_AUTOTUNE_SHIPPED"  # a folder of *.autotune.jsonl in place of profiles/


class AutotuneError(CalibError, RuntimeError):
    pass


class AutotuneWarning(UserWarning):
    pass


class NoCandidateSurvived(AutotuneError):
    def __init__(self, family, dkey, timings: dict):
        self.timings = timings
        reasons = "; ".join(f"{c}: {t.status} ({t.reason})" for c, t in list(timings.items())[:5])
        super().__init__(f"no candidate of {family} survived for descriptor {dkey[:12]}: {reasons or 'none offered'}")


@dataclass
class Counters:
    hits: int = 0
    misses: int = 0
    benchmarks: int = 0  # candidate timings taken (a verify counts one)
    stale: int = 0
    checks: int = 0
    failed_checks: int = 0
    corrupt: int = 0
    shipped_hits: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def reset(self):
        for k in self.__dict__:
            setattr(self, k, 0)


@dataclass(frozen=True)
class Selection:
    """What :meth:`Autotuner.select` returns: the chosen candidate (the object given), and why."""

    choice: object
    candidate: str  # its id
    time_us: float | None
    family: str
    descriptor_key: str
    tied: tuple = ()
    source: str = "tuned"  # where the choice came from: tuned (timed here) | user (the database) | shipped
    stale: tuple = ()  # soft fields that differed when it was looked up
    benchmarks: int = 0  # timings this call took (0 for a hit, the in-process memo's included)
    offered: object = field(default=None, compare=False, repr=False)  # the candidates object, for the memo


@dataclass
class EarlyStop:
    """Stop timing once a candidate reaches ``fraction`` of the bound the machine profile predicts
    for the problem (``bound_us``, the time at the roofline): the remaining candidates are recorded
    as skipped, never winning and never timed for this entry."""

    bound_us: float
    fraction: float = 0.9

    def reached(self, time_us: float) -> bool:
        return time_us > 0 and self.bound_us / time_us >= self.fraction


def _persist_default() -> bool:
    return os.environ.get(ENV_PERSIST, "").strip().lower() not in ("off", "0", "no", "false", "memory")


class Autotuner:
    """The cache of one device (hard fields), with this process's soft fields.

    ``device`` and ``software`` are a backend's fingerprint (``backend.fingerprint()``).
    ``url``: the tuning database (default: ``CALIB_DB_URL``, else SQLite in the user data folder);
    ``persist=False`` keeps everything in memory. ``shipped_dir``: where shipped entries are
    (default ``profiles/``)."""

    def __init__(self, device: dict, software: dict | None = None, *, protocol: dict | None = None,
                 url: str | None = None, persist: bool | None = None, shipped_dir=None, policy: str = "verify",
                 tie_rel: float = TIE_REL):
        if policy not in POLICIES:
            raise AutotuneError(f"policy {policy!r} is none of {', '.join(POLICIES)}")
        self.device = device_fields(device)
        self.device_key = device_key(device)
        self.software = soft_fields(software)
        self.protocol = dict(protocol or {})
        self.policy = policy
        self.tie_rel = tie_rel
        self.counters = Counters()
        self.persist = _persist_default() if persist is None else persist
        self._url = url
        self._db = None
        self._shipped_dir = shipped_dir
        self._memo: dict = {}
        self._entries: dict = {}  # (family, dkey) -> Entry of the user's database, parsed
        self._raw: dict = {}  # (family, dkey) -> (entry row, timing rows), parsed on first use
        self._shipped: dict = {}  # (family, dkey) -> Entry shipped in profiles/
        self._loaded: set = set()
        self._warned: set = set()
        self.corrupt: list = []  # (family, descriptor key, reason) of entries found unreadable
        self._corrupt_keys: set = set()

    @property
    def db(self):
        if self._db is None and self.persist:
            self._db = AutotuneDB(self._url)
        return self._db

    # -- the hot path -------------------------------------------------------------------------
    def select(self, family: str, descriptor, candidates=None, **options) -> Selection:
        """The chosen candidate for ``descriptor`` among ``candidates`` (see :meth:`_select` for
        the options). A repeated call with the same hashable descriptor (a frozen dataclass, a
        tuple) and the same candidates is one dict lookup."""
        sel = self._recall(family, descriptor)
        if sel is None:  # a miss, or an unhashable descriptor (a dict)
            return self._select(family, descriptor, candidates, **options)
        if candidates is None or candidates is sel.offered or candidates == sel.offered:
            self.counters.hits += 1
            return sel
        return self._select(family, descriptor, candidates, **options)

    # -- everything else ----------------------------------------------------------------------
    def _warn(self, key, message):
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, AutotuneWarning, stacklevel=4)

    def _load(self, family: str):
        if family in self._loaded:
            return
        self._loaded.add(family)
        shipped, bad_shipped = load_shipped(family, self.device_key, self._shipped_dir)
        for e in shipped:
            self._shipped.setdefault((family, e.descriptor_key), e)
        for where, reason in bad_shipped:
            self._warn(("shipped", where), f"autotune: shipped entry {where} skipped: {reason}")
        if self.db is None:
            return
        for dkey, raw in self.db.read_raw(family, self.device_key).items():
            self._raw[(family, dkey)] = raw

    def _entry(self, family: str, dkey: str) -> Entry | None:
        """The user's entry (parsed now if it was not yet), else the shipped one, else None. A
        corrupt entry is reported, counted and treated as absent; the others are unaffected."""
        e = self._entries.get((family, dkey))
        if e is not None:
            return e
        raw = self._raw.pop((family, dkey), None)
        if raw is not None:
            row, timings = raw
            try:
                e = entry_from_row(row, timings)
            except (CorruptEntry, ValueError, TypeError, KeyError) as exc:
                self.counters.corrupt += 1
                self.corrupt.append((family, dkey, str(exc)))
                self._corrupt_keys.add((family, dkey))
                self._warn(("corrupt", family, dkey),
                           f"autotune: entry {row.get('id')} of {family} ({dkey[:12]}) in {self.db.url} is corrupt "
                           f"({exc}); it will be tuned again, the other entries are used")
            else:
                self._entries[(family, dkey)] = e
                return e
        return self._shipped.get((family, dkey))

    def entry(self, family: str, descriptor) -> Entry | None:
        self._load(family)
        return self._entry(family, descriptor_key(descriptor))

    def _recall(self, family: str, descriptor):
        """The memo's selection for ``descriptor``, or None. Python calls ``D(1)``, ``D(1.0)`` and
        ``D(True)`` equal and hashes them alike, but their descriptor keys (and database entries)
        differ: keyed by the descriptor alone, the second was served the first's selection untuned.
        So a hit must also match the exact types inside; the same object asked again (a loop) skips
        that check, which keeps the hit a dict lookup."""
        try:
            sel, stored, types = self._memo[(family, descriptor)]
        except (KeyError, TypeError):
            return None
        if stored is not descriptor and _types(descriptor) != types:
            return None
        return sel

    def forget_memory(self):
        """Drop the in-process copies (the next lookup reads the database again)."""
        self._memo.clear()
        self._entries.clear()
        self._raw.clear()
        self._shipped.clear()
        self._loaded.clear()

    def _select(self, family: str, descriptor, candidates, *, time: Callable | None = None,
                check: Callable | None = None, policy: str | None = None, early_stop: EarlyStop | None = None,
                tie_rel: float | None = None, rounds: int = 1) -> Selection:
        """``candidates``: names (str) or knob dicts, in preference order (ties go to the earliest).
        ``time(candidate) -> Measurement`` times one; ``check(candidate)`` raises, or returns False,
        when its output is wrong (it is recorded as wrong and never wins);
        :class:`calib.backends.base.UnsupportedConfig` from either marks it unsupported.
        ``rounds`` > 1 times the candidates in that many interleaved rounds (see :meth:`_time_rounds`)."""
        if candidates is None:
            raise AutotuneError(f"select({family!r}) needs the candidates on a first call")
        if not isinstance(family, str) or not 1 <= len(family) <= FAMILY_MAX_CHARS:
            raise AutotuneError(f"select: the family {family!r:.60} is not a name of 1 to {FAMILY_MAX_CHARS} "
                                "characters (the tuning database keeps no longer one)")
        policy = policy or self.policy
        tie_rel = self.tie_rel if tie_rel is None else tie_rel
        given = list(candidates)
        ids, objs = [], {}
        for c in given:
            cid = candidate_id(c)
            if not cid:  # stored rows are read back only with a named candidate
                raise AutotuneError(f"select({family!r}): a candidate named '' (give every candidate a name)")
            if cid not in objs:
                ids.append(cid)
                objs[cid] = c
        dkey = descriptor_key(descriptor)
        self._load(family)
        entry = self._entry(family, dkey)
        base = Entry(family=family, descriptor_key=dkey, device_key=self.device_key,
                     descriptor=descriptor_json(descriptor), device=self.device, software=self.software,
                     protocol=self.protocol, provenance=provenance())
        stale: list = []
        to_time: list = []
        overwrite = (family, dkey) in self._corrupt_keys  # corrupt rows are replaced, not kept
        benchmarks = 0
        if entry is not None and entry.covers(ids):
            stale = stale_fields(entry.software, entry.protocol, self.software, self.protocol)
            if stale:
                self.counters.stale += 1
                where = "shipped" if entry.origin == "shipped" else "cached"
                if policy == "use":
                    self._warn(("stale", family, dkey), f"autotune: {where} entry {dkey[:12]} of {family} is stale "
                               f"({'; '.join(stale)}); using it (policy 'use')")
                elif policy == "retune" or time is None:
                    to_time, overwrite = list(ids), True
                else:  # verify
                    d = decide(entry.timings, ids, tie_rel=tie_rel)
                    if d is None:
                        to_time, overwrite = list(ids), True
                    else:
                        fresh = self._time_one(d.winner, objs[d.winner], time, None)
                        benchmarks += 1
                        if significantly_slower(entry.timings[d.winner], fresh):
                            to_time, overwrite = list(ids), True
                        else:
                            entry = self._verified(entry, base, ids, tie_rel)
                            stale = []
            if not to_time:
                d = decide(entry.timings, ids, tie_rel=tie_rel)
                if d is None:
                    raise NoCandidateSurvived(family, dkey, {c: entry.timings[c] for c in ids})
                self.counters.hits += 1
                if entry.origin == "shipped":
                    self.counters.shipped_hits += 1
                sel = Selection(objs[d.winner], d.winner, d.time_us, family, dkey, d.tied, entry.origin,
                                tuple(stale), benchmarks, candidates)
                self._remember(family, descriptor, sel)
                return sel
        if not to_time:  # a miss: no entry, or candidates the entry has not timed
            self.counters.misses += 1
            have = set(entry.timings) if entry is not None and entry.origin == "user" else set()
            to_time = [c for c in ids if c not in have]
        if time is None:
            raise AutotuneError(f"no cached entry of {family} for descriptor {dkey[:12]} on {self.device['name']}, "
                                "and no time function to tune with")
        timings = dict(entry.timings) if entry is not None and entry.origin == "user" and not overwrite else {}
        if overwrite:
            to_time = list(ids)
        if self.db is not None and not overwrite:
            done_elsewhere = self.db.stored_candidates(base)  # another process may be tuning this key
            to_time = [c for c in to_time if c not in done_elsewhere]
        timed_before = self.counters.benchmarks
        if rounds > 1:
            for t in self._time_rounds(to_time, objs, time, check, rounds, early_stop):
                timings[t.candidate] = t
                if self.db is not None:
                    self.db.put_timing(base, t, overwrite=overwrite)
        else:
            stopped_by = None
            for cid in to_time:
                if stopped_by is not None:
                    t = Timing(cid, "skipped", reason=f"early stop: {stopped_by} reached {early_stop.fraction:.0%} "
                                                      f"of the bound {early_stop.bound_us:.4g} us")
                else:
                    t = self._time_one(cid, objs[cid], time, check)
                timings[cid] = t
                if self.db is not None:
                    self.db.put_timing(base, t, overwrite=overwrite)
                if early_stop is not None and stopped_by is None and t.usable and early_stop.reached(t.time_us):
                    stopped_by = cid
        benchmarks += self.counters.benchmarks - timed_before
        if self.db is not None:
            stored = self.db.finalize(base, ids, tie_rel=tie_rel)
            timings = stored.timings
            entry = stored
        else:
            entry = Entry(**{**base.__dict__, "timings": timings})
        self._entries[(family, dkey)] = entry
        d = decide(timings, ids, tie_rel=tie_rel)
        if d is None:
            raise NoCandidateSurvived(family, dkey, {c: timings[c] for c in ids if c in timings})
        sel = Selection(objs[d.winner], d.winner, d.time_us, family, dkey, d.tied, "tuned", tuple(stale),
                        benchmarks, candidates)
        self._remember(family, descriptor, sel)
        return sel

    def _remember(self, family, descriptor, sel):
        """Keep ``sel`` for the hot path. A later hit keeps where the choice came from (``source``) but
        took no timings: it had repeated the first call's benchmark count."""
        served = dataclasses.replace(sel, benchmarks=0)
        try:
            self._memo[(family, descriptor)] = (served, descriptor, _types(descriptor))
        except TypeError:  # unhashable descriptor: the entry dict serves it
            pass

    def _verified(self, entry: Entry, base: Entry, ids, tie_rel) -> Entry:
        """A stale entry whose winner held up: recorded with today's soft fields (a shipped one is
        copied into the user's database, so the next process need not verify it again)."""
        fresh = Entry(**{**entry.__dict__, "software": self.software, "protocol": self.protocol or entry.protocol,
                         "source": "verified", "provenance": provenance(verified_from=entry.origin),
                         "origin": "user"})
        if self.db is not None:
            self.db.replace(fresh)
        self._entries[(entry.family, entry.descriptor_key)] = fresh
        return fresh

    def _time_rounds(self, cids, objs, time, check, rounds: int, early_stop=None) -> list[Timing]:
        """Every candidate checked once, then timed in ``rounds`` interleaved rounds, the order
        reversed every other round, so that a slow phase of the GPU or the host (a clock that has
        not settled, a neighbour) falls on every candidate alike rather than on whichever was being
        timed then. On an H200 two tunes of ResNet-50's layers timed one candidate after another
        disagreed on 7 of 46 winners, by 5-65% in each tune's own timings (2026-12-01): each tune's
        CIs, from one burst of samples per candidate, were far narrower than the drift between
        bursts. Here a candidate's time is the inlier mean of all its rounds' samples, and its
        standard error the larger of the pooled samples' and the spread of the round means (so a
        candidate whose rounds disagree gets a CI that says so, and ties are decided by the
        preference order, the same in every tune). One benchmark per candidate in the counters.
        An early stop is judged on the first round: the candidates not yet timed then are skipped."""
        from ..timing import Measurement

        done, rounds_of = [], {}
        for cid in cids:
            t = self._checked(cid, objs[cid], check)
            if t is not None:
                done.append(t)
            else:
                rounds_of[cid] = []
        order = list(rounds_of)
        stopped_by = None
        for r in range(rounds):
            for cid in (order if r % 2 == 0 else order[::-1]):
                if rounds_of.get(cid) is None:
                    continue
                if stopped_by is not None and not rounds_of[cid]:
                    done.append(Timing(cid, "skipped", reason=f"early stop: {stopped_by} reached "
                                       f"{early_stop.fraction:.0%} of the bound {early_stop.bound_us:.4g} us"))
                    rounds_of[cid] = None
                    continue
                t, m = self._measure(cid, objs[cid], time, count=(r == 0))
                if t is not None:  # unsupported or no samples: that is its answer
                    done.append(t)
                    rounds_of[cid] = None
                    continue
                rounds_of[cid].append(m)
                if (r == 0 and early_stop is not None and stopped_by is None
                        and early_stop.reached(float(m.center_us))):
                    stopped_by = cid
        for cid in order:
            ms = rounds_of[cid]
            if ms is None:
                continue
            pooled = Measurement([v for m in ms for v in m.samples_us], stop_reason=f"{len(ms)} rounds",
                                 protocol={**(ms[0].protocol or {}), "rounds": len(ms)})
            done.append(Timing.from_rounds(cid, pooled, [m.center_us for m in ms], software=self.software))
        return done

    def _checked(self, cid: str, candidate, check) -> Timing | None:
        """None when the candidate's output is right (or there is no check); else its Timing."""
        from ..backends.base import UnsupportedConfig

        if check is None:
            return None
        self.counters.checks += 1
        try:
            ok = check(candidate)
        except UnsupportedConfig as exc:
            return Timing(cid, "unsupported", reason=_reason(exc), software=self.software)
        except MemoryError:
            raise  # the device is full: not this candidate's fault
        except Exception as exc:
            self.counters.failed_checks += 1
            return Timing(cid, "wrong", reason=_reason(exc), software=self.software)
        if ok is None:  # a check that raises on a wrong output and returns nothing otherwise
            return None
        try:
            passed = bool(ok)  # NumPy's False is not ``False``: ``ok is False`` let a wrong candidate win
        except Exception as exc:  # noqa: BLE001 - an array of many truth values, say
            passed, why = False, f"the check returned {type(ok).__name__}, not one truth value ({_reason(exc)})"
        else:
            why = f"the check returned {ok!r:.60}"
        if not passed:
            self.counters.failed_checks += 1
            return Timing(cid, "wrong", reason=why, software=self.software)
        return None

    def _measure(self, cid: str, candidate, time, *, count: bool = True):
        """(Timing, None) when the candidate cannot be timed, else (None, its Measurement)."""
        from ..backends.base import UnsupportedConfig

        try:
            m = time(candidate)
        except UnsupportedConfig as exc:
            return Timing(cid, "unsupported", reason=_reason(exc), software=self.software), None
        if count:
            self.counters.benchmarks += 1
        if not m.n:
            return Timing(cid, "unsupported", reason="no samples", n_samples=0, software=self.software), None
        return None, m

    def _time_one(self, cid: str, candidate, time, check) -> Timing:
        """Check one candidate, then time it once: its Timing, whichever way it ends."""
        failed = self._checked(cid, candidate, check)
        if failed is not None:
            return failed
        failed, m = self._measure(cid, candidate, time)
        return failed if failed is not None else Timing.from_measurement(cid, m, software=self.software)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_shipped(family: str, dev_key: str, folder=None) -> tuple[list[Entry], list]:
    """Entries of ``family`` for this device from ``*.autotune.jsonl`` in the shipped folder."""
    from pathlib import Path

    if folder is None:
        folder = os.environ.get(ENV_SHIPPED)
    if folder is None:
        from ..resources import shipped_profiles_dir

        folder = shipped_profiles_dir()
    folder = Path(folder)
    if not folder.is_dir():
        return [], []
    from .jsonl import UnreadableFile, file_lines, read_lines

    out, bad = [], []
    for path in sorted(folder.glob("*.autotune.jsonl")):
        try:  # a folder, a dead link or a FIFO named like a shipped file: warned about, never fatal
            lines = file_lines(path)
        except UnreadableFile as exc:
            bad.append((str(path), str(exc)))
            continue
        report = read_lines(lines, source=str(path), device_key=dev_key, family=family, origin="shipped")
        out.extend(report.entries)
        bad.extend((f"{path}:{n}", why) for n, why in report.problems)
    return out, bad


def tuned(family: str, candidates: dict, *, describe: Callable, autotuner: Callable[[], Autotuner],
          timer: Callable | None = None, reference: Callable | None = None, compare: Callable | None = None,
          **options):
    """Decorator form for a function family: ``candidates`` maps names (preference order) to
    implementations with the decorated function's signature; ``describe(*args, **kw)`` gives the
    descriptor; ``timer(thunk) -> Measurement`` times a call; ``reference(*args, **kw)`` and
    ``compare(out, ref)`` check each candidate on a miss. The decorated function's body is not
    called: it names the family and carries the docstring."""
    names = list(candidates)

    def wrap(fn):
        def call(*args, **kw):
            desc = describe(*args, **kw)
            tuner = autotuner()
            sel = tuner._recall(family, desc)
            if sel is None:
                ref = {}

                def check(name):
                    if reference is None or compare is None:
                        return True
                    if "out" not in ref:
                        ref["out"] = reference(*args, **kw)
                    return compare(candidates[name](*args, **kw), ref["out"])

                time = None if timer is None else (lambda name: timer(lambda: candidates[name](*args, **kw)))
                sel = tuner.select(family, desc, names, time=time, check=check, **options)
            else:
                tuner.counters.hits += 1
            return candidates[sel.choice](*args, **kw)

        # update_wrapper, not just the name and doc: help(), inspect.signature, pickling by qualified
        # name and a tool that reads __module__ must all see the decorated function
        functools.update_wrapper(call, fn)
        call.candidates = candidates
        return call

    return wrap


_SCALARS = frozenset({int, float, bool, str, type(None)})
_FIELDS: dict = {}  # dataclass type -> a getter of its fields' values (None: not a dataclass)


def _types(x):
    """The exact types inside a hashable descriptor, cheaply: the hit path is a dict lookup, and this
    costs one attrgetter and one map over the fields of a dataclass of scalars."""
    t = type(x)
    if t in _SCALARS:
        return t
    if t is tuple:
        return t, tuple(map(_types, x))
    try:
        get = _FIELDS[t]
    except KeyError:
        names = [f.name for f in dataclasses.fields(t)] if dataclasses.is_dataclass(t) else None
        get = _FIELDS[t] = (operator.attrgetter(*names) if len(names) > 1 else (lambda o, n=names[0]: (getattr(o, n),))
                            ) if names else None
    if get is None:
        return t
    values = get(x)
    sig = tuple(map(type, values))
    return t, (sig if _SCALARS.issuperset(sig) else tuple(map(_types, values)))


_DEFAULT: dict = {}


def autotuner_for(device: dict, software: dict | None = None, **kwargs) -> Autotuner:
    """One Autotuner per (device key, url) in this process, so that every caller shares its memo."""
    key = (device_key(device), kwargs.get("url"), kwargs.get("persist"))
    tuner = _DEFAULT.get(key)
    if tuner is None:
        tuner = _DEFAULT[key] = Autotuner(device, software, **kwargs)
    return tuner


def select(family: str, descriptor, candidates: Iterable, *, device: dict | None = None, software: dict | None = None,
           autotuner: Autotuner | None = None, **options) -> Selection:
    """``calib.autotune.select``: the shared autotuner of ``device`` (or the one given) selects."""
    if autotuner is None:
        if device is None:
            raise AutotuneError("select needs device= (a backend's fingerprint) or autotuner=")
        autotuner = autotuner_for(device, software)
    return autotuner.select(family, descriptor, candidates, **options)
