"""A predictor that learns a kernel from a few measured sizes: ``t = t0 + bytes_L2 / r_L2 + bytes_DRAM / r_DRAM``.

Any kernel (a user's callable, a library op such as ``cupy.multiply`` or ``torch.softmax``) runs
below the machine's peak by a factor of its own, so a roofline from the profile misses it; a
straight line through a few sizes misses it where the sizes were not (the tail: L2-resident
sizes, where the rate is L2's, and launch-bound ones, where the fixed cost is everything). The
model here is the kernel's own three numbers, with the profile's knowledge of *where* the memory
levels change:

- the share of the bytes L2 serves at each size comes from the profile, not a fit:
  :func:`calib.heuristics.predictor.streamed_l2_fraction` (a working set streamed once per call
  loses L2 just past the capacity) on the scale :func:`~calib.heuristics.predictor.l2_scale_bytes`
  gives (0.70 of the hardware L2, as pointwise and normalization read it; the measured
  ``memory.l2.capacity_bytes`` where the fingerprint has no L2 size). On the H200 the measured
  capacity moved 36.9-41.4 MB between hosts while cupy.sum's working sets ran from L2 at 36.9 MB
  and from DRAM at 51.6 MB on every host; replayed on recordings Q-S (2026-12-02, their learning
  samples refitted, the shipped profile: capacity 36.9 MB, scale 44.0 MB), cupy.sum's p90 / worst
  error 5.4 / 11.6, 6.1 / 10.2, 5.1 / 11.2% on the capacity and 5.2 / 6.7, 5.6 / 7.1, 5.0 / 6.4% on
  the scale (36.9 MB: +11.2% -> within 2%), cupy.multiply's and the softmax's within 0.6 points;
- ``t0``, ``r_DRAM`` and ``r_L2`` are fitted by weighted least squares over every *sample*
  (weights ``1/t²``: timing noise is proportional to time), with classical standard errors and
  Student-t intervals. With three sizes the residual degrees of freedom come from the samples,
  so the CIs say how well the measurements pin the numbers, not how right the model is;
- a rate the sizes cannot identify (no size in L2, or none past it) is the other rate scaled by
  the profile's L2/DRAM bandwidth ratio, and says so (``assumed``).

The default sizes (:func:`default_sizes`) are chosen from the profile to pin one number each: a
launch-bound size (1/64 of the L2 capacity), an L2-resident one (half of it) and a DRAM one (the
L2 ramp's end). Each is measured at six points spread geometrically around it (:func:`learning_points`):
a library op's time at one size carries effects of its own kernel's quantisation that the next size
does not (cupy.sum on an H200: 5.9 us at 477 kB, 6.5 us at 735 kB, its last partial tile; 9.3 us at
18.9 MB just past a wave of CUB's blocks where the line through its neighbours says 8.9), so points
at one size pin t0 or a rate anywhere in such a wobble; points spread over it pin its middle.

The profile also says what a kernel pays on entering DRAM (:func:`dram_fill_us`): the memory
pipeline fills for one DRAM latency before bytes flow at the DRAM rate, so the DRAM line's
intercept lies above the launch-bound t0. The model adds it to the DRAM share of each size.

A prediction carries two intervals. ``ci95`` is the three numbers' CIs propagated: how well the
samples pin the smooth model. ``pi95`` is where the kernel's time at that size is expected to
fall: it adds the kernel's own scatter between sizes about the model (:attr:`LearnedModel.size_scatter_rel`,
the learning sizes' medians against the fit) and :data:`MODEL_FORM_REL`, the model's error of shape
between learned sizes. A kernel whose scatter reaches past ROUGH_REL at 95% is flagged "rough in
size": no smooth model predicts it closer, and its interval says so.

A learned model is stored in the profile under its own names, ``learned.<kernel>.t0_us``,
``.rate_gbps``, ``.l2_rate_gbps`` (with CIs and units), ``.dram_fill_us`` (the profile's, as
fitted) and ``.size_scatter_rel``, through calib.profile's atomic, locked writer
(:meth:`LearnedModel.save`), and read back with ``query`` (:meth:`LearnedModel.from_profile`).
Tuning results feed the same fit: :func:`learn_from_autotune` takes the winners of a family's
entries in the tuning database, one point per problem size.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field

from . import predictor as P
from .registry import HeuristicError, read

NAME = re.compile(r"[a-z0-9_]+")  # fullmatch: "a\n" is no name ($ matched before a final newline)

# Where a learning size's points lie: b * spread ** u, u from a low-discrepancy (golden-ratio) sequence
# over [-1, 1], so the points fall at unrelated phases of any quantisation much finer than the band
# (evenly spaced offsets alias with a period near their step). Why points at all: CuPy 14.2's cupy.sum
# runs CUB's DeviceReduce (CUB is CuPy's default accelerator on CUDA, cupy/_core/_accelerator.pyx): two
# kernels, 4096-item tiles of float32 on SM90 (CCCL 3.1 tuning_reduce.cuh Policy600), the last partial
# tile reduced in a guarded loop of 256 items an iteration (agent_reduce.cuh). On all eight H200
# recordings of 2026-12-01 (bench/results/2026-12-01-h200-heuristics-*/heuristics-learned.json.gz) it took
# 5.82-6.18 us at 477 kB (2 iterations) and 6.0-6.6 us at 64 and 175 kB (15 and 11); learned at 735 kB
# alone (15 iterations), t0 sat near the band's top and 477 kB missed by 11-13% on F and G.
# Why bands this wide (x/1.6 for the launch-bound size, x/1.45 for the others; until 2026-12-03 all
# were within +-5%): the sum's time also steps with whole waves of its first kernel's blocks (one
# 16 KiB tile a block, a wave every 17.3 MB on the H200), and the L2 size's +-5% band (17.6-19.4 MB)
# sat on the step just past the first: r_L2 came out slow and every L2-resident size 5-8% over. Its
# DRAM size at 2.3 GB was far from where the sum's intercept (two kernels' fill, 1.2-2.0 us above the
# profile's one) matters: 51-141 MB came out 4-6% under. Replayed on the 27 H200 recordings that keep
# every size's passes (2026-12-01..03; the recorded sizes inside each band as its points, those sizes
# left out of the errors), these bands and the DRAM size at the ramp's end (292 MB, was 2.34 GB) took
# cupy.sum's p90 error from 5.42% mean / 7.09% max to 4.04 / 5.03%, cupy.multiply's from 2.73 / 4.76
# to 2.28 / 2.85% and the CuPy softmax's from 3.85 / 4.07 to 2.83 / 2.99%; moving each band a recorded
# size either way (27 placements) kept the sum at 3.91-4.31% mean, 4.90-5.28% max. Moving the L2 size
# instead (cap/4, cap/3) fitted the sum's steps, not its rate (worst 12-17%); a fitted DRAM intercept
# (a fourth number) moved the sum's miss to 51.6 MB and the softmax's worst to 10.7%.
_PHI = (5**0.5 - 1) / 2
OFFSETS = tuple(2 * ((k * _PHI) % 1) - 1 for k in range(1, 7))
SPREAD = (1.6, 1.45, 1.45)  # the launch-bound, L2 and DRAM bands: each point within x/spread of its size
L2_BAND_TOP = 0.9  # the L2 band's top point at most this share of the profile's L2 scale (f = 1 there)
# The smooth model's own error of shape between the sizes it learned at, a relative SD added to every
# prediction interval (pi95). Why it is needed: on the 16 H200 recordings with the shipped learning points
# (bench/results/2026-12-03-h200-heuristics-s11/ .. 2026-12-07-h200-heuristics-s19/, 34 sizes from 64 kB
# to 4 GB each), the three numbers' CIs covered 40% (cupy.multiply), 9% (cupy.sum) and 11% (the CuPy
# softmax) of the measured times. The kernels' scatter between learning sizes alone leaves the softmax far
# short (its misses, p90 2.8%, are of shape, smooth in size, and its learning points lie close to the
# model); with 1.5% added as well pi95 covers 97, 98 and 97% (each recording 91% or more). On the 27
# older recordings, whose learning points lay in narrower bands (a DRAM one at 2.4 GB), 91, 98 and 81%.
MODEL_FORM_REL = 0.015
# A kernel whose scatter between sizes reaches past this at 95% (1.96 SD) is flagged
# "rough in size": the bar at other sizes is a p90 of 5%. cupy.sum's scatter on those recordings
# was 2.7-3.8% (CUB's 16 KiB tiles and waves of blocks: flagged on all 16), cupy.multiply's 0.8-1.3%, the
# softmax's 0.5-0.8% (neither flagged on any of the 43 recordings).
ROUGH_REL = 0.05


@dataclass
class LearnedModel:
    kernel: str
    t0_us: float
    rate_gbps: float
    l2_rate_gbps: float
    ci95: dict = field(default_factory=dict)  # name -> (lo, hi)
    assumed: tuple = ()
    n: int = 0
    l2_scale_bytes: float = P.DEFAULTS["memory.l2.capacity_bytes"]  # the profile's P.l2_scale_bytes
    dram_fill_us: float = 0.0  # from the profile (dram_fill_us), not fitted
    device: dict = field(default_factory=dict)  # the fingerprint of the profile it was fitted against
    software: dict = field(default_factory=dict)
    flags: list = field(default_factory=list)  # what is wrong with the fit (a poor fit), carried to the profile
    # the relative SD of the kernel's time about the model from one size to the next: the learning sizes'
    # medians against the fit, over their residual degrees of freedom (0 where there are none: three sizes
    # for three numbers, or a model stored before it was kept)
    size_scatter_rel: float = 0.0

    def predict_us(self, nbytes: float) -> float:
        f = P.streamed_l2_fraction(None, nbytes, scale_bytes=self.l2_scale_bytes)
        return (self.t0_us + (1 - f) * self.dram_fill_us
                + nbytes * (f / (self.l2_rate_gbps * 1e3) + (1 - f) / (self.rate_gbps * 1e3)))

    def predict(self, nbytes: float) -> P.Prediction:
        """The time at ``nbytes`` with a delta-method interval from the three numbers' CIs
        (as independent: the profile keeps CIs, not covariances)."""
        try:
            size = float(nbytes) if isinstance(nbytes, numbers.Real) and not isinstance(nbytes, bool) else math.nan
        except OverflowError:  # an integer of 400 digits
            size = math.inf
        if not 0 <= size < math.inf:
            raise HeuristicError(f"predicting {self.kernel}: {nbytes!r:.40} is no size; a size is a finite number "
                                 "of bytes, 0 or more")
        nbytes = size
        if self.flags:
            from .registry import _warn_once

            _warn_once(("learned", self.kernel, tuple(self.flags)),
                       f"the learned model of {self.kernel} is flagged: {'; '.join(self.flags)}")
        t = self.predict_us(nbytes)
        contrib = {}
        for name in ("t0_us", "rate_gbps", "l2_rate_gbps"):
            ci = self.ci95.get(name)
            if not ci:
                continue
            se = (ci[1] - ci[0]) / 2 / P.Z95
            v = getattr(self, name)
            lo = LearnedModel(**{**self.__dict__, name: max(v - se, 1e-9)})
            hi = LearnedModel(**{**self.__dict__, name: v + se})
            contrib[name] = abs(hi.predict_us(nbytes) - lo.predict_us(nbytes)) / 2
        sd = math.sqrt(sum(c * c for c in contrib.values()))
        sd_size = t * math.hypot(self.size_scatter_rel, MODEL_FORM_REL)
        pd = math.hypot(sd, sd_size)
        return P.Prediction(t, (max(t - P.Z95 * sd, 0.0), t + P.Z95 * sd), {"bytes": nbytes}, contrib,
                            pi95=(max(t - P.Z95 * pd, 0.0), t + P.Z95 * pd))

    def records(self, source: str = "calib.heuristics.learned") -> dict:
        units = {"t0_us": "us", "rate_gbps": "GB/s", "l2_rate_gbps": "GB/s"}
        out = {}
        for name, unit in units.items():
            v = float(getattr(self, name))
            ci = self.ci95.get(name)
            rec = {"value": v, "unit": unit, "n": self.n, "source": source,
                   "method": "WLS over samples, t = t0 + DRAM share x fill + bytes_L2/r_L2 + bytes_DRAM/r_DRAM, "
                             "L2 share and DRAM fill from the profile",
                   "flags": (["assumed from the other rate and the profile's L2/DRAM ratio"] if name in self.assumed
                             else []) + list(self.flags)}
            if ci and ci[0] <= v <= ci[1] and ci[0] > 0:
                rec["ci95"] = [float(ci[0]), float(ci[1])]
            out[f"learned.{self.kernel}.{name}"] = rec
        out[f"learned.{self.kernel}.size_scatter_rel"] = {
            "value": float(self.size_scatter_rel), "unit": "relative", "n": self.n, "source": source,
            "method": "relative SD of the learning sizes' median times about the fitted model, over its residual "
                      "degrees of freedom (0: none)",
            "flags": [f for f in self.flags if f.startswith("rough in size")]}
        if not self.dram_fill_us > 0:  # no fill (a model of before it, or built by hand): a time of 0 is no
            return out                  # measurement the profile keeps, and a missing fill reads as 0
        # the fill the fit subtracted, stored with the model so it predicts as fitted wherever it is read
        out[f"learned.{self.kernel}.dram_fill_us"] = {
            "value": float(self.dram_fill_us), "unit": "us", "n": self.n, "source": source,
            "method": "from the profile, not fitted: Little's law, SMs x memory.bytes_in_flight_per_sm / "
                      "DRAM bandwidth",
            "flags": []}
        return out

    def save(self, path, profile=None):
        """Merge the records into the profile at ``path`` (atomic, under its lock), as the device of
        ``profile``, else of the profile the model was fitted against, else of the file at ``path``:
        a model saved without a profile had written ``device: {}``, which the file's own device then
        refused as another's.

        A model whose fixed cost or rates are not above 0 is refused (HeuristicError): the profile's
        reader rejects such a time, so it would be written and then unreadable. Other poor fits are
        stored with their flags."""
        from ..profile import ProfileError, merge_into, read_profile

        bad = [n for n in ("t0_us", "rate_gbps", "l2_rate_gbps") if not getattr(self, n) > 0]
        if bad:
            raise HeuristicError(f"the learned model of {self.kernel} is not saved: {', '.join(bad)} not above 0 "
                                 f"({'; '.join(self.flags) or 'a poor fit'})")
        device = dict(getattr(profile, "device", None) or self.device or {})
        software = dict(getattr(profile, "software", None) or self.software or {})
        there = None
        if not device or not self.dram_fill_us > 0:  # the file's device, or whether it holds a fill
            try:
                there = read_profile(path)
            except (ProfileError, OSError):
                there = None
        if there is not None and not device and there.device:
            device, software = dict(there.device), dict(there.software or {})
        fill = f"learned.{self.kernel}.dram_fill_us"
        if not self.dram_fill_us > 0 and there is not None and fill in there.params:
            # a merge keeps what it is not given: the earlier model's fill would be read back with this one
            raise HeuristicError(f"the learned model of {self.kernel} has no DRAM fill, and {path} holds an earlier "
                                 f"model's ({fill}), which would be read back with it: fit it against the profile "
                                 "(learn(..., profile=...)), or save it to another path")
        return merge_into(path, self.records(), device=device, software=software)

    @classmethod
    def from_profile(cls, profile, kernel: str) -> LearnedModel:
        """The model stored under ``learned.<kernel>.*``, read through ``query``; the L2 sizes from
        the same profile. Raises HeuristicError when the profile has none."""
        if not isinstance(kernel, str) or not NAME.fullmatch(kernel):
            raise HeuristicError(f"a learned kernel's name is lower-case letters, digits and _: {kernel!r}")
        vals = {n: read(profile, f"learned.{kernel}.{n}", None) for n in ("t0_us", "rate_gbps", "l2_rate_gbps")}
        missing = [n for n, v in vals.items() if v is None]
        if missing:
            raise HeuristicError(f"the profile has no learned model of {kernel!r} (missing "
                                 f"{', '.join('learned.' + kernel + '.' + m for m in missing)})")
        ci, flags = {}, []
        for n in vals:
            try:
                rec = profile.record(f"learned.{kernel}.{n}")
                c = rec.ci95
                flags += [f for f in (rec.flags or ()) if f.startswith(("poor fit", "rough in size"))
                          and f not in flags]
            except Exception:  # noqa: BLE001 - no CI: the prediction has none from it
                c = None
            if c:
                ci[n] = tuple(c)
        q = P.q_of(profile)
        fill = read(profile, f"learned.{kernel}.dram_fill_us", None)  # None: stored before the fill existed
        scatter = read(profile, f"learned.{kernel}.size_scatter_rel", None)
        if scatter is not None and not 0 <= scatter < 10:
            raise HeuristicError(f"the profile's learned.{kernel}.size_scatter_rel is {scatter!r}: a relative SD "
                                 "is 0 or more (and not 1000%)")
        return cls(kernel, vals["t0_us"], vals["rate_gbps"], vals["l2_rate_gbps"], ci,
                   l2_scale_bytes=P.l2_scale_bytes(q),
                   dram_fill_us=0.0 if fill is None else float(fill),
                   device=dict(getattr(profile, "device", None) or {}),
                   software=dict(getattr(profile, "software", None) or {}), flags=flags,
                   size_scatter_rel=0.0 if scatter is None else float(scatter))


def default_sizes(profile) -> list[float]:
    """Bytes of three sizes that pin t0 (launch-bound), r_L2 (L2-resident) and r_DRAM: 1/64 and 1/2 of
    the L2 capacity (the L2 one lowered where its band would reach past :data:`L2_BAND_TOP` of the L2
    scale) and the ramp's end (at least 4x the capacity)."""
    q = P.q_of(profile)
    cap = q("memory.l2.capacity_bytes")
    end = q("memory.l2.capacity_bytes.ramp_end")
    l2 = min(cap / 2, L2_BAND_TOP * P.l2_scale_bytes(q) / SPREAD[1])
    return [cap / 64, l2, max(end, 4 * cap)]


