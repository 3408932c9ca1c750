"""The kernel family of each scheduler kind: its descriptor, search space, model, heuristic and
CuPy kernels. Imported on first use, so that ``import calib.heuristics`` stays light."""

from __future__ import annotations

import importlib

from .registry import _check_kind

MODULES = {"pointwise": "pointwise", "normalization": "normalization", "matmul_splitk": "splitk"}


def family(kind: str):
    _check_kind(kind)
    return importlib.import_module(f"{__package__}.{MODULES[kind]}")


def launch(kind: str, params, descriptor=None):
    """``params`` checked as ``kind``'s launch parameters (:func:`calib.heuristics.knobs.check_knobs`);
    with ``descriptor``, also as a launch of that problem the family's kernels can run (its
    ``launch_problem``: a vector of at most 16 bytes, a split that divides K, a normalization vector that
    divides the row and a persistent buffer that holds it), HeuristicError if not."""
    from .knobs import check_knobs
    from .registry import HeuristicError

    fam = family(kind)
    k = check_knobs(kind, fam.KNOB_VALUES, params)
    why = fam.launch_problem(descriptor, k) if descriptor is not None else None
    if why:
        raise HeuristicError(f"{kind} launch {k.autotune_name} of {descriptor}: {why}")
    return k
