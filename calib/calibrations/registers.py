"""Registers of a persistent normalization kernel against the elements it buffers per thread.

Not a timing: the compiler's own report. Kernels that keep N fp32 elements per thread in registers
(a persistent softmax) are compiled for N over a grid, and their register count and spill bytes
read from the kernel attributes. ``regs = additional + slope * N`` over the points before the
compiler starts allocating to occupancy levels instead of to need: the intercept is
``normalization.additional_registers`` (the "register overhead" that
heuristics hard-code), with a CI from the fit; the largest N compiled without spilling is
``normalization.max_persistent_elements_per_thread`` (exact for this compiler: no CI to speak of,
and its record says so).
"""

from __future__ import annotations

from .._lazy import lazy
from ..fit import FitResult, make_record
from ._base import Param

np = lazy("numpy")

ID = __name__.rsplit(".", 1)[-1]
KIND = "compiled"
TITLE = "Registers of a persistent normalization kernel"
INTRO = """Compiles a persistent softmax that keeps N fp32 elements per thread in registers, for N over a
grid, and reads the compiler's register count and spill bytes from the kernel attributes.
`regs = additional + slope · N` over the unspilled points gives `normalization.additional_registers`
(the constant heuristics hard-code as "register overhead"); the largest N compiled without spills is
`normalization.max_persistent_elements_per_thread`. No timing: the numbers are the compiler's."""
READING = """A heuristic that sizes a persistent buffer checks `additional + N ≤ register budget per thread`
(65536 / threads per block, at most 255); past `max_persistent_elements_per_thread` the compiler
spills to local memory and the persistent schedule loses its point."""
ADDITIONAL = "normalization.additional_registers"
MAX_PERSISTENT = "normalization.max_persistent_elements_per_thread"
PARAMETERS = (Param(ADDITIONAL, "count", "registers per thread beyond a persistent buffer (the 'register overhead')"),
              Param(MAX_PERSISTENT, "count", "largest persistent buffer per thread compiled without spills "
                                             "(a bracket, not a CI)"))
REGISTER_CAP = 255
SIM_DEFAULTS = {"sim.registers.per_element": 1.0, "sim.registers.jitter": 1.5}
# Compiling is the cost (NVRTC took 16 s for 22 kernels on the H200 machine): the quick grid
# samples the linear stretch and brackets the spill coarsely; the full grid is fine throughout.
SUITES = {"quick": [2, 8, 16, 24, 32, 40, 48, 56, 64, 128, 192, 224, 240, 256], "full": list(range(2, 257, 4))}
# Compiles in flight at once. Fewer than the host's cores: this notebook compiles after the
# host-timed one has measured, while the others measure, and the DRAM shape search's host loop
# (about 1.8 ms a shape beside its GPU time, session 4's fresh H200 suites) is on the run's
# critical path; on a 16-core H200 host 4 leave it the rest.
COMPILE_THREADS = 4
# Where the line is sought: the quick grid's sparse points past 64 only bracket the spill (a line
# grown from 64 to 128 cannot tell a plateau from a slope); the full grid is dense everywhere.
LINE_MAX_N = {"quick": 64, "full": None}


def plan(suite: str, **_) -> list[dict]:
    return [{"calibration": ID, "buffered": n, "line_max_n": LINE_MAX_N[suite]} for n in SUITES[suite]]


def collect(backend, configs: list[dict]):
    """The compiler's report for each planned N, beside the plan's columns: the fit's input."""
    import pandas as pd

    reports = backend.compile_report([int(c["buffered"]) for c in configs])
    return pd.DataFrame([{**c, **r} for c, r in zip(configs, reports)])


def default_truth(base: dict | None = None) -> dict:
    truth = {ADDITIONAL: 30.0, MAX_PERSISTENT: 200.0, **SIM_DEFAULTS}
    truth.update({k: v for k, v in (base or {}).items() if k in truth})
    return truth


# Past a point the compiler stops allocating what a kernel needs and allocates to occupancy
# levels instead (seen with NVRTC 13 on an H200: 96, 128, 168, 255 registers per thread).
OCCUPANCY_LEVELS = (96, 128, 168, 255)