def learning_points(nominal_bytes, spread=SPREAD) -> list[float]:
    """The sizes (bytes) at which each nominal learning size is measured, in order: b * s ** u for each
    of :data:`OFFSETS` u, s the size's entry of ``spread`` (the last entry for any further sizes)."""
    spread = tuple(spread)
    out = []
    for i, b in enumerate(nominal_bytes):
        s = spread[min(i, len(spread) - 1)]
        out += [float(int(b * s**u)) for u in OFFSETS]
    return out


def dram_fill_us(q) -> float:
    """What a kernel streaming from DRAM pays beyond its launch-bound time: the pipeline fills for one
    DRAM latency before bytes flow at the DRAM rate. Little's law over the profile: the bytes in flight
    per SM that reach the bandwidth (``memory.bytes_in_flight_per_sm``) times the SMs, over the DRAM
    bandwidth: 0.57 us on the H200 profile (profiles/nvidia-h200.json). Checked on the recordings
    (bench/results/2026-12-01-h200-heuristics-*, eight H200 runs on five hosts): cupy.multiply's DRAM
    line (72 MB-4 GB) lies 0.43-0.68 us (median 0.59) above its launch-bound t0. An op of several
    kernels pays it per kernel, which the profile cannot know: cupy.sum's lies 1.2-2.0 us above
    (CUB's two kernels; the first gives each block one 16 KiB tile until the grid reaches 5x its
    resident blocks: 86 MB on the H200 if 8 of its 256-thread blocks fit an SM), the CuPy softmax's
    (five kernels) 6.8-7.6 us; for them it is a lower bound."""
    inflight = q("memory.bytes_in_flight_per_sm", P.DEFAULTS["memory.bytes_in_flight_per_sm"])
    return float(P.sm_count(q) * inflight / (P.dram_gbps(q, "copy", 16) * 1e3))


