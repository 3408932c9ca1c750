"""Registers of a persistent normalization kernel against the elements it buffers per thread.

Not a timing: the compiler's own report. Kernels that keep N fp32 elements per thread in registers
(a persistent softmax) are compiled for N over a grid, and their register count and spill bytes
read from the kernel attributes. ``regs = additional + slope * N`` over the unspilled, uncapped
points: the intercept is ``normalization.additional_registers`` (the "register overhead" that
heuristics hard-code), with a CI from the fit; the largest N compiled without spilling is
``normalization.max_persistent_elements_per_thread`` (exact for this compiler: no CI to speak of,
and its record says so).
"""

from __future__ import annotations

import numpy as np

EXPERIMENT = "registers"
ADDITIONAL = "normalization.additional_registers"
MAX_PERSISTENT = "normalization.max_persistent_elements_per_thread"
REGISTER_CAP = 255
SIM_DEFAULTS = {"sim.registers.per_element": 1.0, "sim.registers.jitter": 1.5}
SUITES = {"quick": list(range(4, 257, 12)), "full": list(range(2, 257, 4))}


def plan(suite: str, **_) -> list[int]:
    return list(SUITES[suite])


def default_truth(base: dict | None = None) -> dict:
    truth = {ADDITIONAL: 30.0, MAX_PERSISTENT: 200.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


def simulate(buffered: list[int], truth: dict, rng: np.random.Generator) -> list[dict]:
    """What a compiler reports: registers rounded to whole numbers with some scatter around the
    line, spills once N passes the planted maximum."""
    out = []
    for n in buffered:
        regs = truth[ADDITIONAL] + truth["sim.registers.per_element"] * n + rng.normal(0, truth["sim.registers.jitter"])
        spills = n > truth[MAX_PERSISTENT]
        out.append({"buffered": n, "registers": int(min(REGISTER_CAP, round(regs))),
                    "spill_bytes": int(4 * (n - truth[MAX_PERSISTENT])) if spills else 0})
    return out


def fit(reports: list[dict], *, source: str | None = None) -> tuple[dict, object]:
    """Records for both parameters, and the statsmodels result of the register line."""
    import statsmodels.api as sm
    from scipy import stats

    rows = sorted(reports, key=lambda r: r["buffered"])
    clean = [r for r in rows if r["spill_bytes"] == 0 and r["registers"] < REGISTER_CAP]
    records = {}
    res = None
    if len(clean) >= 3:
        n = np.array([r["buffered"] for r in clean], dtype=float)
        regs = np.array([r["registers"] for r in clean], dtype=float)
        res = sm.OLS(regs, sm.add_constant(n)).fit()
        q = stats.t.ppf(0.975, res.df_resid)
        lo, hi = res.params[0] - q * res.bse[0], res.params[0] + q * res.bse[0]
        flags = []
        if res.rsquared < 0.99:
            flags.append(f"low R²: {res.rsquared:.4f}")
        records[ADDITIONAL] = {"value": float(res.params[0]), "ci95": [float(lo), float(hi)], "unit": "count",
                               "n": len(clean), "method": "OLS registers ~ buffered elements, compiler attributes",
                               "r2": float(res.rsquared), "flags": flags,
                               "diagnostics": {"registers_per_element": float(res.params[1]),
                                               "residual_sd": float(np.sqrt(res.scale))}}
    unspilled = [r["buffered"] for r in rows if r["spill_bytes"] == 0]
    if unspilled:
        first_spill = next((r["buffered"] for r in rows if r["spill_bytes"] > 0), None)
        flags = [] if first_spill is not None else [f"no spill up to {rows[-1]['buffered']}: a lower bound"]
        best = max(unspilled)
        upper = first_spill - 1 if first_spill is not None else best
        records[MAX_PERSISTENT] = {"value": float(best), "ci95": [float(best), float(upper)],
                                   "unit": "count", "n": len(rows),
                                   "method": "largest N compiled without spills (compiler attributes); not a "
                                             "confidence interval but the bracket the grid leaves: up to the first "
                                             "N that spilled, exclusive",
                                   "flags": flags, "diagnostics": {"first_spilling_n": first_spill}}
    if source:
        for rec in records.values():
            rec["source"] = source
    return records, res


def plot(table, records: dict, *, title: str):
    """Registers against N, spilled points marked, the fitted line over the clean ones."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8), constrained_layout=True)
    clean = table[table["spill_bytes"] == 0]
    spilled = table[table["spill_bytes"] > 0]
    ax.plot(clean["buffered"], clean["registers"], "o", ms=4, label="no spill")
    if len(spilled):
        ax.plot(spilled["buffered"], spilled["registers"], "x", color="crimson", label="spills")
    rec = records.get(ADDITIONAL)
    if rec:
        n = np.asarray(table["buffered"], dtype=float)
        slope = rec["diagnostics"]["registers_per_element"]
        ax.plot(n, rec["value"] + slope * n, "-", lw=1, label=f"{rec['value']:.1f} + {slope:.2f}·N")
    ax.axhline(REGISTER_CAP, color="k", ls=":", lw=0.8)
    ax.set(xlabel="elements buffered per thread (N)", ylabel="registers per thread", title=title)
    ax.legend(fontsize=8)
    return fig
