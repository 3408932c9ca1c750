"""The autotune cache behind calib.tuning's two-method ``TuningCache`` seam.

:class:`calib.tuning.Tuner` decides winners its own way (the minimum of ``center_us``, ties to the
first given); this adapter only remembers them, per device, in the tuning database, so a second
process (a second ``calib run``) gets the tuned launch shape without timing anything. A result is
written whole, entry and every candidate's timing in one transaction, so two processes tuning one
problem at once leave one of their results, consistent with itself.
"""

from __future__ import annotations

import json

from ..tuning import MemoryCache, TuningResult
from .core import Autotuner
from .decide import Timing
from .descriptors import candidate_id
from .entries import Entry, provenance, stale_fields


class PersistentTuningCache:
    def __init__(self, family: str, autotuner: Autotuner):
        self.family, self.autotuner = family, autotuner
        self._memory = MemoryCache()

    def get(self, key: str) -> TuningResult | None:
        hit = self._memory.get(key)
        if hit is not None:
            return hit
        t = self.autotuner
        t._load(self.family)
        entry = t._entry(self.family, key)
        knobs = None if entry is None or entry.winner is None else self._knobs(entry)
        if knobs is None:
            t.counters.misses += 1
            return None
        stale = stale_fields(entry.software, entry.protocol, t.software, t.protocol)
        if stale:
            t.counters.stale += 1
            if t.policy != "use":
                t.counters.misses += 1
                return None  # retuned by the Tuner, then put back here
            t._warn(("stale", self.family, key), f"autotune: entry {key[:12]} of {self.family} is stale "
                    f"({'; '.join(stale)}); using it (policy 'use')")
        t.counters.hits += 1
        result = TuningResult(problem=json.loads(entry.descriptor), key=key, winner=knobs,
                              time_us=entry.winner_time_us, candidates=[], timed_now=False)
        self._memory.put(key, result)
        return result

    def _knobs(self, entry: Entry) -> dict | None:
        """The winner's knobs, or None for an entry whose winner is not a JSON object (a hand edit,
        another family's name imported here): such an entry is corrupt, reported and tuned again,
        where it had ended the run in a JSONDecodeError or handed the kernel a number as knobs."""
        try:
            knobs = json.loads(entry.winner)
        except (TypeError, ValueError, RecursionError):
            knobs = None
        if isinstance(knobs, dict):
            return knobs
        t = self.autotuner
        t.counters.corrupt += 1
        t.corrupt.append((self.family, entry.descriptor_key, f"winner {entry.winner!r:.60} is not knobs"))
        t._warn(("corrupt", self.family, entry.descriptor_key),
                f"autotune: entry {entry.descriptor_key[:12]} of {self.family} is corrupt (its winner "
                f"{entry.winner!r:.60} is not a JSON object of knobs); it will be tuned again")
        return None

    def put(self, key: str, result: TuningResult) -> None:
        self._memory.put(key, result)
        t = self.autotuner
        timings = {}
        for c in result.candidates:
            cid = candidate_id(c.knobs)
            if c.measurement is not None and not c.rejected:
                timings[cid] = Timing.from_measurement(cid, c.measurement, software=t.software)
                t.counters.benchmarks += 1
            else:
                because = c.rejected_because or "rejected"
                status = "wrong" if because.startswith("wrong output") else "unsupported"
                timings[cid] = Timing(cid, status, reason=because, software=t.software)
        winner = candidate_id(result.winner)
        entry = Entry(family=self.family, descriptor_key=key, device_key=t.device_key,
                      descriptor=json.dumps(result.problem, sort_keys=True, separators=(",", ":")), device=t.device,
                      software=t.software, protocol={**t.protocol, "rule_of_decision": "calib.tuning: min center_us"},
                      winner=winner, winner_time_us=result.time_us, tied=[winner], offered=list(timings),
                      provenance=provenance(), timings=timings)
        if t.db is not None:
            t.db.replace(entry)
        t._entries[(self.family, key)] = entry


def persistent_tuning_cache(family: str, backend, *, protocol: dict | None = None, policy: str = "retune",
                            **kwargs):
    """A TuningCache for ``backend``'s device: the persistent one where the backend has a
    fingerprint and ``CALIB_AUTOTUNE`` is not ``off``, else calib.tuning's in-memory cache."""
    from .core import _persist_default

    fingerprint = getattr(backend, "fingerprint", None)
    if fingerprint is None or not _persist_default():
        return MemoryCache()
    device, software = fingerprint()
    return PersistentTuningCache(family, Autotuner(device, software, protocol=protocol, policy=policy, **kwargs))