def fit(kernel: str, nbytes, samples_us, profile) -> LearnedModel:
    """Fit the model to samples (a sequence of arrays, one per size) measured at ``nbytes``."""
    import numpy as np
    from scipy import stats

    if not isinstance(kernel, str) or not NAME.fullmatch(kernel):
        raise HeuristicError(f"a learned kernel's name is lower-case letters, digits and _: {kernel!r}")
    nbytes, samples_us = _checked_sizes(kernel, nbytes, samples_us)
    q = P.q_of(profile)
    fill = dram_fill_us(q)
    rows, ys, offs = [], [], []
    l2_scale = P.l2_scale_bytes(q)
    for b, s in zip(nbytes, samples_us):
        f = P.streamed_l2_fraction(q, float(b), scale_bytes=l2_scale)
        for t in np.asarray(s, dtype=float).ravel():
            if math.isfinite(t) and t > 0:
                rows.append((1.0, b * (1 - f) / 1e3, b * f / 1e3))
                ys.append(t)
                offs.append((1 - f) * fill)
    X, y, off = np.asarray(rows), np.asarray(ys), np.asarray(offs)
    sizes = sorted({float(X[i, 1] + X[i, 2]) for i in range(len(X))})  # sizes with a usable sample
    if len(sizes) < 2 or len(y) < 4:
        raise HeuristicError(f"learning {kernel} needs at least two sizes with a usable sample (a finite time "
                             f"above 0) and four such samples; it has {len(sizes)} and {len(y)}")
    dram_r = P.dram_gbps(q, "copy", 16)
    ratio = q("memory.l2.read_bandwidth_gbps") / dram_r  # the profile's L2/DRAM ratio, for an unidentified rate
    assumed = []
    has_dram, has_l2 = X[:, 1].any(), X[:, 2].any()
    if has_dram and has_l2 and len({round(x, 9) for x in X[:, 1] / np.maximum(X[:, 1] + X[:, 2], 1e-30)}) < 2:
        has_l2 = False
    if has_dram and has_l2 and len(sizes) < 3:  # three numbers from two sizes: one is not identified
        has_l2 = False
    if has_dram and has_l2:
        cols = [0, 1, 2]
        D = X
    elif has_dram:  # the L2 rate from the DRAM one and the profile's ratio
        cols = [0, 1]
        D = np.column_stack([X[:, 0], X[:, 1] + X[:, 2] / ratio])
        assumed = ["l2_rate_gbps"]
    else:
        cols = [0, 2]
        D = np.column_stack([X[:, 0], X[:, 2] + X[:, 1] * ratio])
        assumed = ["rate_gbps"]
    yf = y - off  # the DRAM fill is the profile's, not fitted
    beta, se, resid, dof = _wls(kernel, D, y, yf, off)
    tq = float(stats.t.ppf(0.975, dof))
    t0, c_a = float(beta[0]), float(beta[1])
    ci = {"t0_us": (t0 - tq * se[0], t0 + tq * se[0])}

    def rate(c, s):  # us per kB -> GB/s, the CI inverted where the slope's is positive
        lo, hi = c - tq * s, c + tq * s
        return 1.0 / c, ((1.0 / hi, 1.0 / lo) if lo > 0 else None)

    if c_a <= 0:
        raise HeuristicError(f"learning {kernel}: the time does not grow with the bytes (slope {c_a:.3g})")
    if cols == [0, 1, 2]:
        r_d, ci_d = rate(c_a, se[1])
        r_l, ci_l = rate(float(beta[2]), se[2]) if beta[2] > 0 else (r_d * ratio, None)
        if beta[2] <= 0:
            assumed = ["l2_rate_gbps"]
    elif cols == [0, 1]:
        r_d, ci_d = rate(c_a, se[1])
        r_l, ci_l = r_d * ratio, (tuple(x * ratio for x in ci_d) if ci_d else None)
    else:
        r_l, ci_l = rate(c_a, se[1])
        r_d, ci_d = r_l / ratio, (tuple(x / ratio for x in ci_l) if ci_l else None)
    if ci_d:
        ci["rate_gbps"] = ci_d
    if ci_l:
        ci["l2_rate_gbps"] = ci_l
    model = LearnedModel(kernel, t0, r_d, r_l, ci, tuple(assumed), len(y), l2_scale, fill,
                         device=dict(getattr(profile, "device", None) or {}),
                         software=dict(getattr(profile, "software", None) or {}))
    model.size_scatter_rel = _size_scatter(model, nbytes, samples_us, len(cols))
    model.flags = _fit_flags(model, nbytes, samples_us)
    return model


