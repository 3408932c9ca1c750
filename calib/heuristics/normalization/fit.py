"""The fit of the normalization model's corrections on recorded evaluations: the samples
(:func:`recorded_samples`), the class factors, the two strategy biases, and the document of
CORRECTIONS_FILE (:func:`corrections_document`)."""

from __future__ import annotations

import dataclasses
import math
import statistics

from .. import predictor as P
from .biases import BIAS_QUANTILE, MIN_GROUP_PROBLEMS, few_rows, in_pair_group
from .candidates import KIND, descriptor, space
from .classes import MIN_CLASS_CANDIDATES, kernel_class, parent_class
from .corrected import CORRECTIONS_FORMAT, CORRECTIONS_VERSION, Corrections
from .model import plain_model_us


def recorded_samples(recordings):
    """(descriptor, [(knobs, measured us, plain predicted us)], q of the recording's profile) per
    problem of each (recording, profile) path pair: what the corrections are fitted on."""
    from ...profile import load_profile
    from ..replay import load

    out = []
    for rec, prof in recordings:
        q = P.q_of(load_profile(prof, device=None, software=None))
        for row in load(rec, KIND)["rows"]:
            if not isinstance(row.get("times_us"), dict) or not row["times_us"]:
                continue
            d = descriptor(row["descriptor"])
            cands = []
            for k in space(d):
                t, p = row["times_us"].get(k.autotune_name), plain_model_us(d, k, q)
                if t is not None and math.isfinite(p):
                    cands.append((k, float(t), p))
            out.append((d, cands, q))
    return out


def fit_corrections(samples) -> tuple[dict, float, dict]:
    """(class -> (median log error, candidates), the few-rows persistent bias pooled over dtypes, its
    group's errors sorted) from :func:`recorded_samples`."""
    factors = _class_factors(samples)
    ratio = _pooled(few_rows_errors(samples, Corrections({key: f for key, (f, _) in factors.items()}, 0.0)))
    return factors, _group_bias(ratio, 1), ratio


def _class_factors(samples) -> dict:
    """class -> (median log(measured / plain predicted), candidates) of every class with enough."""
    errs: dict = {}
    for d, cands, _ in samples:
        for k, t, p in cands:
            cls = kernel_class(d, k)
            for key in (cls, parent_class(cls)):
                if key is not None:
                    errs.setdefault(key, []).append(math.log(t / p))
    return {c: (statistics.median(v), len(v)) for c, v in errs.items() if len(v) >= MIN_CLASS_CANDIDATES}


def _pooled(by_dtype: dict) -> list:
    return sorted(e for errs in by_dtype.values() for e in errs)


def few_rows_errors(samples, c: Corrections) -> dict:
    """dtype -> the sorted errors of its problems of the few-rows group: per problem, e = log(measured /
    predicted) of the fastest persistent over the fastest multi-pass time, each strategy's fastest
    measured and fastest predicted (``c``'s factors applied) taken apart."""
    out: dict = {}
    for d, cands, q in samples:
        if not few_rows(d, q):
            continue
        best = {}
        for k, t, p in cands:
            m, pm = best.get(k["strategy"], (math.inf, math.inf))
            best[k["strategy"]] = (min(m, t), min(pm, p * math.exp(c.log_factor(d, k))))
        if len(best) == 2:
            (tp, pp), (tm, pm) = best["persistent"], best["multipass"]
            out.setdefault(d.dtype, []).append(math.log(tp / tm) - math.log(pp / pm))
    return {dt: sorted(v) for dt, v in out.items()}


def _group_bias(errs, min_problems: int = MIN_GROUP_PROBLEMS) -> float:
    """A group's bias: the BIAS_QUANTILE of its sorted errors where that is above 0 and it has
    ``min_problems``, else 0."""
    if not errs or len(errs) < min_problems:
        return 0.0
    return max(0.0, errs[int(BIAS_QUANTILE * len(errs))])


