"""The L2 sweep measured in three orders (ascending as the plan runs it, descending, shuffled): does the
residuals' structure follow the working set or the time of measurement?"""
import os
import sys
import warnings
import numpy as np
import pandas as pd
from calib import calibrations
from calib.calibrations import cache_hierarchy as l2
from calib.sweep import frame_from
warnings.simplefilter("ignore")
if sys.argv[1:] == ["sim"]:
    from calib.backends.sim import SimBackend
    b = SimBackend(seed=1)
else:
    from calib.backends.cupy_backend import CupyBackend
    b = CupyBackend(device=0)
out = os.environ.get("OUT", "/tmp")
configs = l2.plan("quick", l2_bytes=b.l2_bytes, memory_bytes=b.memory_bytes)
n = len(configs)
orders = {"ascending": list(range(n)), "descending": list(range(n))[::-1],
          "shuffled": list(np.random.default_rng(0).permutation(n))}
res = {}
for name in ("ascending", "descending", "shuffled", "ascending2"):
    idx = orders[name.rstrip("2")]
    cs = [configs[i] for i in idx]
    fr = frame_from(cs, b.measure(cs))
    fr.to_csv(f"{out}/l2_{name}.csv", index=False)
    r = calibrations.fit(l2.ID, fr)
    h = r.models["hinge"]
    ws = h.working_set
    z = pd.Series(h.resid[ws], index=h.w[ws])
    z = z.groupby(level=0).mean()
    res[name] = z
    zz = z.to_numpy() - z.mean()
    ac = [round(float(zz[k:] @ zz[:-k] / (zz @ zz)), 2) for k in range(1, 5)]
    e, c = r.records[l2.RAMP_END], r.records[l2.CAPACITY]
    pm = lambda q: (q["ci95"][1] - q["ci95"][0]) / 2 / q["value"]
    print(f"{name:11s} end {e['value']/1e6:6.1f} MB ±{pm(e):.1%} x{e['diagnostics']['end_ci_correlation_factor']:.2f}"
          f" cap {c['value']/1e6:5.1f} ±{pm(c):.1%} lag1-4 {ac} flags {len(e['flags'])}", flush=True)
for a, c in (("ascending", "ascending2"), ("ascending", "descending"), ("ascending", "shuffled")):
    j = res[a].index.intersection(res[c].index)
    print(f"r(residuals by W) {a} vs {c}: {np.corrcoef(res[a][j], res[c][j])[0, 1]:+.2f}")