def _size_medians(nbytes, samples_us):
    """(bytes, median time) of each size with a usable sample."""
    import numpy as np

    out = []
    for b, s in zip(nbytes, samples_us):
        t = np.asarray(s, dtype=float).ravel()
        t = t[np.isfinite(t) & (t > 0)]
        if t.size:
            out.append((float(b), float(np.median(t))))
    return out


def _size_scatter(model: LearnedModel, nbytes, samples_us, fitted: int) -> float:
    """The relative SD of the sizes' median times about the model, over the sizes less the ``fitted``
    numbers (0 where that leaves none). A sample's own noise enters it too, divided by the samples a
    median has: what is left is how far the kernel's time moves from one size to the next."""
    rel = [m / model.predict_us(b) - 1 for b, m in _size_medians(nbytes, samples_us)]
    dof = len(rel) - fitted
    if dof < 1:
        return 0.0
    return math.sqrt(sum(r * r for r in rel) / dof)


def _checked_sizes(kernel: str, nbytes, samples_us) -> tuple[list, list]:
    """The sizes (bytes, finite and above 0) and their samples, one sequence each, of equal length:
    a NaN size ended in LAPACK's "SVD did not converge", and zip() cut a longer list short silently."""
    try:
        nbytes, samples_us = list(nbytes), list(samples_us)
    except TypeError:
        raise HeuristicError(f"learning {kernel}: the sizes and the samples must each be a sequence") from None
    if len(nbytes) != len(samples_us):
        raise HeuristicError(f"learning {kernel}: {len(nbytes)} sizes but {len(samples_us)} sequences of samples; "
                             "give one sequence of samples per size")
    out = []
    for i, b in enumerate(nbytes):
        try:
            v = float(b)
        except (TypeError, ValueError, OverflowError):
            v = math.nan
        if isinstance(b, bool) or not math.isfinite(v) or v <= 0:
            raise HeuristicError(f"learning {kernel}: size {i} is {b!r} bytes; a size is a finite number of "
                                 "bytes above 0")
        out.append(v)
    return out, samples_us


