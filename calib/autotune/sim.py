"""Families on the simulated device: a time per candidate from a model, with the device's noise.

The simulated GPU (:class:`calib.backends.sim.SimBackend`) supplies the noise (``rel_sd``,
outliers, its seed) and the stopping rule; a family supplies ``model(descriptor, candidate) ->
true time in us`` (conv2d: :func:`calib.ops.conv2d.simulated_time_us`). Every cache behaviour
(hits, misses, stale entries, verify, ties, concurrency) is tested through this without a GPU.
"""

from __future__ import annotations

from typing import Callable

from ..backends.base import UnsupportedConfig
from ..timing import Measurement, StoppingRule

TUNE_RULE = StoppingRule(min_samples=10, max_samples=50, batch=10, rel_precision=0.005, budget_s=0.05)


class SimFamily:
    """``time`` and ``check`` callables for :meth:`Autotuner.select` on the simulated device.

    ``broken``: candidates whose output is wrong (their check raises), to test that a wrong
    candidate never wins; ``model`` returning None means the candidate does not support the problem.
    ``speed``: a factor on every true time (a slower driver, for the verify policy)."""

    def __init__(self, backend, model: Callable, *, broken=(), rule: StoppingRule | None = None, speed: float = 1.0):
        self.backend, self.model, self.broken = backend, model, set(broken)
        self.rule = rule or TUNE_RULE
        self.speed = speed
        self.timed: list = []
        self.checked: list = []

    def bind(self, descriptor):
        return (lambda c: self.time(descriptor, c)), (lambda c: self.check(descriptor, c))

    def check(self, descriptor, candidate):
        self.checked.append(candidate)
        if self.model(descriptor, candidate) is None:
            raise UnsupportedConfig(f"{candidate} does not support this problem")
        if candidate in self.broken:
            raise AssertionError(f"{candidate}: max |out - reference| is 0.37, tolerance 1e-4")
        return True

    def time(self, descriptor, candidate) -> Measurement:
        import numpy as np

        true_us = self.model(descriptor, candidate)
        if true_us is None:
            raise UnsupportedConfig(f"{candidate} does not support this problem")
        self.timed.append(candidate)
        samples = self.backend.sample_matrix(np.array([float(true_us) * self.speed]), self.rule.max_samples)
        taken, reasons = self.rule.samples_needed(samples)
        return Measurement(samples[0, : taken[0]], stop_reason=str(reasons[0]),
                           protocol={"timer": "simulated", "rule": self.rule.to_dict()}, simulated=True)
