"""Device and software fingerprints, and how two of them differ.

A measured number is only this machine's if it was measured on this kind of GPU. *Hard* fields
(what the silicon is) decide that; *soft* fields (driver, CUDA, CuPy, calib) only say the
numbers may have drifted and are worth re-measuring. The current device is found through NVML or
``nvidia-smi`` so that a heuristic looking up a profile never has to import CuPy.
"""

from __future__ import annotations

import functools
import re

from ._version import __version__

HARD_FIELDS = ("name", "compute_capability", "sm_count", "memory_bytes", "simulated")
SOFT_FIELDS = ("driver", "cuda_runtime", "cupy", "calib")
# Device settings that the numbers depend on but that do not make it another device: the clocks
# the GPU may reach and its power limit (a power cap lowers tensor throughput). A change warns like
# a soft field, suggesting `calib verify`. The memory bus width is recorded (calib.limits uses it)
# but not compared: the CUDA attribute and NVML need not report one number for the same card.
CONDITION_FIELDS = ("max_sm_mhz", "memory_clock_mhz", "power_limit_w")
# Two readings of one setting differ by rounding (NVML reports the power limit in mW).
_CONDITION_REL_TOLERANCE = 0.01

# Two readings of the same card's memory differ by what the driver reserves (NVML vs. the CUDA
# runtime): a few MiB out of tens of GiB. A different SKU differs by far more than this.
_MEMORY_REL_TOLERANCE = 0.03

SIMULATED_SLUG = "simulated"


def device_slug(device: dict | None) -> str:
    """File-name form of a device: ``NVIDIA H200`` -> ``nvidia-h200``; every simulated device
    shares one slug so that a machine without a GPU finds the profile it calibrated."""
    if not device:
        return SIMULATED_SLUG
    if device.get("simulated"):
        return SIMULATED_SLUG
    slug = re.sub(r"[^a-z0-9]+", "-", str(device.get("name", "unknown")).lower()).strip("-")
    return slug or "unknown"


def _same(field: str, a, b) -> bool:
    tolerance = {"memory_bytes": _MEMORY_REL_TOLERANCE}.get(field)
    if tolerance is None and field in CONDITION_FIELDS:
        tolerance = _CONDITION_REL_TOLERANCE
    if tolerance is not None:
        try:
            a, b = float(a), float(b)
        except (TypeError, ValueError, OverflowError):
            return False
        return abs(a - b) <= tolerance * max(abs(a), abs(b))
    return str(a) == str(b)


def differences(recorded: dict | None, current: dict | None, fields) -> list[str]:
    """Fields present in both that disagree, rendered ``field: recorded -> current``."""
    recorded, current = recorded or {}, current or {}
    out = []
    for field in fields:
        if field in recorded and field in current and not _same(field, recorded[field], current[field]):
            out.append(f"{field}: {recorded[field]!r} -> {current[field]!r}")
    return out


def hard_differences(recorded_device: dict | None, current_device: dict | None) -> list[str]:
    recorded_device, current_device = dict(recorded_device or {}), dict(current_device or {})
    # A profile from a real GPU never matches a simulated one and vice versa, even where the
    # simulated spec copies the real card's name.
    recorded_device.setdefault("simulated", False)
    current_device.setdefault("simulated", False)
    return differences(recorded_device, current_device, HARD_FIELDS)


def measurement_differences(recorded_device: dict | None, current_device: dict | None) -> list[str]:
    """What makes measurements of ``recorded_device`` not resumable on ``current_device``: the hard
    fields, and for the simulated device its spec's content (``sim_spec_sha256``, where both record
    it). Two specs of one simulated name plant different truths; a sweep or run folder resumed under
    the other had reused the old points in silence. The spec's path is not compared: the same spec
    moved or copied elsewhere measures the same."""
    diffs = hard_differences(recorded_device, current_device)
    recorded_device, current_device = recorded_device or {}, current_device or {}
    if recorded_device.get("simulated") and current_device.get("simulated"):
        diffs += differences(recorded_device, current_device, ("sim_spec_sha256",))
    return diffs


def soft_differences(recorded_software: dict | None, current_software: dict | None) -> list[str]:
    return differences(recorded_software, current_software, SOFT_FIELDS)


def condition_differences(recorded_device: dict | None, current_device: dict | None) -> list[str]:
    """Device settings (clocks, memory bus, power limit) recorded in both that disagree."""
    return differences(recorded_device, current_device, CONDITION_FIELDS)


def cuda_version(encoded: int) -> str:
    """CUDA's integer version (``cudaRuntimeGetVersion``: 13020) as "13.2", the spelling every
    fingerprint records and every comparison of them reads."""
    encoded = int(encoded)
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def software_fingerprint(**extra) -> dict:
    """The software this process runs; backends add driver/CUDA/CuPy versions they know."""
    out = {"calib": __version__}
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def _from_nvml(index: int) -> tuple[dict, dict] | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        device = {"name": name, "compute_capability": f"{major}.{minor}", "memory_bytes": int(memory),
                  "simulated": False}
        device.update(_nvml_conditions(pynvml, handle))
        return device, {"driver": driver}
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _nvml_conditions(pynvml, handle) -> dict:
    """The CONDITION_FIELDS and the memory bus width, where NVML answers (each may be
    unsupported: it is then left out)."""
    out = {}
    for key, read in (("max_sm_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                      ("memory_clock_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
                      ("memory_bus_width_bits", lambda: pynvml.nvmlDeviceGetMemoryBusWidth(handle)),
                      ("power_limit_w", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)):
        try:
            value = read()
        except Exception:  # noqa: BLE001 - NVML raises its own error types, and old bindings lack calls
            continue
        if isinstance(value, (int, float)) and value > 0:
            out[key] = value
    return out


def _from_nvidia_smi(index: int) -> tuple[dict, dict] | None:
    import shutil  # here, not at the top: `import calib` should not pay for these

    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    import subprocess
    query = "name,compute_cap,memory.total,driver_version"
    try:
        text = subprocess.run([exe, f"--id={index}", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10, check=True).stdout
        name, cc, mem_mib, driver = [s.strip() for s in text.strip().splitlines()[0].split(",")]
        return ({"name": name, "compute_capability": cc, "memory_bytes": int(float(mem_mib)) * 2**20,
                 "simulated": False}, {"driver": driver})
    except Exception:
        return None


@functools.lru_cache(maxsize=None)
def detect_current(index: int = 0) -> tuple[dict, dict] | None:
    """(device, software) of GPU ``index`` as NVML or nvidia-smi report it; None without a GPU."""
    found = _from_nvml(index) or _from_nvidia_smi(index)
    if found is None:
        return None
    device, software = found
    return device, software_fingerprint(**software)