def _wls(kernel: str, D, y, yf, off):
    """Weighted least squares of ``yf`` on the columns of ``D`` (weights 1/t², from fitted times after
    a first pass): (coefficients, their standard errors, weighted residuals, residual dof).

    Solved and its covariance taken from the SVD of the weighted design with each column scaled to
    unit norm, not from the normal equations' pseudo-inverse: with sizes from 1 B to 1 PB the normal
    matrix's condition number passed pinv's cutoff, a direction was dropped and a rate's interval
    came out of zero width (3996.13-3996.13 GB/s; 1% coverage of the truth over 200 seeds). A design
    that still cannot separate the numbers (two columns alike) is refused, not given a CI."""
    import numpy as np

    w = 1.0 / y**2
    for _ in range(2):  # weights from fitted, not observed, times (a noisy sample must not pick its weight)
        sw = np.sqrt(w)
        A = D * sw[:, None]
        norm = np.linalg.norm(A, axis=0)
        norm[norm == 0] = 1.0
        U, S, Vt = np.linalg.svd(A / norm, full_matrices=False)
        if S[-1] <= S[0] * 1e-12:
            raise HeuristicError(f"learning {kernel}: the sizes cannot separate the fixed cost from the rates "
                                 "(give sizes that differ in bytes and in memory level)")
        beta = (Vt.T @ ((U.T @ (yf * sw)) / S)) / norm
        fitted = D @ beta + off
        w = 1.0 / np.where(fitted > 0, fitted, y) ** 2
    resid = (yf - D @ beta) * sw  # weighted as the last solve was, as its covariance is
    dof = max(len(y) - D.shape[1], 1)
    s2 = float(resid @ resid) / dof
    se = np.sqrt(s2 * np.sum((Vt.T / S) ** 2, axis=1)) / norm
    return beta, se, resid, dof


