"""calib: measured GPU machine parameters, with confidence intervals, for heuristics.

Heuristics need only this::

    import calib
    bw = calib.query("memory.dram.read_bandwidth_gbps", default=1300.0)

Importing calib loads no GPU library and no scientific stack: the profile is plain JSON.
"""

from __future__ import annotations

import time as _time

from ._version import __version__
from .errors import CalibError
from .profile import (CalibWarning, MissingParameterError, Parameter, ParameterWarning, Profile, ProfileError,
                      ProfileWarning, load_profile, merge_into, read_profile, write_profile)

# When calib was first imported in this process: a notebook's setup phase starts here (calib.phases).
_IMPORTED_AT = _time.time()

__all__ = ["__version__", "query", "record", "default_profile", "reset", "load_profile", "read_profile",
           "write_profile", "merge_into", "Profile", "Parameter", "CalibError", "ProfileError",
           "MissingParameterError", "CalibWarning", "ProfileWarning", "ParameterWarning", "parameter_frame"]


# The public subpackages, imported on first use of ``calib.<name>``: ``import calib`` stays light,
# yet ``calib.autotune.descriptor_key(d)`` after a bare ``import calib`` works, as the README writes it.
_SUBMODULES = frozenset({"autotune", "heuristics", "ops", "predict"})


def __getattr__(name):
    # parameter_frame needs pandas, which `import calib` must not load: calib.display is imported
    # on first use of the name
    if name == "parameter_frame":
        from .display import parameter_frame

        return parameter_frame
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'calib' has no attribute {name!r}")

_default: Profile | None = None


class _NotLoaded:
    """Stands in for the default profile until the first query: every lookup misses, and the
    miss loads the profile. It spares ``query`` a test for "loaded yet?" on every call."""

    _values: dict = {}


_hot = _NotLoaded  # the object whose ``_values`` ``query`` reads: the default profile once loaded


def default_profile() -> Profile:
    """This machine's profile by the lookup order, loaded once per process."""
    global _default, _hot
    if _default is None:
        _default = load_profile()
    _hot = _default  # also when someone assigned ``_default`` directly
    return _default


def reset():
    """Forget the loaded profile (after ``calib run`` or a change of ``CALIB_PROFILE``)."""
    global _default, _hot
    _default = None
    _hot = _NotLoaded


def query(name: str, default=None, *, strict: bool = False):
    """Value of a parameter of this machine's profile, or ``default`` with a warning.

    Never raises, except with ``strict=True``, where every fallback is a ``ProfileError``. A hit
    is one dictionary lookup into the validated values of the default profile (heuristics call
    this in their hot path); everything else (the first call, which loads the profile, a missing
    or broken parameter, an unusable profile) goes through ``Profile._fallback``, which warns once
    per name at the caller's line.
    """
    try:
        return _hot._values[name]
    except Exception:  # a miss, or a name that cannot be hashed
        return default_profile()._fallback(name, default, strict)


def record(name: str) -> Parameter:
    """The full record (value, CI, unit, n, method, flags, source) of a parameter.

    Raises ``ProfileError`` (only) where ``query`` would return the default.
    """
    return default_profile().record(name)
