"""Which candidate wins, so that two tunes of one workload choose the same winners.

Ranking by the fastest point estimate alone makes winners that are within noise of each other
flip from run to run: two fresh tunes of one serving stack disagreed on 86 of 191 entries that way
(issue 11). Here each candidate's time carries a 95% CI (Student t on the inlying samples'
standard error, the samples ``Measurement.center_us`` averages), and the rule is:

1. the fastest candidate by ``time_us`` (``center_us``, the tuner's estimator) sets the band;
2. every candidate whose CI overlaps the fastest one's, or whose time is within ``tie_rel`` (1% by
   default) of it, is *tied* with it: not significantly, or not materially, faster or slower;
3. among the tied candidates the winner is the first in the preference order, which is the order
   the family offers its candidates in (a stable, documented order: for conv2d, ``ALGORITHMS``).

The ``tie_rel`` floor is there because run-to-run drift on a GPU (clocks, temperature, the memory
pool's placement) is larger than one run's CI, which can be ±0.1%: two runs would call a 0.3%
difference significant in opposite directions. A tied winner is at most about one band slower
than the fastest, and two tunes agree wherever the differences are within that band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

TIE_REL = 0.01

# Student t, 97.5% quantile, for 1..30 degrees of freedom; beyond that 1.96 + 2.37/df is within 0.1%.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: int) -> float:
    if df < 1:
        return math.inf
    return _T975[df - 1] if df <= len(_T975) else 1.959964 + 2.37 / df


STATUSES = ("ok", "wrong", "unsupported", "skipped")


@dataclass(frozen=True)
class Timing:
    """One candidate's evidence for one problem: its time and CI, or why it has none."""

    candidate: str
    status: str  # ok | wrong | unsupported | skipped
    time_us: float | None = None
    ci_low_us: float | None = None
    ci_high_us: float | None = None
    se_us: float | None = None
    n_samples: int | None = None
    reason: str | None = None
    samples_us: tuple | None = field(default=None, compare=False, repr=False)
    software: dict | None = field(default=None, compare=False, repr=False)
    protocol: dict | None = field(default=None, compare=False, repr=False)

    @property
    def usable(self) -> bool:
        return self.status == "ok" and self.time_us is not None and math.isfinite(self.time_us)

    @classmethod
    def from_measurement(cls, candidate: str, m, *, software=None) -> Timing:
        """A timing from a :class:`calib.timing.Measurement`: its ``center_us``, and the 95% CI of
        that mean from the inliers' standard error."""
        center = float(m.center_us)
        kept = int(m.inliers.sum()) if m.n else 0
        se = float(m.se_us) if kept > 1 else math.nan
        half = t975(kept - 1) * se if math.isfinite(se) else 0.0
        # a time of 0 or below is no time (a timer that missed the kernel): stored as ok it made the
        # entry corrupt to every later reader, and the problem was tuned again in each process
        status = "ok" if math.isfinite(center) and center > 0 else "unsupported"
        reason = None if status == "ok" else f"no finite time above 0 ({m.n} samples, centre {center:g} us)"
        return cls(candidate, status, center if status == "ok" else None,
                   center - half if status == "ok" else None, center + half if status == "ok" else None,
                   se if math.isfinite(se) else None, m.n, reason, tuple(float(v) for v in m.samples_us),
                   software, dict(m.protocol or {}))


    @classmethod
    def from_rounds(cls, candidate: str, pooled, round_centers_us, *, software=None) -> Timing:
        """A timing from several interleaved rounds: ``pooled`` holds every round's samples (a
        Measurement), ``round_centers_us`` each round's ``center_us``. The time is the pooled
        center; the standard error the larger of the pooled samples' and the round means' (their
        sd over the square root of their count), with the degrees of freedom of whichever it is."""
        t = cls.from_measurement(candidate, pooled, software=software)
        k = len(round_centers_us)
        if not t.usable or k < 2:
            return t
        mean = sum(round_centers_us) / k
        between = math.sqrt(sum((c - mean) ** 2 for c in round_centers_us) / (k - 1) / k)
        if t.se_us is not None and t.se_us >= between:
            return t
        half = t975(k - 1) * between
        return cls(candidate, t.status, t.time_us, t.time_us - half, t.time_us + half, between, t.n_samples,
                   t.reason, t.samples_us, t.software, t.protocol)


@dataclass(frozen=True)
class Decision:
    winner: str
    time_us: float
    fastest: str
    tied: tuple  # candidate ids tied with the fastest, in preference order (winner first)


def decide(timings: dict, offered, *, tie_rel: float = TIE_REL) -> Decision | None:
    """The winner among ``offered`` (candidate ids in preference order) by the rule above, or None
    when none of them has a usable time. Candidates without a timing are not considered."""
    usable = [timings[c] for c in offered if c in timings and timings[c].usable]
    if not usable:
        return None
    fastest = min(usable, key=lambda t: t.time_us)  # min keeps the first of equal times
    band_hi = max(fastest.ci_high_us if fastest.ci_high_us is not None else fastest.time_us,
                  fastest.time_us * (1.0 + tie_rel))
    tied = [t for t in usable if (t.ci_low_us if t.ci_low_us is not None else t.time_us) <= band_hi]
    winner = tied[0]  # usable is in preference order
    return Decision(winner.candidate, winner.time_us, fastest.candidate, tuple(t.candidate for t in tied))


def significantly_slower(recorded: Timing, fresh: Timing) -> bool:
    """The verify policy's test: is a fresh timing of the cached winner slower than its recorded CI
    allows? Yes when the fresh CI lies wholly above the recorded one (MIOpen's TrustVerify uses a
    fixed 1.10x of the recorded time instead)."""
    if not fresh.usable:
        return True
    if not recorded.usable:
        return False
    hi = recorded.ci_high_us if recorded.ci_high_us is not None else recorded.time_us
    lo = fresh.ci_low_us if fresh.ci_low_us is not None else fresh.time_us
    return lo > hi
