"""Clocks and throttle reasons through NVML, where it is available.

Read while kernels run (not after a synchronize, when the GPU is idle), so that a sample taken
under throttling can say so. Without NVML every reading is empty and nothing fails.
"""

from __future__ import annotations

# nvmlClocksEventReason* bits. Idle, application-clock and display settings are not slowdowns.
THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


class ClockReader:
    def __init__(self, pci_bus_id: str | None = None, index: int = 0):
        self.handle = None
        self.nvml = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            if pci_bus_id:
                self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode() if isinstance(pci_bus_id, str)
                                                                   else pci_bus_id)
            else:
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            self.handle = None

    @property
    def available(self) -> bool:
        return self.handle is not None

    def read(self) -> dict:
        if not self.available:
            return {}
        n = self.nvml
        out = {}
        try:
            out["sm_mhz"] = n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM)
            out["mem_mhz"] = n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_MEM)
            out["max_sm_mhz"] = n.nvmlDeviceGetMaxClockInfo(self.handle, n.NVML_CLOCK_SM)
        except Exception:
            pass
        try:
            get = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                n.nvmlDeviceGetCurrentClocksThrottleReasons
            bits = int(get(self.handle))
            out["throttle_bits"] = bits
            out["throttle_reasons"] = [name for bit, name in THROTTLE_BITS.items() if bits & bit]
        except Exception:
            pass
        try:
            out["temperature_c"] = n.nvmlDeviceGetTemperature(self.handle, n.NVML_TEMPERATURE_GPU)
            out["power_w"] = n.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        except Exception:
            pass
        return out


def merge_readings(readings: list[dict]) -> dict:
    """One record for a sweep point: clock range and the union of throttle reasons seen."""
    readings = [r for r in readings if r]
    if not readings:
        return {}
    out = {"readings": len(readings)}
    for key in ("sm_mhz", "mem_mhz", "temperature_c", "power_w"):
        vals = [r[key] for r in readings if key in r]
        if vals:
            out[f"{key}_min"], out[f"{key}_max"] = min(vals), max(vals)
    if any("max_sm_mhz" in r for r in readings):
        out["max_sm_mhz"] = max(r.get("max_sm_mhz", 0) for r in readings)
    out["throttle_reasons"] = sorted({x for r in readings for x in r.get("throttle_reasons", [])})
    return out
