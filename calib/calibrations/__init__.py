"""The registry of calibrations: the one place that lists them.

Each calibration is a module of this package (see ``_base.py`` for what it declares). Everything
that needs to know the calibrations asks here: the simulated device (its models), the CuPy backend
(its measurements), ``calib run`` (the suite and its notebooks), the notebook generator, the
parameter catalogue, the coverage tests and the README's parameter table. Adding a calibration is
adding its id to :data:`IDS`, its module, and its generated notebook.

The modules import numpy only when a function first uses it (``calib._lazy``), so reading the
registry (for the catalogue, or ``calib query``'s suggestions) costs no scientific stack.
"""

from __future__ import annotations

import importlib

from ..errors import CalibError
from ._base import (DEFAULTS, REQUIRED, REQUIRED_COMPILED, REQUIRED_TIMED, SUITE_NAMES, CalibrationDefinitionError,
                    Param)

# In the suite's order: a partial run of the suite covers the most used parameters first.
IDS = ("memory_bandwidth", "cache_hierarchy", "shared_memory", "occupancy", "launch_latency", "matmul_splitk",
       "compute_throughput", "matmul_throughput", "reductions", "normalization_bandwidth", "registers")

__all__ = ["IDS", "Param", "get", "all_calibrations", "timed", "UnknownCalibration", "fit", "measured_together"]

_loaded: dict = {}


class UnknownCalibration(CalibError, KeyError):
    def __str__(self):
        return str(self.args[0])


def get(calibration_id: str):
    """The module of one calibration, checked and with its optional declarations filled in."""
    module = _loaded.get(calibration_id)
    if module is not None:
        return module
    if calibration_id not in IDS:
        import difflib

        close = difflib.get_close_matches(str(calibration_id), IDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; the calibrations are {', '.join(IDS)}"
        raise UnknownCalibration(f"no calibration {calibration_id!r}{hint}")
    module = importlib.import_module(f"{__name__}.{calibration_id}")
    _check(module, calibration_id)
    _loaded[calibration_id] = module
    return module


def all_calibrations() -> list:
    return [get(i) for i in IDS]


def timed() -> list:
    return [m for m in all_calibrations() if m.KIND == "timed"]


def measured_together(configs: list[dict]):
    """The calibration that times ``configs`` in one call (its ``measure_group``: points taken in
    rounds, ``calib.timing.interleave``), or None when they are measured one by one: more than one
    point, all of one calibration that declares ``measure_group``."""
    ids = {c.get("calibration") for c in configs}
    if len(configs) < 2 or len(ids) != 1 or next(iter(ids)) not in IDS:
        return None
    module = get(next(iter(ids)))
    return module if getattr(module, "measure_group", None) is not None else None


def _check(module, calibration_id: str):
    for name, value in DEFAULTS.items():
        if not hasattr(module, name):
            setattr(module, name, value)
    module.ID = calibration_id
    required = {**REQUIRED, **(REQUIRED_TIMED if module.KIND == "timed" else REQUIRED_COMPILED)}
    missing = [f"{name} ({why})" for name, why in required.items() if not hasattr(module, name)]
    if missing:
        raise CalibrationDefinitionError(f"calibration {calibration_id} does not declare: {'; '.join(missing)}")
    if module.KIND not in ("timed", "compiled"):
        raise CalibrationDefinitionError(f"calibration {calibration_id}: KIND must be 'timed' or 'compiled'")
    if set(module.SUITES) != set(SUITE_NAMES):
        raise CalibrationDefinitionError(f"calibration {calibration_id}: SUITES must define {SUITE_NAMES}")
    if not module.PARAMETERS or not all(isinstance(p, Param) for p in module.PARAMETERS):
        raise CalibrationDefinitionError(f"calibration {calibration_id}: PARAMETERS must be a tuple of Param")


def fit(calibration_id: str, data, *, robust: bool = False):
    """Fit one calibration's data and hold it to its declaration: every record is a declared
    parameter in its declared unit, and every declared parameter without a record has a reason.
    A model that cannot be fitted at all (the optimiser gives up) fails every parameter with that
    reason instead of raising: the notebook shows it and the rest of the run goes on."""
    module = get(calibration_id)
    source = f"notebooks/{calibration_id}.ipynb"
    declared = {p.name: p for p in module.PARAMETERS}
    try:
        result = module.fit(data, robust=robust, source=source)
    except (RuntimeError, ValueError, ArithmeticError) as exc:
        from ..fit import FitResult

        result = FitResult(calibration_id, failures={name: f"the fit failed: {type(exc).__name__}: {exc}"
                                                     for name in declared})
    for name, rec in result.records.items():
        if name not in declared:
            raise CalibrationDefinitionError(f"calibration {calibration_id} produced {name!r}, which it does not "
                                             "declare in PARAMETERS")
        if rec.get("unit") != declared[name].unit:
            raise CalibrationDefinitionError(f"calibration {calibration_id}: {name} is in {rec.get('unit')!r}, "
                                             f"declared in {declared[name].unit!r}")
    for name in declared:
        if name not in result.records and name not in result.failures:
            result.failures[name] = "no record: the data held no points for it"
    return result
