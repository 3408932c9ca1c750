"""The kernel family of each scheduler kind: its descriptor, search space, model, heuristic and
CuPy kernels. Imported on first use, so that ``import calib.heuristics`` stays light."""

from __future__ import annotations

import importlib

from .registry import _check_kind

MODULES = {"pointwise": "pointwise", "normalization": "normalization", "matmul_splitk": "splitk"}


def family(kind: str):
    _check_kind(kind)
    return importlib.import_module(f"{__package__}.{MODULES[kind]}")
