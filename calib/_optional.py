"""Optional dependencies fail only when used, and say which ``pip install`` extra brings them."""

from __future__ import annotations

import importlib

from .errors import CalibError

EXTRAS = {
    "cupy": "cuda13",  # or cuda12, by the CUDA major version of the driver
    "pynvml": "nvml",
    "papermill": "calibrate",
    "statsmodels": "calibrate",
    "pandas": "calibrate",
    "sqlalchemy": "calibrate",
    "matplotlib": "calibrate",
    "tqdm": "calibrate",
}


class MissingDependency(CalibError, ImportError):
    pass


def require(module: str, purpose: str):
    """Import ``module`` or raise an ImportError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = EXTRAS.get(top, "calibrate")
        hint = "pip install 'calib[cuda13]' (or 'calib[cuda12]' for a CUDA 12 driver)" if top == "cupy" \
            else f"pip install 'calib[{extra}]'"
        raise MissingDependency(f"{purpose} needs {top}, which is not installed ({exc}): {hint}") from exc