def simulate(buffered: list[int], truth: dict, rng: np.random.Generator) -> list[dict]:
    """What a compiler reports: registers rounded to whole numbers with some scatter around the
    line, snapped up to occupancy levels once past the first of them, spills once N passes the
    planted maximum."""
    out = []
    for n in buffered:
        regs = truth[ADDITIONAL] + truth["sim.registers.per_element"] * n + rng.normal(0, truth["sim.registers.jitter"])
        regs = int(round(regs))
        if regs > OCCUPANCY_LEVELS[0]:
            regs = next((lvl for lvl in OCCUPANCY_LEVELS if lvl >= regs), REGISTER_CAP)
        spills = n > truth[MAX_PERSISTENT]
        out.append({"buffered": n, "registers": int(min(REGISTER_CAP, regs)),
                    "spill_bytes": int(4 * (n - truth[MAX_PERSISTENT])) if spills else 0})
    return out


def linear_regime(rows: list[dict], *, start: int = 4) -> list[dict]:
    """The points before the compiler starts allocating to occupancy levels: grow the line from
    the first ``start`` points and stop at the first point it misses by more than one allocation
    granule (8 registers) or four times its residual scatter, whichever is larger."""
    kept = list(rows[:start])
    for cur in rows[start:]:
        n = np.array([r["buffered"] for r in kept], dtype=float)
        regs = np.array([r["registers"] for r in kept], dtype=float)
        slope, icpt = np.polyfit(n, regs, 1)
        sd = float(np.std(regs - (icpt + slope * n), ddof=2)) if len(kept) > 2 else 0.0
        if abs(cur["registers"] - (icpt + slope * cur["buffered"])) > max(8.0, 4.0 * sd):
            break
        kept.append(cur)
    return kept


def fit(frame, *, robust: bool = False, source: str | None = None):
    """Records for both parameters, and the statsmodels result of the register line, sought among
    the points with N up to the plan's ``line_max_n`` (all where it is missing). ``robust`` does
    not apply: the counts are the compiler's, not noisy timings."""
    import pandas as pd
    import statsmodels.api as sm
    from scipy import stats

    result = FitResult(ID)
    reports = frame.to_dict("records") if hasattr(frame, "to_dict") else list(frame)
    limits = {r.get("line_max_n") for r in reports} - {None}
    line_max_n = None if not limits or any(pd.isna(v) for v in limits) else int(min(limits))
    rows = sorted(reports, key=lambda r: r["buffered"])
    clean = linear_regime([r for r in rows if r["spill_bytes"] == 0 and r["registers"] < REGISTER_CAP
                           and (line_max_n is None or r["buffered"] <= line_max_n)])
    records = result.records
    res = None
    if len(clean) < 3:
        result.failures[ADDITIONAL] = (f"{len(clean)} unspilled points on the register line "
                                       f"(N ≤ {line_max_n}); it needs at least 3")
    else:
        n = np.array([r["buffered"] for r in clean], dtype=float)
        regs = np.array([r["registers"] for r in clean], dtype=float)
        res = sm.OLS(regs, sm.add_constant(n)).fit()
        q = stats.t.ppf(0.975, res.df_resid)
        # Whole-number counts cannot place the line closer than half a register, however well the
        # points line up (they can all fall exactly on it, and the fit's interval collapses).
        half = max(q * res.bse[0], 0.5)
        lo, hi = res.params[0] - half, res.params[0] + half
        flags = []
        # Compilers allocate registers in granules of 8: a uniform rounding of sd 8/sqrt(12) is the
        # scatter to expect; twice that means the counts do not follow a line.
        if np.sqrt(res.scale) > 2 * 8 / np.sqrt(12):
            flags.append(f"scatter of {np.sqrt(res.scale):.1f} registers around the line, beyond allocation rounding")
        if abs(res.params[1] - 1) > 0.25:
            flags.append(f"registers grow {res.params[1]:.2f} per element, not one: the buffer is not simply "
                         "held in registers")
        records[ADDITIONAL] = make_record(
            res.params[0], (lo, hi), "count", n=len(clean), method="OLS registers ~ buffered elements, compiler "
            "attributes", r2=res.rsquared, flags=flags, source=source,
            diagnostics={"registers_per_element": float(res.params[1]), "residual_sd": float(np.sqrt(res.scale)),
                         "linear_regime_max_n": int(n.max())})
        result.models[ADDITIONAL] = res
    unspilled = [r["buffered"] for r in rows if r["spill_bytes"] == 0]
    if unspilled:
        first_spill = next((r["buffered"] for r in rows if r["spill_bytes"] > 0), None)
        flags = [] if first_spill is not None else [f"no spill up to {rows[-1]['buffered']}: a lower bound"]
        best = max(unspilled)
        upper = first_spill - 1 if first_spill is not None else best
        records[MAX_PERSISTENT] = make_record(
            best, (best, upper), "count", n=len(rows), flags=flags, source=source,
            method="largest N compiled without spills (compiler attributes); not a confidence interval but the "
                   "bracket the grid leaves: up to the first N that spilled, exclusive",
            diagnostics={"first_spilling_n": first_spill})
    else:
        result.failures[MAX_PERSISTENT] = "every compiled N spilled: no persistent buffer fits"
    return result


