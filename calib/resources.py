"""Where calib's own files are: the notebooks, the shipped profiles and the CUDA kernels.

Two layouts hold them, and each function here answers for both:

- an installed wheel: package data inside the package, ``calib/notebooks/``, ``calib/profiles/``;
- the source tree (running from a checkout, or an editable install of it): the repository's
  top-level ``notebooks/`` and ``profiles/`` folders, beside ``calib/``. pyproject.toml maps those
  folders to ``calib.notebooks`` and ``calib.profiles`` when it builds a wheel.

The kernels live in ``calib/kernels/`` in both. Light on purpose: ``calib.profile`` asks it for the
shipped profiles, and ``import calib`` must stay fast.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    packaged = PACKAGE_DIR / name
    if packaged.is_dir():
        return packaged
    return PACKAGE_DIR.parent / name


def notebooks_dir() -> Path:
    """The folder of the suite's notebooks (``<name>.ipynb``)."""
    return _data_dir("notebooks")


def shipped_profiles_dir() -> Path:
    """The folder of the profiles calib ships (``<device slug>.json``), the last place the lookup tries."""
    return _data_dir("profiles")


def kernels_dir() -> Path:
    """The folder of the CUDA sources (``*.cu``) the cupy backend compiles."""
    return PACKAGE_DIR / "kernels"