# A learning size the fitted model misses by more than this (its samples' median against the
# model) flags the fit as poor: the bar at other sizes is a p90 of 5% and a worst case of
# 20%, so a model that cannot reach its own sizes within 10% is not this kernel's.
POOR_FIT_REL = 0.10


def _fit_flags(model: LearnedModel, nbytes, samples_us) -> list[str]:
    """What is wrong with a fit, in words a profile's ``flags`` carry: a kernel rough in size (its
    scatter between sizes, :func:`_size_scatter`, past ROUGH_REL at 95%), a fixed cost at or below 0
    (no kernel launches for nothing: the times grow faster than bytes / rate), a learning size
    missed by more than POOR_FIT_REL."""
    flags = []
    if not model.t0_us > 0:
        flags.append(f"poor fit: the fixed cost came out {model.t0_us:.3g} us, not above 0 (the times grow "
                     "faster than a fixed cost plus bytes over a rate)")
    worst, where = 0.0, None
    for b, m in _size_medians(nbytes, samples_us):
        miss = abs(m / model.predict_us(b) - 1)
        if miss > worst:
            worst, where = miss, b
    if worst > POOR_FIT_REL:
        flags.append(f"poor fit: the model misses a learning size ({where:.4g} B) by {worst:.0%} "
                     f"(more than {POOR_FIT_REL:.0%})")
    if P.Z95 * model.size_scatter_rel > ROUGH_REL:
        flags.append(f"rough in size: from one learning size to the next its time strays from the model by "
                     f"{model.size_scatter_rel:.1%} (SD), so a prediction at another size is within "
                     f"{ROUGH_REL:.0%} only where it happens to be; its pi95 carries the scatter")
    return flags


