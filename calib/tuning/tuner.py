"""Pick the fastest correct knobs for a problem, once per problem, keeping every candidate's evidence.

The tuner knows nothing about GPUs: the caller hands it the problem's descriptor, the candidate
knob dicts, a ``check`` that raises when a candidate computes a wrong result, and a ``time`` that
returns a :class:`calib.timing.Measurement` of a candidate. A fast kernel that computes the wrong
thing must never win: the tuner checks each candidate before timing it, or (``lazy_check``) times
them all and checks them in rank order until one passes, so that only the winner and the wrong ones
faster than it are checked. It ranks by the one estimator (:func:`estimate_us`, the same number
the results store files as ``kernel_time_us`` and the ``winner`` view ranks by), and remembers the
result under the problem's content key, so a second call for the same problem costs nothing.

Which problem to tune on is the caller's decision and must be deterministic (a fixed size, never
"whichever point came first"), so that the same sweep tunes the same way in every process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Protocol

from ..backends.base import UnsupportedConfig
from ..errors import CalibError
from ..keys import canonical_json, descriptor_hash, normalize
from ..timing import Measurement

ESTIMATOR = "center_us"


def estimate_us(measurement: Measurement) -> float:
    """The one time the tuner ranks candidates by: ``Measurement.center_us``, the mean of the
    samples left once gross outliers are dropped.

    It is what the fits use and what the results store files as ``kernel_time_us``, so the
    ``winner`` view, re-ranking stored candidates in SQL, picks what the tuner picked. The median
    would be more robust, but interference only ever slows a kernel down, which biases the median
    upwards by a fraction of the noise; ranking by a different number than the one stored would
    let the database and the tuner disagree about the winner."""
    return float(measurement.center_us)


class NoCandidateSurvived(CalibError, RuntimeError):
    """Every candidate was rejected (wrong output, unsupported, no finite time), or none was offered."""

    def __init__(self, problem: dict, rejected: list[Candidate]):
        self.problem, self.rejected = problem, rejected
        if not rejected:
            message = f"no candidates were offered for {canonical_json(problem)}"
        else:
            reasons = "; ".join(f"{canonical_json(c.knobs)}: {c.rejected_because}" for c in rejected[:5])
            more = f" (and {len(rejected) - 5} more)" if len(rejected) > 5 else ""
            message = (f"none of the {len(rejected)} candidates for {canonical_json(problem)} survived: "
                       f"{reasons}{more}")
        super().__init__(message)


@dataclass
class Candidate:
    """One knob dict, with its measurement, or the reason it was rejected (never both)."""

    knobs: dict
    measurement: Measurement | None = None
    rejected_because: str | None = None
    # True: its check passed; False: timed and never checked (lazy_check: slower than the winner);
    # None: the tuner was given no check
    checked: bool | None = None

    @property
    def rejected(self) -> bool:
        return self.rejected_because is not None

    @property
    def time_us(self) -> float | None:
        return None if self.measurement is None else estimate_us(self.measurement)


@dataclass
class TuningResult:
    """The winner of one tuning problem, and how it was found."""

    problem: dict  # the descriptor tuned on, normalized (plain JSON types)
    key: str  # calib.keys.descriptor_hash(problem): the cache key
    winner: dict  # the winning knobs alone
    time_us: float  # the winner's estimate_us
    candidates: list[Candidate] = field(default_factory=list)  # in the order given, rejected ones included
    timed_now: bool = True  # False: served from the cache, nothing was timed by this call
    estimator: str = ESTIMATOR

    @property
    def rejected(self) -> list[Candidate]:
        return [c for c in self.candidates if c.rejected]

    @property
    def measurements(self) -> list[Measurement]:
        """The candidates' measurements (role "tuning", knobs in ``protocol["perf_config"]``) for
        the results store, in the order given: all of them when they were timed by this call, none
        when the result came from the cache (they were stored with the job that timed them)."""
        if not self.timed_now:
            return []
        return [c.measurement for c in self.candidates if c.measurement is not None]

    def annotate(self, measurement: Measurement) -> Measurement:
        """Mark a measurement taken with the winning knobs: its ``perf_config`` is the knobs alone,
        ``tuned_on`` names the problem they were tuned on, and the candidates timed now ride along
        (``measurement.candidates``) for the store to keep."""
        measurement.protocol = {**(measurement.protocol or {}), "perf_config": dict(self.winner),
                                "tuned_on": self.problem}
        measurement.candidates = list(measurement.candidates or []) + self.measurements
        return measurement


class TuningCache(Protocol):
    """Where tuning results are remembered, by the problem's content key.

    :class:`MemoryCache` lasts as long as its process. A persistent cache (the tuning database)
    plugs in here with the same two methods; it must be scoped to one device, since one GPU's
    winner need not be another's, and may return results without candidates (``timed_now`` False)."""

    def get(self, key: str) -> TuningResult | None: ...

    def put(self, key: str, result: TuningResult) -> None: ...


