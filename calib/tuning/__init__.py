"""Tuning: the fastest correct knobs per problem, ranked by one estimator, remembered by content key.

See :mod:`calib.tuning.tuner`. The protocol contract every runner follows, so that the results
store can file and rank what it is given:

- ``Measurement.protocol["perf_config"]`` holds the knobs alone (threads, blocks per SM, unroll,
  layout ...): one launch shape, one text;
- bookkeeping has protocol keys of its own: ``role`` ("measurement", "tuning", "set_aside"),
  ``attempt`` (int), ``cooldown_s`` (float), ``set_aside_because`` (str), and ``tuned_on`` (the
  descriptor of the problem the knobs were tuned on).
"""

from .tuner import (ESTIMATOR, Candidate, MemoryCache, NoCandidateSurvived, Tuner, TuningCache, TuningResult,
                    estimate_us)

__all__ = ["ESTIMATOR", "Candidate", "MemoryCache", "NoCandidateSurvived", "Tuner", "TuningCache", "TuningResult",
           "estimate_us"]