def learn(kernel: str, make=None, *, sizes=None, bytes_of=None, measure=None, profile=None, timer=None,
          save_to=None) -> LearnedModel:
    """Measure ``kernel`` at a few sizes and fit its model.

    ``make(size) -> thunk``: what runs the kernel at a size (a user's callable, a library op);
    timed by ``timer(thunk) -> Measurement`` (default: device time, the host held ahead). Or ``measure(size) ->
    Measurement`` directly (the simulated device, a timing of one's own). ``sizes`` are in the
    callable's units, ``bytes_of(size)`` their bytes moved, each measured as given (default: sizes
    are bytes, :func:`default_sizes`, each measured at its :func:`learning_points`). ``save_to``: a
    profile path to store the model in."""
    from .registry import profile_of

    profile = profile_of(profile)
    bytes_of = bytes_of or (lambda s: float(s))
    sizes = list(sizes) if sizes is not None else [int(b) for b in learning_points(default_sizes(profile))]
    if measure is None:
        if make is None:
            raise HeuristicError("learn needs make(size) -> thunk, or measure(size) -> Measurement")
        if timer is None:
            from ..ops.timer import cuda_timer

            # device time (the host held behind a GPU spin): what the profile's rates describe
            timer = lambda thunk: cuda_timer(thunk, hold=True)  # noqa: E731
        measure = lambda s: timer(make(s))  # noqa: E731
    samples = []
    for s in sizes:
        m = measure(s)
        samples.append(m.samples_us[m.inliers] if hasattr(m, "inliers") else m)
    model = fit(kernel, [bytes_of(s) for s in sizes], samples, profile)
    if save_to is not None:
        try:
            model.save(save_to, profile)
        except HeuristicError as exc:  # a fit the profile cannot hold: the measurements stay with the caller
            exc.model = model
            raise
    return model


