"""The L2 sweep measured in three orders (ascending as the plan runs it, descending, shuffled): does the
residuals' structure follow the working set or the time of measurement?

With ``--phases``: the quick plan's working sets shifted by 0, 1/4, 1/2 and 3/4 of the dense grid's step
(in log2 W; the bandwidth series as planned), then unshifted again. The structure is the H200's own and
fixed in W (hosts C-H correlate 0.82-0.93, 2026-12-02; see the cache_hierarchy docstring), so a fixed
grid sees one projection of it: the spread of the end over the phases is the error a grid of this
density makes on it, which no repetition on one grid shows (a full run's two interleaved half-grids:
1.5-5.2% apart).

With ``--dense``: the quick plan as it is (since 975baed the full grid's 256 working sets at the quick
suite's samples a point, WORKING_SET_SAMPLES), then the same 256 working sets with 3 and with 6 samples a
point, each sweep's wall time printed: what the sample count costs and the end's CI it gives (session 5
call 1 ran it on the quick plan of 128 x 6 before: 0.98 s, against 1.39 s for 256 x 3 and 1.75 s for
256 x 6; the simulated device times its points by its own rule: there the sample counts do not
apply). ``python bench/l2_order_probe.py [sim] [--phases | --dense]``; CSVs of the points go to $OUT."""
import math
import time
import os
import sys
import warnings
import numpy as np
import pandas as pd
from calib import calibrations
from calib.calibrations import cache_hierarchy as l2
from calib.sweep import frame_from
warnings.simplefilter("ignore")
if "sim" in sys.argv[1:]:
    from calib.backends.sim import SimBackend
    b = SimBackend(seed=1)
else:
    from calib.backends.cupy_backend import CupyBackend
    b = CupyBackend(device=0)
out = os.environ.get("OUT", "/tmp")
configs = l2.plan("quick", l2_bytes=b.l2_bytes, memory_bytes=b.memory_bytes)
n = len(configs)


def shifted(fraction):
    """The plan with every working set moved up by ``fraction`` of the dense grid's step in log2 W."""
    n_dense = int(l2.SUITES["quick"] * l2.DENSE_SHARE)
    step = math.log2(l2.DENSE[1] / l2.DENSE[0]) / (n_dense - 1)
    moved, i = [], 0
    for c in configs:
        if c["series"] != "working_set":
            moved.append(c)
            continue
        w = int(round(c["working_set_bytes"] * 2 ** (fraction * step) / 4096)) * 4096
        moved.append({**c, "working_set_bytes": w, "passes": max(1, int(round(l2.BYTES_PER_LAUNCH[i % 2] / w)))})
        i += 1
    return moved


if "--phases" in sys.argv[1:]:
    sweeps = {f"phase{f:g}": shifted(f) for f in (0, 0.25, 0.5, 0.75)} | {"phase0again": shifted(0)}
elif "--dense" in sys.argv[1:]:
    full = l2.plan("full", l2_bytes=b.l2_bytes, memory_bytes=b.memory_bytes)
    dense = [c for c in full if c["series"] == "working_set"] + [c for c in configs if c["series"] == "bandwidth"]

    def with_samples(k):  # each working-set config carries its sample count (cache_hierarchy.measure reads it)
        return [{**c, "samples": k} if c["series"] == "working_set" else c for c in dense]

    sweeps = {"quick": configs, "dense256x3": with_samples(3), "dense256x6": with_samples(6)}
else:
    orders = {"ascending": list(range(n)), "descending": list(range(n))[::-1],
              "shuffled": list(np.random.default_rng(0).permutation(n))}
    sweeps = {name: [configs[i] for i in orders[name.rstrip("2")]]
              for name in ("ascending", "descending", "shuffled", "ascending2")}
# Compiled, and one point measured (the context, cuRAND's generator, the first allocation), before any
# sweep's clock starts: the first sweep is --dense's baseline, and its wall time must not carry them.
b.prepare(configs)
b.measure(configs[:1])
res, ends = {}, {}
for name, cs in sweeps.items():
    start = time.perf_counter()
    fr = frame_from(cs, b.measure(cs))
    wall_s = time.perf_counter() - start
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
    ends[name] = e["value"]
    pm = lambda q: (q["ci95"][1] - q["ci95"][0]) / 2 / q["value"]
    print(f"{name:11s} end {e['value']/1e6:6.1f} MB ±{pm(e):.1%} x{e['diagnostics']['end_ci_correlation_factor']:.2f}"
          f" cap {c['value']/1e6:5.1f} ±{pm(c):.1%} lag1-4 {ac} flags {len(e['flags'])} measured in {wall_s:.2f} s",
          flush=True)
if "--phases" in sys.argv[1:]:
    logs = np.log([ends[f"phase{f:g}"] for f in (0, 0.25, 0.5, 0.75)])
    print(f"end over the four phases: sd {np.std(logs, ddof=1):.2%}, range {np.ptp(logs):.2%}; "
          f"phase 0 twice: {abs(math.log(ends['phase0'] / ends['phase0again'])):.2%} apart")
elif "--dense" not in sys.argv[1:]:
    for a, c in (("ascending", "ascending2"), ("ascending", "descending"), ("ascending", "shuffled")):
        j = res[a].index.intersection(res[c].index)
        print(f"r(residuals by W) {a} vs {c}: {np.corrcoef(res[a][j], res[c][j])[0, 1]:+.2f}")
