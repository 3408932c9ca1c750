"""A toy family on the simulated device, shared by the autotune tests and their subprocesses."""

from __future__ import annotations

import dataclasses
import zlib

from calib.autotune import Autotuner
from calib.autotune.sim import SimFamily
from calib.backends.sim import SimBackend

CANDIDATES = ["alpha", "beta", "gamma"]


@dataclasses.dataclass(frozen=True)
class Problem:
    m: int
    n: int
    dtype: str = "float32"


def model(descriptor, candidate):
    """True times: alpha is good on small m, gamma on big m, beta in between; 'delta' is a late
    addition that wins on odd n; 'slowpoke' never wins."""
    d = descriptor if isinstance(descriptor, dict) else dataclasses.asdict(descriptor)
    m, n = d["m"], d["n"]
    base = {"alpha": 10 + m * 0.5, "beta": 12 + m * 0.3, "gamma": 30 + m * 0.1, "slowpoke": 1000.0,
            "delta": (5.0 if n % 2 else 500.0), "twin": None}
    if candidate == "twin":  # exactly as fast as alpha: a tie by construction
        return base["alpha"]
    return base[candidate] * (1 + 0.001 * (zlib.crc32(str(n).encode()) % 7))


def workload(count=40):
    return [Problem(m=8 * (i + 1), n=i) for i in range(count)]


def tuner(url, *, seed=0, software=None, **kw) -> tuple[Autotuner, SimFamily]:
    sim = SimBackend(seed=seed)
    device, soft = sim.fingerprint()
    soft = {"driver": "sim-driver-1", **soft, **(software or {})}
    broken = kw.pop("broken", ())
    return Autotuner(device, soft, url=url, persist=True, shipped_dir=kw.pop("shipped_dir", "/nonexistent"),
                     protocol={"timer": "simulated"}, **kw), SimFamily(sim, model, broken=broken)


def run(url, problems, candidates=CANDIDATES, *, seed=0, **kw):
    t, fam = tuner(url, seed=seed, **kw)
    choices = []
    for p in problems:
        time, check = fam.bind(p)
        choices.append(t.select("toy", p, candidates, time=time, check=check).candidate)
    return t, fam, choices
