"""The tuning database (see core.py); a flat import surface for notebooks and workers."""

from .core import (ENV_DB_URL, Store, StoreError, canonical_json, default_url, descriptor_hash, sqlite_url)
from .tables import JOB_STATES, TERMINAL_STATES

__all__ = ["Store", "StoreError", "canonical_json", "descriptor_hash", "sqlite_url", "default_url", "ENV_DB_URL",
           "JOB_STATES", "TERMINAL_STATES"]
