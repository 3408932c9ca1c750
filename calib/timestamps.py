"""The one spelling of "now" in calib's files: UTC, whole seconds, ISO 8601 with a Z."""

from __future__ import annotations


def utc_now() -> str:
    import datetime as _dt  # only writers need the time; `import calib` should not pay for datetime

    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
