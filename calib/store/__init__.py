"""The tuning database (see core.py); a flat import surface for notebooks and workers."""

# canonical_json and descriptor_hash live in calib.keys (no SQLAlchemy there); re-exported for old callers.
from ..keys import canonical_json, descriptor_hash
from .core import ENV_DB_URL, Store, StoreError, default_url, sqlite_url
from .tables import JOB_STATES, TERMINAL_STATES

__all__ = ["Store", "StoreError", "canonical_json", "descriptor_hash", "sqlite_url", "default_url", "ENV_DB_URL",
           "JOB_STATES", "TERMINAL_STATES"]
