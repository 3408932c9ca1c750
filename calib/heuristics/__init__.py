"""Scheduling heuristics that read the machine profile, overridable from Python.

::

    from calib import heuristics as H

    params = H.choose("pointwise", {"op": "add", "n": 1 << 24, "dtype": "float16"})
    H.register("pointwise", lambda d, prof, builtin: {**builtin, "block": 256}, wrap=True)
    with H.using("normalization", my_rule):
        ...
    H.load_overrides("my_shapes.jsonl")     # descriptor key -> launch parameters

Kinds: ``pointwise``, ``normalization``, ``matmul_splitk``. Layers, the predictor and the
evaluation are described in :mod:`.registry`, :mod:`.predictor`, :mod:`.evaluate`; the families
(descriptor, search space, model, CuPy kernels) in :mod:`.pointwise`, :mod:`.normalization`,
:mod:`.splitk`; the static baselines in :mod:`.baselines`; the learned predictor in :mod:`.learned`.
Light to import: NumPy and CuPy are loaded when a family's kernels or the evaluation need them.
"""

from __future__ import annotations

from .registry import (KINDS, HeuristicError, HeuristicWarning, OverrideFileError, ReadRecorder, UserHeuristicError,
                       choose, clear, layers, load_overrides, override_for, read, register, set_overrides, using)

__all__ = ["KINDS", "HeuristicError", "HeuristicWarning", "OverrideFileError", "ReadRecorder", "UserHeuristicError",
           "choose", "clear", "layers", "load_overrides", "override_for", "read", "register", "set_overrides", "using",
           "builtin", "baseline", "descriptor", "space"]


def builtin(kind: str, descriptor, profile=None) -> dict:
    """The built-in heuristic's answer alone (no user layer, no override); ``profile`` as :func:`choose`'s."""
    from .families import family
    from .registry import mark_builtin, profile_of

    try:
        return family(kind).heuristic(descriptor, profile_of(profile))
    except Exception as exc:  # calib's own: a user layer that called this is not named for it
        mark_builtin(exc)
        raise


def baseline(kind: str, descriptor, profile=None) -> dict:
    """The static baseline's answer (the rule compilers hard-code); a path as :func:`choose` takes it."""
    from .baselines import BASELINES
    from .registry import _check_kind, profile_of

    _check_kind(kind)
    return BASELINES[kind](descriptor, None if profile is None else profile_of(profile))


def descriptor(kind: str, obj):
    """The family's descriptor from a mapping (a JSON line)."""
    from .families import family

    return family(kind).descriptor(obj)


def space(kind: str, descriptor_):
    """Every candidate of the family's search space for this problem, in preference order."""
    from .families import family

    fam = family(kind)
    return fam.space(fam.descriptor(descriptor_))
