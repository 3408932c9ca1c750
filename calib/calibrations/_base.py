"""What every calibration module declares, and the defaults of what it may leave out.

A calibration is one module in this package whose name is its id, which is also its notebook's
name (``notebooks/<id>.ipynb``) and the ``calibration`` field of every sweep point it plans. The
registry (``calib.calibrations``) checks each module against :data:`REQUIRED` when it loads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One profile parameter a calibration produces: its name, the unit of its value, and what it
    means to a heuristic (one line)."""

    name: str
    unit: str
    meaning: str


# name -> what it is. Kinds: "timed" calibrations sweep configs that a backend times; "compiled"
# ones ask the compiler (no timing, no sweep points in the store).
REQUIRED = {
    "TITLE": "the notebook's heading",
    "INTRO": "markdown: what the notebook measures and the model it fits",
    "READING": "markdown: how a heuristic uses the parameters (the notebook's reading section)",
    "PARAMETERS": "tuple of Param: every parameter the fit can produce",
    "SUITES": "the grids of the quick and the full suite",
    "plan": "plan(suite, *, l2_bytes, memory_bytes, sm_count, **options) -> the sweep's configs",
    "default_truth": "default_truth(spec_params) -> the simulated device's true values, nuisances included",
    "fit": "fit(data, *, robust=False, source=None) -> calib.fit.FitResult",
    "figures": "figures(data, result, *, title) -> {name: matplotlib figure}",
}
REQUIRED_TIMED = {
    "true_time_us": "true_time_us(columns, truth) -> the simulated device's time of each config",
    "measure": "measure(backend, config) -> Measurement on the CuPy backend",
}
REQUIRED_COMPILED = {
    "collect": "collect(backend, configs) -> the tidy frame the fit reads (backend.compile_report underneath)",
    "simulate": "simulate(plan, truth, rng) -> what a compiler would report on the simulated device",
    "compile_report": "compile_report(backend, plan) -> what the compiler reports on the CuPy backend",
}
def default_reading(result) -> str:
    """Each fitted parameter with its interval, in the calibration's declared order."""
    lines = []
    for name, rec in result.records.items():
        lo, hi = rec.get("ci95") or (float("nan"), float("nan"))
        lines.append(f"{name} = {rec['value']:.6g} {rec['unit']} (95% CI {lo:.6g} to {hi:.6g})")
    return "\n".join(lines)


# Optional declarations and their defaults.
DEFAULTS = {
    "reading": default_reading,  # reading(result) -> the lines the notebook prints under its reading
    "KIND": "timed",
    "HOST_TIMED": False,      # times the host (not device events): measures while the others wait
    "OPTIONS": {},            # extra notebook parameters passed to plan: {name: (default, comment)}
    "ENVIRONMENT": {},        # environment variables the notebook sets before CuPy is imported
    "footprint_bytes": lambda config: 4096,  # device memory a point needs
    "prepare": lambda backend, configs: None,  # compile before taking the GPU (CuPy backend)
    # Seconds of fitting, plotting and writing after the notebook has measured: in `calib run` the
    # notebooks waiting for the GPU go longest tail first (calib.calibration.GpuQueue).
    "TAIL_S": 4.0,
}
SUITE_NAMES = ("quick", "full")


class CalibrationDefinitionError(TypeError):
    """A calibration module lacks something the registry needs: a bug in calib, not in its input."""


def small_kernels(backend):
    """kernels/small.cu on the CuPy backend: the small kernels several calibrations share (empty
    and spinning kernels, split-K and reduction kernels, L2 and shared-memory reads, FMA chains)."""
    return backend.module("small", "small.cu", ["fma_chains<16>"])


def line_figures(result, title, axes: dict) -> dict:
    """For each linear fit of ``result`` named in ``axes`` (parameter -> (x label, x scale)): the
    measured times with the fitted line, and its residuals."""
    figs = {}
    for name, (x_label, x_scale) in axes.items():
        f = result.models.get(name)
        if f is None:
            continue
        slug = name.replace(".", "_")
        figs[f"line-{slug}"] = f.plot_line(title=title(name), x_label=x_label, x_scale=x_scale,
                                           record=result.records.get(name))
        figs[f"residuals-{slug}"] = f.plot_residuals(title=title(name), x_label=x_label, x_scale=x_scale,
                                                     record=result.records.get(name))
    return figs
