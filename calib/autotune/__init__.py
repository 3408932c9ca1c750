"""A persistent autotune cache keyed by what the problem is.

::

    from calib import autotune

    tuner = autotune.Autotuner(*backend.fingerprint())
    sel = tuner.select("conv2d", descriptor, ["im2col_gemm", "direct", "fft"], time=..., check=...)
    sel.choice, sel.source, tuner.counters.benchmarks

- :func:`descriptor_key`: a problem descriptor (dataclass or mapping) canonicalized and hashed
  (:mod:`calib.autotune.descriptors`);
- :class:`Autotuner` / :func:`select`: lookup (memo, database, shipped entries), then tuning with
  every candidate checked and timed, ties broken by a stable preference order
  (:mod:`calib.autotune.decide`), policies for stale entries (:mod:`calib.autotune.core`);
- storage in the tuning database (:mod:`calib.autotune.storage`), JSON lines export and import
  (:mod:`calib.autotune.jsonl`), and ``calib cache ...`` (:mod:`calib.autotune.cli`).

Light to import: no NumPy, no SQLAlchemy until a write needs them.
"""

from .core import (POLICIES, AutotuneError, Autotuner, AutotuneWarning, Counters, EarlyStop, NoCandidateSurvived,
                   Selection, autotuner_for, select, tuned)
from .decide import TIE_REL, Decision, Timing, decide
from .descriptors import DescriptorError, candidate_id, canonical_descriptor, descriptor_json, descriptor_key
from .entries import Entry, device_key, stale_fields

__all__ = ["POLICIES", "TIE_REL", "AutotuneError", "AutotuneWarning", "Autotuner", "Counters", "Decision",
           "DescriptorError", "EarlyStop", "Entry", "NoCandidateSurvived", "Selection", "Timing", "autotuner_for",
           "candidate_id", "canonical_descriptor", "decide", "descriptor_json", "descriptor_key", "device_key",
           "select", "stale_fields", "tuned"]
