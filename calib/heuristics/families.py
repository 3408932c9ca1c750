"""The kernel family of each scheduler kind: its descriptor, search space, model, heuristic and
CuPy kernels. Imported on first use, so that ``import calib.heuristics`` stays light."""

from __future__ import annotations

import importlib

from .registry import _check_kind

MODULES = {"pointwise": "pointwise", "normalization": "normalization", "matmul_splitk": "splitk"}


def family(kind: str):
    _check_kind(kind)
    return importlib.import_module(f"{__package__}.{MODULES[kind]}")


def launch(kind: str, params):
    """``params`` checked as ``kind``'s launch parameters (:func:`calib.heuristics.knobs.check_knobs`)."""
    from .knobs import check_knobs

    return check_knobs(kind, family(kind).KNOB_VALUES, params)