def learn_from_autotune(kernel: str, family: str, bytes_of, *, device: dict, url: str | None = None,
                        profile=None) -> LearnedModel:
    """The same fit from the tuning database: each stored problem of ``family`` on ``device`` is one
    size (``bytes_of(descriptor dict)``), timed by its fastest candidate's samples."""
    from .. import fingerprint as fp
    from ..autotune.entries import device_key
    from ..autotune.storage import AutotuneDB
    from .registry import profile_of

    profile = profile_of(profile)
    try:
        key = device_key(device)
    except (TypeError, ValueError) as exc:
        raise HeuristicError(f"learning {kernel} from the tuning database: device: {exc}") from None
    theirs = getattr(profile, "device", None)
    other = fp.hard_differences(theirs, device) if isinstance(theirs, dict) and theirs else []
    if other:  # a model of one GPU's times fitted against another's L2 sizes and fill
        raise HeuristicError(f"learning {kernel}: the tuning results are of another device than the profile "
                             f"({'; '.join(other)}); give the profile of the device they were timed on")
    entries, _bad = AutotuneDB(url).read_all(family, key)
    nbytes, samples = [], []
    for e in entries:
        ok = [t for t in e.timings.values() if t.usable]
        if not ok:
            continue
        best = min(ok, key=lambda t: t.time_us)
        import json

        nbytes.append(float(bytes_of(json.loads(e.descriptor))))
        samples.append(list(best.samples_us) if best.samples_us else [best.time_us])
    if len(nbytes) < 2:
        hint = ""
        if not entries and not family.startswith("heuristics.") and family in ("pointwise", "normalization",
                                                                               "matmul_splitk"):
            hint = f" (the evaluation stores its problems as family 'heuristics.{family}')"
        raise HeuristicError(f"the tuning database has {len(nbytes)} usable {family} entries for this device; "
                             f"learning needs two sizes or more{hint}")
    return fit(kernel, nbytes, samples, profile)