class MemoryCache:
    """Tuning results of this process, by content key."""

    def __init__(self):
        self._results: dict[str, TuningResult] = {}

    def get(self, key: str) -> TuningResult | None:
        return self._results.get(key)

    def put(self, key: str, result: TuningResult) -> None:
        self._results[key] = result

    def __len__(self) -> int:
        return len(self._results)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Tuner:
    """Tunes problems through a cache: ``tune`` times candidates only for a problem not yet tuned."""

    def __init__(self, cache: TuningCache | None = None):
        self.cache = cache if cache is not None else MemoryCache()

    def cached(self, problem: dict, candidates: Iterable[dict] | None = None) -> TuningResult | None:
        """The remembered result for ``problem`` (``timed_now`` False), or None. With
        ``candidates``, a remembered winner that is not among them does not count: the search
        space changed since it was tuned."""
        key = descriptor_hash(problem)
        hit = self.cache.get(key)
        if hit is None:
            return None
        if candidates is not None and canonical_json(hit.winner) not in {canonical_json(k) for k in candidates}:
            return None
        return replace(hit, timed_now=False)

    def tune(self, problem: dict, candidates: Iterable[dict], time: Callable[[dict], Measurement], *,
             check: Callable[[dict], object] | None = None, lazy_check: bool = False) -> TuningResult:
        """The fastest correct candidate for ``problem``.

        For each candidate in the order given (duplicates, by content, are tried once): ``check(knobs)``
        first, if given, which raises (or returns False) when the candidate's output is wrong; then
        ``time(knobs)``. A candidate whose check fails, or whose check or timing raises
        :class:`UnsupportedConfig`, or whose time is not finite, is kept as rejected with the
        reason and never wins. Any other exception from ``time`` (device out of memory, a driver
        error) is not the candidate's fault and propagates. The winner is the minimum of
        :func:`estimate_us`; a tie goes to the first in the order given.

        ``lazy_check``: time every candidate first, then check them fastest first (ties in the order
        given) until one passes; it wins. The winner is the one an eager check would give: every
        candidate faster than it was checked and failed. A failed candidate's measurement is
        dropped, as if it had never been timed, so that nothing re-ranking the stored times (the
        results store's ``winner`` view) can pick it; the slower ones stay timed and unchecked
        (``Candidate.checked`` False). For checks that cost as much as a timing: the DRAM shape
        search's 555 checks took about 1.4 s of a fresh H200's GPU turn (session 4, 2026-12-02).

        Raises NoCandidateSurvived when nothing survives."""
        problem = normalize(problem)
        offered = []
        seen = set()
        for knobs in candidates:
            knobs = normalize(knobs)
            text = canonical_json(knobs)
            if text not in seen:
                seen.add(text)
                offered.append(knobs)
        hit = self.cached(problem, offered)
        if hit is not None:
            return hit
        if lazy_check and check is not None:
            tried = [self._try(problem, knobs, time, None) for knobs in offered]
            best = self._first_correct(tried, check)
        else:
            tried = [self._try(problem, knobs, time, check) for knobs in offered]
            survivors = [c for c in tried if not c.rejected]
            best = min(survivors, key=lambda c: c.time_us) if survivors else None  # min keeps the first of equal keys
        if best is None:
            raise NoCandidateSurvived(problem, tried)
        result = TuningResult(problem=problem, key=descriptor_hash(problem), winner=dict(best.knobs),
                              time_us=best.time_us, candidates=tried, timed_now=True)
        self.cache.put(result.key, result)
        return result

    @staticmethod
    def _first_correct(tried: list[Candidate], check) -> Candidate | None:
        """lazy_check: the timed candidates checked fastest first (ties in the order given) until
        one passes, which is returned; each that fails is replaced in ``tried`` by its rejection."""
        ranked = sorted((i for i, c in enumerate(tried) if not c.rejected), key=lambda i: (tried[i].time_us, i))
        for i in ranked:
            tried[i].checked = False
        for i in ranked:
            reason = _check_fails(check, tried[i].knobs)
            if reason is None:
                tried[i].checked = True
                return tried[i]
            tried[i] = Candidate(tried[i].knobs, rejected_because=reason)
        return None

    @staticmethod
    def _try(problem: dict, knobs: dict, time, check) -> Candidate:
        if check is not None:
            reason = _check_fails(check, knobs)
            if reason is not None:
                return Candidate(knobs, rejected_because=reason)
        try:
            measurement = time(dict(knobs))
        except UnsupportedConfig as exc:
            return Candidate(knobs, rejected_because=f"unsupported: {_reason(exc)}")
        measurement.protocol = {**(measurement.protocol or {}), "role": "tuning", "perf_config": dict(knobs),
                                "tuned_on": problem}
        t_us = estimate_us(measurement) if measurement.n else math.nan
        if not math.isfinite(t_us):
            return Candidate(knobs, measurement=None, rejected_because=f"no finite time ({measurement.n} samples)")
        return Candidate(knobs, measurement=measurement, checked=None if check is None else True)


def _check_fails(check, knobs: dict) -> str | None:
    """Why ``check`` rejects these knobs, or None when it passes them."""
    try:
        ok = check(dict(knobs))
    except UnsupportedConfig as exc:
        return f"unsupported: {_reason(exc)}"
    except MemoryError:
        raise  # the device is full: not this candidate's fault
    except Exception as exc:
        return f"wrong output: {_reason(exc)}"
    return "wrong output: the check returned False" if ok is False else None
