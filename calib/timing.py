"""Timing protocol: when to stop repeating, and what one sweep point's measurement carries.

A :class:`Measurement` keeps every raw sample and computes statistics only when asked, so that the
results store can keep the evidence and a later fit can weigh it. It carries its own warnings
(noisy, throttled, stopped by the budget before reaching the target precision) rather than leaving
the caller to remember them.

The stopping rule is NVBench's idea in distribution-free form: take samples in batches until the
95% confidence interval of the median is narrower than a target fraction of the median, or until
a budget of measured time or samples runs out. Both backends use the same rule; the simulated one
applies it to a whole sweep at once (:meth:`StoppingRule.samples_needed`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property

from ._lazy import lazy

np = lazy("numpy")

Z95 = 1.959963984540054
NOISY_IQR_FRACTION = 0.10
# Samples further than this many robust standard deviations (1.4826 MAD) from the median are
# interference (a context switch, another process's kernel), not the kernel's own time.
OUTLIER_MADS = 3.5
# ... with the robust sd at least this share of the median. Event timers tick in 32 ns steps, so a
# steady kernel's samples tie at the median and their MAD is 0: every sample then counted as an
# inlier, and one host-delayed launch (131.9 against 36.5 us, an H200 FMA point, 2026-12-01) moved
# the point's mean by 15% and the FP32 line above the clock's limit. Half a percent cuts what lies over 1.75%
# from the median (3.5 x 0.5%): a few timer steps for kernels over about 4 us, and gross delays for all.
MIN_ROBUST_SD_REL = 0.005


def median_ci_ranks(n: int) -> tuple[int, int]:
    """0-based order-statistic indices bounding a ~95% CI of the median of n samples."""
    half = Z95 * math.sqrt(n) / 2.0
    lo = max(0, int(math.floor(n / 2.0 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2.0 + half)))
    return lo, hi


def median_rel_halfwidth(sorted_samples: np.ndarray) -> np.ndarray:
    """Half-width of the median's 95% CI over the median, along the last axis (already sorted)."""
    n = sorted_samples.shape[-1]
    lo, hi = median_ci_ranks(n)
    med = np.median(sorted_samples, axis=-1)
    return (sorted_samples[..., hi] - sorted_samples[..., lo]) / 2.0 / med


