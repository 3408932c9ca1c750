"""``calib.predict``: a kernel's expected time from the machine profile, with a 95% interval.

::

    from calib import predict
    p = predict.predict("pointwise", {"op": "add", "n": 1 << 26, "dtype": "float32"},
                        {"vec": 4, "ept": 2, "block": 256, "grid": "cover"})
    p.time_us, p.ci95, p.contributions_us

The model of each kind is its family's (:mod:`calib.heuristics.pointwise` ...); the interval is the
delta method over the CIs of the parameters the model read (:mod:`calib.heuristics.predictor`).
A kernel of one's own is predicted by the learned predictor, :mod:`calib.heuristics.learned`
(``learn`` from a few measured sizes, then ``LearnedModel.predict``), whose predictions also carry
``pi95``: where the time at that size is expected, the kernel's scatter between sizes included.
A family model's ``pi95`` is its prediction times the model's error measured on recorded
evaluations of the profile's GPU (:mod:`calib.heuristics.model_error`), widened by ``ci95``; None
where no recordings of that GPU model and software were fitted (``ci95`` is then all there is).
"""

from __future__ import annotations

from .heuristics.predictor import Prediction, predict_model

__all__ = ["Prediction", "predict", "predict_model"]  # and, on first use, learn and LearnedModel


def predict(kind: str, descriptor, params: dict, profile=None) -> Prediction:
    """Expected time of ``kind``'s kernel for ``descriptor`` launched with ``params``, from ``profile``
    (a Profile, a profile file's path, or None: this machine's).

    HeuristicError names what is wrong with a kind, a descriptor or a launch no kernel of the
    family could run (a knob missing, a vector wider than 16 bytes, a block over 1024 threads)."""
    from dataclasses import replace

    from .heuristics import model_error
    from .heuristics.families import family, launch
    from .heuristics.predictor import q_of
    from .heuristics.registry import profile_of

    fam = family(kind)
    d = fam.descriptor(descriptor)
    profile = profile_of(profile)
    p = predict_model(fam.model_us, d, launch(kind, params, d), profile)
    return replace(p, pi95=model_error.pi95(kind, q_of(profile), p.time_us, p.ci95))


def __getattr__(name):
    if name in ("learn", "LearnedModel"):
        from .heuristics import learned

        return getattr(learned, name)
    raise AttributeError(f"module 'calib.predict' has no attribute {name!r}")
