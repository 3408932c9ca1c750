"""The one exception base that calib raises on purpose.

Every error calib means to raise derives from :class:`CalibError`, so a caller
(or the command line) can tell "calib refused this, with a reason" from "calib
has a bug".  The concrete classes keep their older bases as well
(``ValueError``, ``RuntimeError`` ...) so code that caught those still works.
"""

from __future__ import annotations


class CalibError(Exception):
    """The base of every error calib raises on purpose.

    The CLI catches it, prints its message on one line to stderr and exits
    with status 2; anything else that escapes is a bug and keeps its
    traceback.
    """
