"""The normalization heuristic: the candidates ranked by the corrected model, the fastest taken; without
the residual forest the strategy biases applied (:func:`choose_ranked`)."""

from __future__ import annotations

import math

from .. import predictor as P
from ..knobs import Knobs
from .biases import in_pair_group, persistent_bias
from .candidates import NormDescriptor, descriptor, space
from .corrected import corrections_for, model_us, residual_in_force


def choose_ranked(d: NormDescriptor, ranked, q) -> Knobs:
    """The fastest predicted candidate. Without the residual forest in force (residual.py), except
    where :func:`persistent_bias` is not 0: there the fastest predicted persistent and multi-pass
    candidates are compared with the persistent one's time raised by the bias, and within the
    strategy that wins the model's order stands. Elsewhere every candidate :func:`in_pair_group` has
    its time raised by the pair bias before the fastest is taken."""
    if residual_in_force(q) is not None:  # the forest learned what the biases stood in for (residual.py)
        return ranked[0][1]
    bias = persistent_bias(d, q)
    if bias == 0.0:
        c = corrections_for(q)
        pair = c.pair_bias if c is not None else 0.0
        if pair == 0.0:
            return ranked[0][1]
        finite = [(t, k) for t, k in ranked if math.isfinite(t)] or ranked
        return min(finite, key=lambda s: math.log(s[0]) + (pair if in_pair_group(d, s[1], q) else 0.0))[1]
    pers = next(((t, k) for t, k in ranked if k["strategy"] == "persistent" and math.isfinite(t)), None)
    multi = next(((t, k) for t, k in ranked if k["strategy"] == "multipass"), None)
    if pers is None or multi is None:
        return ranked[0][1]
    return pers[1] if math.log(pers[0]) + bias < math.log(multi[0]) else multi[1]


def heuristic(d, profile) -> Knobs:
    d = descriptor(d)
    return choose_ranked(d, P.rank(model_us, d, space(d), profile), P.q_of(profile))