def figures(table, result, *, title) -> dict:
    return {ID: plot(table, result.records, title=title("registers against buffered elements"),
                     line=result.models.get(ADDITIONAL))}


def compile_report(b, buffered: list[int]) -> list[dict]:
    """Registers and spill bytes of the persistent softmax for each N, from the compiled kernels
    (CuPy backend)."""
    cp = b.cp
    specs = {n: (f"registers-{n}", "persistent.cu", [f"persistent_softmax<{n}>"]) for n in buffered}
    # A module per N, compiled in COMPILE_THREADS threads (compile_modules): one module of every N
    # took 6.1-7.5 s of NVRTC on a fresh H200 in the quick suite (session 4, 2026-12-02). A kernel's
    # registers and spills are ptxas's allocation for that kernel alone, whichever module holds it.
    b.compile_modules(list(specs.values()), max_threads=COMPILE_THREADS)
    out = []
    for n in buffered:
        name = specs[n][2][0]
        fn = b.module(*specs[n]).get_function(name)
        attrs = getattr(fn, "attributes", None) or {
            "num_regs": cp.cuda.driver.funcGetAttribute(4, fn.ptr),          # CU_FUNC_ATTRIBUTE_NUM_REGS
            "local_size_bytes": cp.cuda.driver.funcGetAttribute(3, fn.ptr)}  # ..._LOCAL_SIZE_BYTES
        out.append({"buffered": n, "registers": int(attrs["num_regs"]), "spill_bytes": int(attrs["local_size_bytes"])})
    return out


def plot(table, records: dict, *, title: str, line=None):
    """Registers against N, spilled points marked, the fitted line over the clean ones; beside it
    the line's residuals, against the scatter that allocation in granules of 8 alone would leave."""
    import matplotlib.pyplot as plt

    from ..plotting import detach

    fig, (ax, ar) = plt.subplots(1, 2, figsize=(12, 3.8), constrained_layout=True)
    clean = table[table["spill_bytes"] == 0]
    spilled = table[table["spill_bytes"] > 0]
    ax.plot(clean["buffered"], clean["registers"], "o", ms=4, label="no spill")
    if len(spilled):
        ax.plot(spilled["buffered"], spilled["registers"], "x", color="crimson", label="spills")
    rec = records.get(ADDITIONAL)
    if rec:
        n = np.asarray(table["buffered"], dtype=float)
        slope = rec["diagnostics"]["registers_per_element"]
        # the estimate with its CI, as every figure states it (the label had the value alone)
        ci = f" (95% CI {rec['ci95'][0]:.1f} to {rec['ci95'][1]:.1f})" if rec.get("ci95") else " (no CI)"
        ax.plot(n, rec["value"] + slope * n, "-", lw=1, label=f"{rec['value']:.1f}{ci} + {slope:.2f}·N")
    bracket = records.get(MAX_PERSISTENT)
    if bracket and bracket.get("ci95"):  # a bracket, not a CI: between the last clean N and the first spill
        lo, hi = bracket["ci95"]
        ax.axvspan(lo, hi, color="crimson", alpha=0.12, lw=0,
                   label=f"no spill up to N = {bracket['value']:g} (bracket {lo:g} to {hi:g})")
    ax.axhline(REGISTER_CAP, color="k", ls=":", lw=0.8)
    ax.set(xlabel="elements buffered per thread (N)", ylabel="registers per thread", title=title)
    ax.legend(fontsize=8)
    if line is not None:
        rounding = 2 * 8 / np.sqrt(12)
        ar.plot(np.asarray(line.model.exog)[:, 1], line.resid, "o", ms=4)
        for y in (-rounding, 0, rounding):
            ar.axhline(y, color="k", lw=0.8, ls="-" if y == 0 else ":")
        ar.set(xlabel="elements buffered per thread (N)", ylabel="residual (registers)",
               title="residuals of the line (dotted: twice the rounding scatter)")
    else:
        ar.set_axis_off()
    return detach(fig)
