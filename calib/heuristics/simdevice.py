"""The heuristics' families on the simulated device: true times from each family's model with the
hidden effects on, the planted truth of :class:`calib.backends.sim.SimBackend`, and its noise.

The profile the heuristics read there (:func:`sim_profile`) is what a calibration of that device
would give: every planted value off by a seeded error of ``rel_se`` (0.3%, the size of a quick
suite's CIs) with a 95% CI of ±1.96 ``rel_se`` around it, so that the heuristics never see the
truth itself."""

from __future__ import annotations

import numpy as np

from ..backends.base import UnsupportedConfig
from ..timing import Measurement
from .predictor import Z95, q_of_values

SAMPLES = 10


def truth_q(backend):
    device = {"sm_count": backend.spec["device"]["sm_count"]}
    return q_of_values(backend.truth, device)


def sim_profile(backend, *, rel_se: float = 0.003, seed: int = 0):
    from ..profile import Profile

    rng = np.random.default_rng(seed)
    params = {}
    for name, value in sorted(backend.truth.items()):
        if name.startswith("sim."):
            continue
        v = float(value) * (1.0 + rel_se * rng.standard_normal())
        half = Z95 * rel_se * v
        params[name] = {"value": v, "ci95": [v - half, v + half], "n": 8,
                        "method": f"simulated calibration: truth with a seeded {rel_se:.1%} error",
                        "source": "calib.heuristics.simdevice"}
    device, software = backend.fingerprint()
    return Profile(params, device=device, software=software, origin="simulated calibration")


class SimCase:
    """``check`` and ``time`` for one problem, from the family's true model plus the device's noise."""

    def __init__(self, fam, backend, d, *, broken=()):
        self.fam, self.backend, self.d = fam, backend, d
        self.q = truth_q(backend)
        self.broken = set(broken)

    def true_us(self, k) -> float:
        t = self.fam.model_us(self.d, k, self.q, hidden=True)
        if t is None or not np.isfinite(t):
            raise UnsupportedConfig(f"{k} cannot run {self.d}")
        return float(t)

    def check(self, k):
        self.true_us(k)
        if getattr(k, "autotune_name", None) in self.broken:
            raise AssertionError("max |y - ref| is 0.37, tolerance 1e-6")
        return True

    def measure(self, true_us: float) -> Measurement:
        samples = self.backend.sample_matrix(np.array([true_us]), SAMPLES)[0]
        return Measurement(samples, stop_reason="max_samples", protocol={"timer": "simulated", "samples": SAMPLES},
                           simulated=True)

    def time(self, k) -> Measurement:
        return self.measure(self.true_us(k))

    def library(self) -> Measurement:
        return self.measure(float(self.fam.sim_library_us(self.d, self.q)))

    def free(self):
        pass
