"""Backends: ``cupy`` (a real GPU) and ``sim`` (the simulated device). Nothing here imports CuPy
until a CuPy backend is asked for."""

from __future__ import annotations

from ..timing import StoppingRule
from .base import Backend, DeviceOutOfMemory, UnsupportedConfig

__all__ = ["Backend", "DeviceOutOfMemory", "UnsupportedConfig", "get_backend", "resolve_backend_name"]


def resolve_backend_name(name: str = "auto", device: int = 0) -> tuple[str, str]:
    """``(backend, why)``: "auto" is cupy where a GPU answers, else the simulated device."""
    if name in ("cupy", "sim"):
        return name, f"--backend {name}"
    if name != "auto":
        raise ValueError(f"unknown backend {name!r}: choose auto, cupy or sim")
    from ..fingerprint import detect_current

    found = detect_current(device)
    if found is None:
        return "sim", "no GPU found (neither NVML nor nvidia-smi answered)"
    return "cupy", f"found {found[0]['name']}"


def get_backend(name: str = "auto", *, sim_spec=None, device: int = 0, rule: StoppingRule | None = None,
                seed: int | None = None) -> Backend:
    name, _ = resolve_backend_name(name, device)
    if name == "sim":
        from .sim import SimBackend

        return SimBackend(sim_spec, rule=rule, seed=seed)
    from .cupy_backend import CupyBackend

    return CupyBackend(device=device, rule=rule)