def fit_pair_bias(samples, c: Corrections) -> tuple[float, list]:
    """(the pair group's bias, its errors sorted): per recorded problem whose fastest-ranked persistent
    candidate (``c`` applied) is :func:`in_pair_group`, e = log(measured / predicted) of its time over
    the fastest-ranked multi-pass candidate's; the bias is their BIAS_QUANTILE where that is above 0
    and there are MIN_GROUP_PROBLEMS of them, else 0."""
    errs = []
    for d, cands, q in samples:
        scored = [(p * math.exp(c.log_factor(d, k)), t, k) for k, t, p in cands]
        pers = min((s for s in scored if s[2]["strategy"] == "persistent"), key=lambda s: s[0], default=None)
        multi = min((s for s in scored if s[2]["strategy"] == "multipass"), key=lambda s: s[0], default=None)
        if pers is not None and multi is not None and in_pair_group(d, pers[2], q):
            errs.append(math.log(pers[1] / multi[1]) - math.log(pers[0] / multi[0]))
    errs.sort()
    return _group_bias(errs), errs


def _fit_parts(samples, device: str):
    """(the class factors, the few-rows group's errors by dtype, the Corrections with both biases, the
    pair group's errors): one recipe for :func:`fit_all` (the left-out folds) and
    :func:`corrections_document` (the shipped file), so that the two cannot drift apart."""
    factors = _class_factors(samples)
    c = Corrections({key: f for key, (f, _) in factors.items()}, 0.0, device=device)
    few = few_rows_errors(samples, c)
    ratio = _pooled(few)
    by_dtype = {dt: _group_bias(errs) for dt, errs in few.items() if len(errs) >= MIN_GROUP_PROBLEMS}
    pair, pair_errs = fit_pair_bias(samples, c)
    c = dataclasses.replace(c, persistent_bias=_group_bias(ratio, 1), pair_bias=pair,
                            persistent_bias_by_dtype=by_dtype)
    return factors, few, c, pair_errs


def fit_all(samples, device: str = "NVIDIA H200") -> Corrections:
    """The corrections, the few-rows bias and the pair bias fitted on :func:`recorded_samples`."""
    return _fit_parts(samples, device)[2]


def corrections_document(recordings, note: str = "", device: str = "NVIDIA H200") -> dict:
    """The JSON of CORRECTIONS_FILE fitted on ``recordings`` ((recording, profile) path pairs) of
    ``device``'s evaluations."""
    factors, few, c, pair_errs = _fit_parts(recorded_samples(recordings), device)
    ratio = _pooled(few)
    bias, pair = c.persistent_bias, c.pair_bias
    return {"format": CORRECTIONS_FORMAT, "version": CORRECTIONS_VERSION, "note": note, "device": device,
            "software": P.recorded_software(recordings),
            "compute_capability": P.recorded_arch(p for _r, p in recordings),
            "fitted_on": [{"recording": str(r), "profile": str(p)} for r, p in recordings],
            "statistic": "median log(measured / plain_model_us) per kernel class (multi-pass: per loop band, "
                         f"and over every band as vectors_per_thread_log2 null), >= {MIN_CLASS_CANDIDATES} candidates",
            "persistent_bias": round(bias, 4), "persistent_bias_problems": len(ratio),
            "persistent_bias_by_dtype": {dt: round(b, 4) for dt, b in sorted(c.persistent_bias_by_dtype.items())},
            "persistent_bias_problems_by_dtype": {dt: len(v) for dt, v in sorted(few.items())},
            "pair_bias": round(pair, 4), "pair_bias_problems": len(pair_errs),
            "classes": [{"strategy": s, "dtype": dt, "vec": v, "buffer": b, "vectors_per_thread_log2": loop,
                         "log_factor": round(f, 4), "candidates": n}
                        for (s, dt, v, b, loop), (f, n) in sorted(factors.items(), key=_class_order)]}


def _class_order(item) -> tuple:
    (s, dt, v, b, loop), _ = item
    return (s, dt, v, b, -1 if loop is None else loop)
