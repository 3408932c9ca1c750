"""How far each family's model is from the times measured on a GPU, and the prediction interval
that follows (``Prediction.pi95`` of :func:`calib.predict.predict`).

The predictor's ``ci95`` is propagated from the profile's parameter CIs. It says how well the
profile pins the model, not how well the model follows the kernels: on the H200's recordings it
contained the measured time in 0-49% of problems. What the model misses (a tile's tail, a
compiler's choice of registers, cuBLAS's own kernel) is not in any parameter. It is measured
here instead, on the recorded evaluations that keep every candidate's time (``times_us``): for
each candidate the log of measured over predicted time, pooled over recordings, in bins of the
predicted time (a launch-bound kernel's error is narrower than a DRAM-bound one's). The 2.5th and
97.5th percentiles of each bin are the band; ``pi95`` is the prediction times the band, widened by
``ci95`` in quadrature.

A band is the model's error on one GPU model under one software stack, with the profile the
recordings replay with; it applies where the profile is of that GPU model and software (as the
recorded corrections do, :func:`calib.heuristics.predictor.measured_on`), and not across GPU models
of an architecture: on an H100 the pointwise model's median error is 9.5-12% against the H200's
2-3%. The file holds a band per GPU model with recordings (the H200's and the H100's); elsewhere
``pi95`` is None. A band is the error of the model as the recordings replay with the profile it
names, corrections included where they applied (the H100's: the H200's, borrowed across compute
capability 9.0); an H100 profile without its compute capability gets the plain model and still this
band. It is fitted on the recordings that no correction file was fitted on
(``bench/fit_model_error.py --profile P`` picks those of P's GPU model). On the H200 some did inform
the hand-set constants of the models (pointwise's on the ten recordings A-J, normalization's pace
and stagger on a few more; README), so the band is not wholly out of sample: on pointwise, A-J's
errors and coverage are those of the other 41 recordings within 0.1% (2026-12-07), and each
recording left out of the band's own fit is covered at 93-95% (split-K's worst recording 83%).

File: ``model_error.json`` beside this module, format ``calib.heuristics.model_error``, version 2 (a
band per GPU model; version 1, one GPU's, is read forward), checked field by field on load (a bad
file is a ModelErrorError naming the field).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import CalibError

FORMAT, VERSION = "calib.heuristics.model_error", 2  # 2: a band per GPU model ("devices"); 1 had one
FILE = Path(__file__).with_name("model_error.json")
COVERAGE = 0.95
# a bin of predicted time holds at least this many candidates' errors (its 2.5th percentile is then
# the 50th-smallest or further in): half-decade bins with fewer are merged into their neighbour
MIN_BIN = 2000
BIN_WIDTH_LOG10 = 0.5
MAX_LOG_ERROR = 3.0  # e^3: a band past 20x is no model's error but a broken recording or fit


class ModelErrorError(CalibError, ValueError):
    pass


@dataclass(frozen=True)
class Bin:
    """The band of log(measured / predicted) for predictions below ``upto_us`` (and at or above the
    previous bin's): ``log_lo`` and ``log_hi`` are its 2.5th and 97.5th percentiles over ``n``
    candidates."""

    upto_us: float
    log_lo: float
    log_hi: float
    n: int


@dataclass(frozen=True)
class ModelError:
    """One GPU model's band: per kind, the bins of predicted time, and what each was fitted on."""

    device: str
    software: dict  # the kernel software (CUDA runtime, CuPy) the recordings ran under
    bins: dict  # kind -> tuple of Bin, ascending upto_us, the last one's inf
    fitted_on: dict  # kind -> list of {"recording", "sha256", "candidates", "log_lo", "log_hi"}
    profile: str = ""  # the profile the recordings were replayed with, from the repository's root

    def bin_for(self, kind: str, time_us: float) -> Bin | None:
        for b in self.bins.get(kind, ()):
            if time_us < b.upto_us:
                return b
        return None

    def applies_to(self, q) -> bool:
        """Whether the band holds for the profile behind ``q``: one of its GPU model, under its
        software (a warning where the software differs, as for the corrections)."""
        from .predictor import measured_on

        return measured_on(q, self.device, self.software, what="the model-error band (no pi95)")

    def pi95(self, kind: str, q, time_us: float, ci95) -> tuple | None:
        """Where the time of a launch predicted at ``time_us`` (with ``ci95``) is expected, or None
        where no band of ``kind`` holds for ``q``'s profile."""
        if not (isinstance(time_us, (int, float)) and math.isfinite(time_us) and time_us > 0):
            return None
        b = self.bin_for(kind, time_us)
        if b is None or not self.applies_to(q):
            return None
        return widen(time_us, ci95, b.log_lo, b.log_hi)


def widen(time_us: float, ci95, log_lo: float, log_hi: float) -> tuple | None:
    """``time_us`` times the band [e^log_lo, e^log_hi], each side widened by ``ci95``'s relative
    half-width on that side in quadrature (the parameters' uncertainty and the model's error are
    independent sources; the band was measured with one profile's values). A CI that reaches 0 or
    infinity takes the interval there; a CI of NaN gives None."""
    lo_ci = hi_ci = 0.0
    if ci95:
        lo, hi = (float(x) for x in ci95)
        if math.isnan(lo) or math.isnan(hi):  # no interval at all: none from the band either
            return None
        lo_ci = math.log(time_us / lo) if lo > 0 else math.inf  # a CI down to 0: so is the interval
        hi_ci = math.log(hi / time_us) if math.isfinite(hi) and hi > 0 else (math.inf if hi > 0 else 0.0)
    down = math.hypot(min(log_lo, 0.0), max(lo_ci, 0.0))
    up = math.hypot(max(log_hi, 0.0), max(hi_ci, 0.0))
    return (time_us * math.exp(-down), time_us * math.exp(up))


# ----------------------------------------------------------------------------------------------
# fitting


def quantile(sorted_xs: list, p: float) -> float:
    """The ``p`` quantile of ascending ``sorted_xs``, linearly interpolated (numpy's default)."""
    if not sorted_xs:
        raise ValueError("no values")
    i = p * (len(sorted_xs) - 1)
    lo = int(math.floor(i))
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (i - lo)


def _edge_us(k: int) -> float:
    return 10 ** (k * BIN_WIDTH_LOG10)


def _half_decade(t_us: float) -> int:
    """The half-decade ``k`` with edge(k) <= t < edge(k + 1), by the same edges :meth:`ModelError.bin_for`
    compares with (log10 alone puts a time one float below an edge on either side)."""
    k = math.floor(math.log10(t_us) / BIN_WIDTH_LOG10)
    if t_us < _edge_us(k):
        return k - 1
    return k + 1 if t_us >= _edge_us(k + 1) else k


def fit_bins(pairs, min_bin: int = MIN_BIN, coverage: float = COVERAGE) -> tuple:
    """Bins of (predicted us, log error) ``pairs``: half-decades of predicted time, the smallest
    merged into its smaller neighbour until each holds ``min_bin``; each bin's band is the central
    ``coverage`` of its errors. Fewer than ``min_bin`` pairs in all: one bin, if there are any."""
    if not pairs:
        return ()
    groups: dict = {}
    for t, e in pairs:
        groups.setdefault(_half_decade(t), []).append(e)
    cells = [[k, groups[k]] for k in sorted(groups)]  # [lowest half-decade index, errors]
    while len(cells) > 1:
        i = min(range(len(cells)), key=lambda j: len(cells[j][1]))
        if len(cells[i][1]) >= min_bin:
            break
        j = i - 1 if i == len(cells) - 1 or (i > 0 and len(cells[i - 1][1]) <= len(cells[i + 1][1])) else i + 1
        a, b = sorted((i, j))
        cells[a] = [cells[a][0], cells[a][1] + cells[b][1]]
        del cells[b]
    tail = (1 - coverage) / 2
    out = []
    for n, (_, errs) in enumerate(cells):
        errs.sort()
        upto = _edge_us(cells[n + 1][0]) if n + 1 < len(cells) else math.inf
        out.append(Bin(upto, quantile(errs, tail), quantile(errs, 1 - tail), len(errs)))
    return tuple(out)


def recording_errors(kind: str, path, profile=None) -> list[tuple[float, float]]:
    """(predicted us, log(measured / predicted us)) for every recorded candidate of the recorded
    evaluation at ``path`` that is a candidate of today's space, predicted as the replay predicts
    (the recording's cuBLASLt answers, the recorded device's profile by the lookup order unless
    ``profile`` is given). A candidate the model cannot price (inf, NaN, 0) is left out."""
    from contextlib import nullcontext

    from . import replay
    from .families import family
    from .predictor import q_of

    rec = replay.load(path, kind)
    if profile is None:
        from ..profile import load_profile

        profile = load_profile(device=rec["device"], software=rec["software"])
    fam = family(kind)
    oracle = nullcontext()
    if "cublaslt" in rec:
        from . import cublaslt

        oracle = cublaslt.use_oracle(cublaslt.oracle_from_asked(rec["cublaslt"], f"recorded evaluation {path}"))
    q = q_of(profile)
    out = []
    with oracle:
        for r in rec["rows"]:
            d = fam.descriptor(r["descriptor"])
            space = {c.autotune_name: c for c in fam.space(d)}
            for cid, t in sorted(r["times_us"].items()):
                if cid not in space:
                    continue
                p = float(fam.model_us(d, space[cid], q))
                if math.isfinite(p) and p > 0:
                    out.append((p, math.log(t / p)))
    return out


def recording_summary(pairs) -> dict:
    """What the file keeps of one recording's errors: how many, and their central ``COVERAGE``. A
    test recomputes it for a recording with today's model: a model changed since the band was
    fitted no longer gives the same numbers, and the band is to be refitted."""
    errs = sorted(e for _, e in pairs)
    tail = (1 - COVERAGE) / 2
    return {"candidates": len(errs), "log_lo": quantile(errs, tail) if errs else None,
            "log_hi": quantile(errs, 1 - tail) if errs else None}


def leave_one_out_coverage(per_recording: list, min_bin: int = MIN_BIN) -> list[float]:
    """For each recording's (predicted us, log error) pairs, the share inside the band fitted on all
    the other recordings: how often the interval holds on a recording it was not fitted on."""
    out = []
    for i, mine in enumerate(per_recording):
        if not mine:
            continue
        bins = fit_bins([pr for j, prs in enumerate(per_recording) if j != i for pr in prs], min_bin)
        me = ModelError("", {}, {"k": bins}, {})
        inside = 0
        for t, e in mine:
            b = me.bin_for("k", t)
            inside += b is not None and b.log_lo <= e <= b.log_hi
        out.append(inside / len(mine))
    return out


def training_recordings() -> set[str]:
    """The recordings (paths from the repository's root) that a shipped correction was fitted on:
    normalization's corrections and residual forest, split-K's forests. The band is fitted on the others."""
    import gzip

    from . import normalization, splitk

    out = set()
    paths = [normalization.CORRECTIONS_FILE, normalization.RESIDUAL_FILE, splitk.FP16_SPLIT1_FILE,
             splitk.FP32_RECORDED_FILE, splitk.FP32_SPLITS_FILE]
    for path in paths:
        if not Path(path).exists():
            continue
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt") as f:
            doc = json.load(f)
        for r in doc.get("fitted_on", []) + doc.get("recordings", []):
            out.add(r["recording"] if isinstance(r, dict) else r[0])
    return out


# ----------------------------------------------------------------------------------------------
# the file


def to_doc(bands) -> dict:
    """The file's document of ``bands`` (ModelError, one per GPU model)."""
    return {"format": FORMAT, "version": VERSION, "coverage": COVERAGE, "devices": [_device_doc(me) for me in bands]}


def _device_doc(me: ModelError) -> dict:
    return {"device": me.device, "software": dict(me.software), "profile": me.profile,
            "kinds": {k: {"bins": [{"upto_us": None if math.isinf(b.upto_us) else b.upto_us, "log_lo": b.log_lo,
                                    "log_hi": b.log_hi, "n": b.n} for b in bins],
                          "fitted_on": me.fitted_on.get(k, [])}
                      for k, bins in sorted(me.bins.items())}}


def _field(obj, name, kinds, where):
    v = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(v, kinds) or isinstance(v, bool):
        raise ModelErrorError(f"{where}: {name!r} must be {_kinds(kinds)}, not {_show(v)}")
    return v


def _kinds(kinds) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join({"int": "an integer", "float": "a number", "str": "a string", "dict": "an object",
                        "list": "a list"}.get(k.__name__, k.__name__) for k in kinds)


def _show(v) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _number(obj, name, where) -> float:
    v = _field(obj, name, (int, float), where)
    try:
        v = float(v)
    except OverflowError:  # an int of 400 digits
        v = math.inf
    if not math.isfinite(v):
        raise ModelErrorError(f"{where}: {name!r} must be a finite number, not {_show(obj.get(name))}")
    return v


def _bins(doc, kind, where) -> tuple:
    raw = _field(doc, "bins", list, where)
    if not raw:
        raise ModelErrorError(f"{where}: 'bins' is empty")
    out, last = [], 0.0
    for i, b in enumerate(raw):
        w = f"{where}, bins[{i}]"
        if i == len(raw) - 1:
            if not isinstance(b, dict) or b.get("upto_us", 0) is not None:
                raise ModelErrorError(f"{w}: the last bin's 'upto_us' must be null (no upper end)")
            upto = math.inf
        else:
            upto = _number(b, "upto_us", w)
            if upto <= last:
                raise ModelErrorError(f"{w}: 'upto_us' {upto} does not rise above the bin before ({last})")
        lo, hi = _number(b, "log_lo", w), _number(b, "log_hi", w)
        if not -MAX_LOG_ERROR <= lo <= hi <= MAX_LOG_ERROR:
            raise ModelErrorError(f"{w}: the band [{lo}, {hi}] is not ordered within +-{MAX_LOG_ERROR} "
                                  "(a log of measured over predicted time)")
        n = _field(b, "n", int, w)
        if n < 1:
            raise ModelErrorError(f"{w}: fitted on {n} candidates")
        out.append(Bin(upto, lo, hi, n))
        last = upto
    return tuple(out)


def load(path=FILE) -> tuple:
    """The bands in the file at ``path`` (a ModelError per GPU model), checked field by field;
    ModelErrorError naming what is wrong. A file of version 1 (one GPU's band) is read forward."""
    from ..strict_json import DuplicateKeyError, unique_keys
    from .registry import read_text

    p = Path(path)
    text = read_text(p, "model-error band", ModelErrorError)
    where = f"model-error band {p}"
    try:
        doc = json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKeyError as exc:
        raise ModelErrorError(f"{where}: {exc}: which one holds is unknown") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, an int of > 4300 digits, nesting
        raise ModelErrorError(f"{where} is not JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ModelErrorError(f"{where} is not of format {FORMAT!r}")
    version = _field(doc, "version", int, where)
    if not 1 <= version <= VERSION:
        raise ModelErrorError(f"{where} has version {version}; this calib reads 1 to {VERSION}")
    coverage = _number(doc, "coverage", where)
    if coverage != COVERAGE:
        raise ModelErrorError(f"{where}: 'coverage' {coverage} is not {COVERAGE}: its band is no 95% interval (pi95)")
    entries = [doc] if version == 1 else _field(doc, "devices", list, where)
    bands = [_device(e, where if version == 1 else f"{where}, devices[{i}]") for i, e in enumerate(entries)]
    names = [me.device for me in bands]
    twice = [n for n in names if names.count(n) > 1]
    if twice:
        raise ModelErrorError(f"{where}: {twice[0]!r} has two bands: which one holds is unknown")
    return tuple(bands)


def _device(doc, where) -> ModelError:
    from .registry import KINDS

    if not isinstance(doc, dict):
        raise ModelErrorError(f"{where} must be an object (one GPU model's band), not {_show(doc)}")
    device = _field(doc, "device", str, where)
    if not device.strip():
        raise ModelErrorError(f"{where}: 'device' is empty: which GPU's error this is is unknown")
    software = _field(doc, "software", dict, where)
    for name, v in software.items():
        if not isinstance(v, str):
            raise ModelErrorError(f"{where}, software: {name!r} must be a version string, not {_show(v)}")
    profile = doc.get("profile", "")
    if not isinstance(profile, str):
        raise ModelErrorError(f"{where}: 'profile' must be a string (the profile replayed with), not {_show(profile)}")
    kinds = _field(doc, "kinds", dict, where)
    bins, fitted_on = {}, {}
    for kind, entry in kinds.items():
        if kind not in KINDS:
            raise ModelErrorError(f"{where}: {kind!r} is not a scheduler kind ({', '.join(KINDS)})")
        w = f"{where}, kinds.{kind}"
        bins[kind] = _bins(entry, kind, w)
        fitted_on[kind] = _field(entry, "fitted_on", list, w)
        for i, r in enumerate(fitted_on[kind]):
            wr = f"{w}, fitted_on[{i}]"
            if not isinstance(r, dict):
                raise ModelErrorError(f"{wr} must be an object (a recording), not {_show(r)}")
            for name in ("recording", "sha256"):
                _field(r, name, str, wr)
            if _field(r, "candidates", int, wr) < 0:
                raise ModelErrorError(f"{wr}: 'candidates' {r['candidates']} is negative")
            if r["candidates"]:
                _number(r, "log_lo", wr), _number(r, "log_hi", wr)
    return ModelError(device, dict(software), bins, fitted_on, profile)


@functools.lru_cache(maxsize=None)
def _shipped(path: str) -> tuple:
    return load(path) if Path(path).exists() else ()


def shipped() -> tuple:
    """The bands shipped with calib, one per GPU model (empty where the file is absent)."""
    return _shipped(str(FILE))


def for_profile(q, bands=None) -> ModelError | None:
    """The band of the GPU model of the profile behind ``q`` (shipped ones unless ``bands``), or None."""
    name = getattr(q, "device_name", None)
    return next((me for me in (shipped() if bands is None else bands) if me.device == name), None)


def pi95(kind: str, q, time_us: float, ci95) -> tuple | None:
    """The shipped band's interval for ``kind``'s prediction on ``q``'s GPU, or None where none holds."""
    me = for_profile(q)
    return me.pi95(kind, q, time_us, ci95) if me is not None else None
