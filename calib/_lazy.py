"""A module imported on first use, so that light modules can name the scientific stack at the top.

The calibration modules are read by the parameter catalogue (``calib query`` suggests names from it)
and by the registry, which must not pay for numpy; their fits and models use numpy all the time.
``np = lazy("numpy")`` keeps their code plain while importing numpy only when a function first
touches it.
"""

from __future__ import annotations

import importlib


class _LazyModule:
    __slots__ = ("_name", "_module")

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_module", None)

    def __getattr__(self, attr):
        module = object.__getattribute__(self, "_module")
        if module is None:
            module = importlib.import_module(object.__getattribute__(self, "_name"))
            object.__setattr__(self, "_module", module)
        return getattr(module, attr)

    def __repr__(self):
        return f"<lazy module {object.__getattribute__(self, '_name')!r}>"


def lazy(name: str):
    return _LazyModule(name)