@dataclass(frozen=True)
class StoppingRule:
    min_samples: int = 10
    max_samples: int = 400
    batch: int = 10
    rel_precision: float = 0.005
    budget_s: float = 0.5

    def stop_reason(self, samples_us: np.ndarray) -> str | None:
        """Why to stop after these samples, or None to take another batch."""
        n = len(samples_us)
        if n < self.min_samples:
            return None
        if median_rel_halfwidth(np.sort(samples_us)) <= self.rel_precision:
            return "precision"
        if n >= self.max_samples:
            return "max_samples"
        if float(np.sum(samples_us)) * 1e-6 >= self.budget_s:
            return "budget"
        return None

    def samples_needed(self, samples_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized rule over a (points x max_samples) matrix: how many samples each row would
        have taken, and why it stopped. Only checkpoints at whole batches count, as in a real run."""
        points, available = samples_us.shape
        taken = np.full(points, min(available, self.max_samples))
        reason = np.full(points, "max_samples", dtype=object)
        open_rows = np.ones(points, dtype=bool)
        spent_s = np.cumsum(samples_us, axis=1) * 1e-6
        first = max(self.min_samples, self.batch)
        for n in range(first, min(available, self.max_samples) + 1, self.batch):
            if not open_rows.any():
                break
            prefix = np.sort(samples_us[open_rows, :n], axis=1)
            precise = median_rel_halfwidth(prefix) <= self.rel_precision
            broke = spent_s[open_rows, n - 1] >= self.budget_s
            done = precise | broke
            rows = np.flatnonzero(open_rows)[done]
            taken[rows] = n
            reason[rows] = np.where(precise[done], "precision", "budget")
            open_rows[rows] = False
        return taken, reason

    def to_dict(self) -> dict:
        return asdict(self)


def interleave(samplers, rule: StoppingRule, *, seed: int = 0, together: bool = False
               ) -> list[tuple[list[float], str]]:
    """Host-clock samples of several sweep points taken in rounds: each round takes one sample of
    every point still open, in a fresh random order; after every ``rule.batch`` rounds each point
    is held to ``rule`` on its own samples. Returns ``(samples_us, stop_reason)`` per sampler.

    ``together``: no point stops before all would (each keeps its own reason), so that sample k of
    every point comes from round k and rounds can be set aside as a whole
    (:func:`set_aside_unsteady_rounds`); a point that stops early holds only the first rounds'
    hosts (quick #3, H200 2026-12-02: latency 40000 had the first 80 of 400 rounds, the fast ones,
    and the latency line missed by 4.1%).

    Why: a host's launch path changes speed over tens of milliseconds (CPU clocks, scheduling).
    Points measured one after another then each see a different host, and the line through them
    misses by 3-10% (an H200 host, 2026-12-01: 64 launches at 7.3 us each right after 48 at 6.4);
    rounds of one sample give every point the same mixture of host states, so the line holds what
    the points share. The random order keeps any one point from always following the slowest."""
    import random

    order = random.Random(seed)
    samples: list[list[float]] = [[] for _ in samplers]
    reasons: list[str | None] = [None] * len(samplers)
    while any(r is None for r in reasons):
        open_points = list(range(len(samplers))) if together else [i for i, r in enumerate(reasons) if r is None]
        for _ in range(rule.batch):
            order.shuffle(open_points)
            for i in open_points:
                samples[i].append(float(samplers[i]()))
        for i in open_points:
            reasons[i] = rule.stop_reason(np.asarray(samples[i]))
    return [(s, r) for s, r in zip(samples, reasons)]


# Rounds of an interleaved group are set aside when the host ran at least this much slower in them
# than in the others: the slow stretches of six H200 quick and two full suites (2026-12-01/02, raw
# samples in their results.sqlite) ran 1.25-1.42x slower (a time-shared CPU: in quick #3's slow
# rounds 4 launches took 1.0x or 2.2x, never between, and 64 launches 1.5x), and the best split in
# two of the rounds of the calm runs was 1.04-1.09x.
UNSTEADY_RATIO = 1.15
# ... and when the fast rounds are at least this share: a brief fast spell (the first 10 of quick
# #3's rounds ran 0.8x) is not taken for the host's steady state.
MIN_STEADY_SHARE = 0.25
# A host state lasts tens of rounds or more (quick #3: slow stretches of 30-250 rounds), and a round
# of short points can miss the hits of a time-shared CPU (4 launches: no hit in about half of the
# slow rounds): each round's state is the running median over this many rounds around it.
STATE_ROUNDS = 11


def unsteady_rounds(samples_us) -> tuple[np.ndarray, float]:
    """Which rounds of a group of points sampled in the same rounds (:func:`interleave` with
    ``together``: rows of equal length) the host ran slow in, and how much slower (a ratio, 1.0
    when none is set aside).

    A round's host state is the median over the points of log(sample / that point's 25th
    percentile), then the running median of that over ``STATE_ROUNDS`` rounds: one point's spike
    does not move it, and the quarter of the rounds a steady state holds at least puts every
    point's reference in it. The states are split in two where their
    between-group variance is largest (Otsu's threshold); the slow group is set aside when it is
    ``UNSTEADY_RATIO`` slower and the fast one holds ``MIN_STEADY_SHARE`` of the rounds. Whole
    rounds go, so every point keeps the same rounds and the line through the points still holds
    what they share."""
    x = np.asarray(samples_us, dtype=float)
    rounds = x.shape[1] if x.ndim == 2 else 0
    keep_all = np.zeros(rounds, dtype=bool), 1.0
    if x.ndim != 2 or x.shape[0] < 3 or rounds < 2 * STATE_ROUNDS or not np.all(x > 0):  # too few to tell
        return keep_all
    per_round = np.median(np.log(x / np.percentile(x, 25, axis=1, keepdims=True)), axis=0)
    half = STATE_ROUNDS // 2
    padded = np.pad(per_round, half, mode="edge")
    state = np.median(np.lib.stride_tricks.sliding_window_view(padded, STATE_ROUNDS), axis=1)
    v = np.sort(state)
    k = np.arange(1, rounds)
    below = np.cumsum(v)[:-1]
    m0, m1 = below / k, (v.sum() - below) / (rounds - k)
    split = int(np.argmax(k * (rounds - k) * (m1 - m0) ** 2))
    slow, fast, fast_share = m1[split], m0[split], (split + 1) / rounds
    if slow - fast < math.log(UNSTEADY_RATIO) or fast_share < MIN_STEADY_SHARE:
        return keep_all
    return state > (v[split] + v[split + 1]) / 2.0, float(math.exp(slow - fast))


def set_aside_unsteady_rounds(measurements: list) -> list:
    """The measurements of one interleaved group with the host's slow rounds
    (:func:`unsteady_rounds`) set aside: the samples stay as evidence, the centre and its standard
    error use the steady rounds, and each says so (a warning, and the rounds in its protocol).

    Why: the time a point takes in a slow stretch is interference (another process on the CPU),
    as a delayed launch is; where it covers most samples, the per-point outlier cut fails, and a
    stretch over 61% of quick #3's rounds (H200, 2026-12-02) put the overhead at 7.9 us ±4.7%
    where its steady rounds give 6.1 ±1.1% (replay of its raw samples)."""
    import dataclasses

    lengths = {m.n for m in measurements}
    if len(lengths) != 1:
        return list(measurements)
    mask, slowdown = unsteady_rounds([m.samples_us for m in measurements])
    if not mask.any():
        return list(measurements)
    note = {"set_aside_rounds": [int(i) for i in np.flatnonzero(mask)], "rounds": int(mask.size),
            "slowdown": round(slowdown, 4), "ratio_threshold": UNSTEADY_RATIO}
    return [dataclasses.replace(m, set_aside=mask.copy(), protocol={**m.protocol, "host_unsteady": note})
            for m in measurements]


@dataclass
class Measurement:
    """Raw samples of one sweep point plus how they were taken."""

    samples_us: np.ndarray
    stop_reason: str = "unknown"
    protocol: dict = field(default_factory=dict)
    clocks: dict = field(default_factory=dict)
    simulated: bool = False
    # Measurements of the other perf-configs tried before this one was chosen: the results store
    # keeps them too ("tuning" results), so winners can be recomputed and losers studied.
    candidates: list = field(default_factory=list, repr=False)
    # Samples taken while the host ran slow (:func:`set_aside_unsteady_rounds`), True where set
    # aside: kept as evidence, left out of every statistic below. None: every sample counts.
    set_aside: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        self.samples_us = np.asarray(self.samples_us, dtype=float)
        if self.samples_us.ndim != 1:
            raise ValueError(f"a measurement's samples are a 1-D array, got shape {self.samples_us.shape}")
        if self.set_aside is not None:
            self.set_aside = np.asarray(self.set_aside, dtype=bool)
            if self.set_aside.shape != self.samples_us.shape:
                raise ValueError(f"set_aside has {self.set_aside.size} entries for {self.samples_us.size} samples")

    @cached_property
    def _use(self) -> np.ndarray:
        """Mask of the samples every statistic uses: not set aside, and finite. A NaN or an infinite
        sample (a timer that failed) is no time at all: one NaN had made the point's time NaN, with
        no warning, and one inf its mean and IQR."""
        use = np.isfinite(self.samples_us)
        return use if self.set_aside is None else use & ~self.set_aside

    @cached_property
    def _used(self) -> np.ndarray:
        return self.samples_us[self._use]

    @property
    def n_nonfinite(self) -> int:
        return int(np.count_nonzero(~np.isfinite(self.samples_us)))

    @property
    def n_set_aside(self) -> int:
        return 0 if self.set_aside is None else int(np.count_nonzero(self.set_aside))

    @property
    def n(self) -> int:
        return int(self.samples_us.size)

    @cached_property
    def median_us(self) -> float:
        return float(np.median(self._used)) if self._used.size else float("nan")

    @cached_property
    def mean_us(self) -> float:
        return float(np.mean(self._used)) if self._used.size else float("nan")

    @cached_property
    def inliers(self) -> np.ndarray:
        """Mask of samples within OUTLIER_MADS robust sds of the median (the robust sd is 1.4826
        MAD, at least MIN_ROBUST_SD_REL of the median)."""
        used = self._use
        if not used.any():
            return used
        dev = np.abs(np.where(used, self.samples_us, self.median_us) - self.median_us)
        sd = max(1.4826 * float(np.median(dev[used])), MIN_ROBUST_SD_REL * abs(self.median_us))
        if sd == 0:
            return used
        return used & (dev <= OUTLIER_MADS * sd)

    @cached_property
    def center_us(self) -> float:
        """Mean of the inlying samples: the time the fits use.

        The median is robust but biased when interference only ever slows a kernel down (a few
        percent of slow samples shift it up by a fraction of the noise); the mean after removing
        the gross outliers is nearly unbiased for the undisturbed time and has less variance."""
        kept = self.samples_us[self.inliers]
        return float(np.mean(kept)) if kept.size else float("nan")

    @cached_property
    def se_us(self) -> float:
        """Standard error of ``center_us`` from the spread of the inliers: the measurement's own
        precision, against which a fit's residuals are judged."""
        kept = self.samples_us[self.inliers]
        return float(np.std(kept, ddof=1) / np.sqrt(kept.size)) if kept.size > 1 else float("nan")

    @property
    def n_outliers(self) -> int:
        return int(np.count_nonzero(self._use) - np.count_nonzero(self.inliers))

    @property
    def n_inliers(self) -> int:
        return int(np.count_nonzero(self.inliers))

    @cached_property
    def inlier_skew(self) -> float:
        """Skewness of the inlying samples (the third central moment over the variance to the 3/2):
        about 0 for a kernel's own, symmetric noise; positive where interference slows some samples
        by less than the cut, which ``center_us`` then averages in (``calib.fit`` turns it into a
        bound on that bias). NaN with fewer than 3 inliers or none apart."""
        kept = self.samples_us[self.inliers]
        if kept.size < 3:
            return float("nan")
        d = kept - kept.mean()
        m2 = float(np.mean(d * d))
        return float(np.mean(d**3) / m2**1.5) if m2 > 0 else float("nan")

    @cached_property
    def iqr_us(self) -> float:
        if not self._used.size:
            return float("nan")
        q1, q3 = np.percentile(self._used, [25, 75])
        return float(q3 - q1)

    @cached_property
    def median_rel_ci95(self) -> float:
        return float(median_rel_halfwidth(np.sort(self._used))) if self._used.size else float("nan")

    @property
    def throttled(self) -> bool:
        return bool(self.clocks.get("throttle_reasons"))

    @property
    def warnings(self) -> list[str]:
        out = []
        if not self.n:  # a candidate that gave none (the tuner rejects it): its statistics are NaN
            out.append("empty: no samples, no time")
        if self.n_nonfinite:
            out.append(f"non-finite: {self.n_nonfinite} of {self.n} samples are NaN or infinite, left out"
                       + ("; no sample is left to give a time" if not self._used.size else ""))
        if self.n and self.iqr_us > NOISY_IQR_FRACTION * self.median_us:
            out.append(f"noisy: IQR is {self.iqr_us / self.median_us:.0%} of the median")
        if self.throttled:
            out.append("throttled: " + ", ".join(self.clocks["throttle_reasons"]))
        target = self.protocol.get("rule", {}).get("rel_precision")
        if target and self.stop_reason in ("budget", "max_samples") and self.median_rel_ci95 > target:
            out.append(f"imprecise: stopped by {self.stop_reason} at ±{self.median_rel_ci95:.2%} "
                       f"(target ±{target:.2%})")
        if self.protocol.get("host_bound_batches"):
            out.append(f"host-bound: in {self.protocol['host_bound_batches']} batch(es) the host took longer to "
                       f"enqueue than the {self.protocol.get('hold_s', 0) * 1e3:.1f} ms hold, so some samples may "
                       "time the host")
        if self.n_set_aside:
            slowdown = self.protocol.get("host_unsteady", {}).get("slowdown")
            out.append(f"host-unsteady: {self.n_set_aside} of {self.n} rounds set aside, the host "
                       + (f"{slowdown:.2f}x slower in them" if slowdown else "slower in them"))
        if self.simulated:
            out.append("simulated: not a measurement of real hardware")
        return out

    def summary(self) -> dict:
        return {"time_us": self.center_us, "se_us": self.se_us, "median_us": self.median_us, "mean_us": self.mean_us,
                "iqr_us": self.iqr_us, "n_samples": self.n, "n_outliers": self.n_outliers,
                "n_inliers": self.n_inliers, "inlier_skew": self.inlier_skew,
                "median_rel_ci95": self.median_rel_ci95, "stop_reason": self.stop_reason,
                "throttled": self.throttled, "simulated": self.simulated,
                **({"n_set_aside": self.n_set_aside} if self.set_aside is not None else {})}

    def __repr__(self):
        return (f"<Measurement median {self.median_us:.3f} us, IQR {self.iqr_us:.3f} us, n={self.n}, "
                f"stop={self.stop_reason}{', ' + '; '.join(self.warnings) if self.warnings else ''}>")
