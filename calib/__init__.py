"""calib: measured GPU machine parameters, with confidence intervals, for heuristics.

Heuristics need only this::

    import calib
    bw = calib.query("memory.dram.read_bandwidth_gbps", default=1300.0)

Importing calib loads no GPU library and no scientific stack: the profile is plain JSON.
"""

from __future__ import annotations

from ._version import __version__
from .profile import (CalibWarning, MissingParameterError, Parameter, ParameterWarning, Profile, ProfileError,
                      ProfileWarning, load_profile, merge_into, read_profile, write_profile)

__all__ = ["__version__", "query", "record", "default_profile", "reset", "load_profile", "read_profile",
           "write_profile", "merge_into", "Profile", "Parameter", "ProfileError", "MissingParameterError",
           "CalibWarning", "ProfileWarning", "ParameterWarning"]

_default: Profile | None = None


def default_profile() -> Profile:
    """This machine's profile by the lookup order, loaded once per process."""
    global _default
    if _default is None:
        _default = load_profile()
    return _default


def reset():
    """Forget the loaded profile (after ``calib run`` or a change of ``CALIB_PROFILE``)."""
    global _default
    _default = None


def query(name: str, default=None, *, strict: bool = False):
    """Value of a parameter of this machine's profile, or ``default`` with a warning."""
    return default_profile().query(name, default, strict=strict)


def record(name: str) -> Parameter:
    """The full record (value, CI, unit, n, method, flags, source) of a parameter."""
    return default_profile().record(name)
