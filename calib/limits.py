"""Theoretical limits of a device, from the properties its fingerprint records.

A measured bandwidth or throughput above what the silicon can do is a measurement error (a
kernel that skipped work, a timer that missed it, a model that does not fit), or a fingerprint
that names the wrong device. The limits are computed from the fingerprint alone, so that the
check costs no GPU and no scientific stack:

- DRAM: ``memory_bus_width_bits × memory_clock_mhz × 2 (double data rate) / 8`` bytes per
  second (NVML's maximum memory clock, the one ``nvidia-smi -q`` calls "Max Clocks, Memory":
  6016 bits × 3201 MHz on an H200 is 4814 GB/s, its datasheet's 4.8 TB/s). It bounds every
  ``memory.dram.*_bandwidth_gbps`` (a copy counts the bytes read and written, which share the bus).
- FP32: ``sm_count × FP32 lanes per SM × 2 flops per FMA × max_sm_mhz`` (132 × 128 × 2 × 1980 MHz
  = 66.9 TFLOP/s on an H200). The lanes per SM come from the compute capability
  (:data:`FP32_LANES_PER_SM`), or ``fp32_lanes_per_sm`` in the fingerprint (the simulated
  device's spec may say it); an architecture not in the table gets no FP32 limit rather than a
  guess that could flag a correct measurement.

A limit needs every property it is computed from; a fingerprint without them (older profiles
have no memory clock) yields no limit, and nothing is flagged. ``annotate`` is what profile
writers call: each record with a limit gets ``limit`` and ``ratio_to_limit`` in its diagnostics,
and a flag where the value is above the limit. ``exceeded`` is what the loader calls to warn.
Neither imports anything beyond the standard library.
"""

from __future__ import annotations

import math

DRAM_PREFIX = "memory.dram."
DRAM_SUFFIX_UNIT = "GB/s"
FP32 = "compute.fp32.fma_tflops"
FLAG_PREFIX = "above the theoretical limit"

# FP32 FMA lanes per SM by compute capability (CUDA C Programming Guide, "Arithmetic
# Instructions": 32-bit floating-point add, multiply, multiply-add results per clock per SM).
FP32_LANES_PER_SM = {
    "6.0": 64, "6.1": 128, "6.2": 128, "7.0": 64, "7.2": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.7": 128,
    "8.9": 128, "9.0": 128, "10.0": 128, "10.1": 128, "10.3": 128, "11.0": 128, "12.0": 128, "12.1": 128,
}
# The simulated device: an H200-like SM unless its spec says otherwise.
SIMULATED_FP32_LANES = 128


def _number(device: dict, key: str) -> float | None:
    value = device.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except (OverflowError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def fp32_lanes(device: dict) -> float | None:
    lanes = _number(device, "fp32_lanes_per_sm")
    if lanes:
        return lanes
    if device.get("simulated"):
        return float(SIMULATED_FP32_LANES)
    lanes = FP32_LANES_PER_SM.get(str(device.get("compute_capability")))
    return float(lanes) if lanes else None


def device_limits(device: dict | None) -> dict[str, dict]:
    """``{"dram_gbps": {...}, "fp32_tflops": {...}}``, each ``{"value", "unit", "formula"}``, for
    the limits this fingerprint has the properties of."""
    device = device if isinstance(device, dict) else {}
    out = {}
    bus, mem = _number(device, "memory_bus_width_bits"), _number(device, "memory_clock_mhz")
    if bus and mem:
        out["dram_gbps"] = {"value": bus * mem * 1e6 * 2 / 8 / 1e9, "unit": "GB/s",
                            "formula": f"{bus:g}-bit bus × {mem:g} MHz × 2 (DDR) / 8"}
    sms, clock, lanes = _number(device, "sm_count"), _number(device, "max_sm_mhz"), fp32_lanes(device)
    if sms and clock and lanes:
        out["fp32_tflops"] = {"value": sms * lanes * 2 * clock * 1e6 / 1e12, "unit": "TFLOP/s",
                              "formula": f"{sms:g} SMs × {lanes:g} lanes × 2 × {clock:g} MHz"}
    return {key: limit for key, limit in out.items() if _usable(limit["value"])}


def _usable(limit: float) -> bool:
    """Whether a limit multiplied out of a fingerprint is a number to compare with: each property is
    finite, but their product may not be (``max_sm_mhz`` 1e300 from a hand-edited fragment or a
    simulated-device spec gave an infinite FP32 limit, written into every record's diagnostics, and
    the profile's strict dump ended the merge in a ValueError), or may round to 0 (a division by it)."""
    return math.isfinite(limit) and limit > 0


def limit_for(name: str, limits: dict) -> dict | None:
    """The limit that bounds parameter ``name``, or None."""
    if name.startswith(DRAM_PREFIX) and "_bandwidth_gbps" in name:
        return limits.get("dram_gbps")
    if name == FP32:
        return limits.get("fp32_tflops")
    return None


def _flag(value: float, limit: dict) -> str:
    return (f"{FLAG_PREFIX}: {value:.4g} > {limit['value']:.4g} {limit['unit']} ({limit['formula']}); "
            "a measurement error or the wrong device")


def annotate(params: dict, device: dict | None) -> dict:
    """``params`` (name -> record) with each limited record's diagnostics holding ``limit`` and
    ``ratio_to_limit``, and a flag where the value is above it. Records are copied, not changed;
    a record calib could not read is left as it is (the writer's validation reports it).
    Idempotent: a flag of an earlier annotation is replaced, not repeated."""
    limits = device_limits(device)
    if not limits:
        return params
    out = {}
    for name, record in params.items():
        limit = limit_for(name, limits) if isinstance(name, str) else None
        value = record.get("value") if isinstance(record, dict) else None
        if limit is None or isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            out[name] = record
            continue
        record = dict(record)
        diagnostics = dict(record.get("diagnostics") or {}) if isinstance(record.get("diagnostics"), dict) else None
        if diagnostics is None:
            out[name] = record
            continue
        ratio = value / limit["value"]
        if not math.isfinite(ratio):  # a tiny limit (a clock of 1e-300 MHz): no ratio JSON can hold
            out[name] = record
            continue
        diagnostics["limit"] = limit["value"]
        diagnostics["ratio_to_limit"] = ratio
        record["diagnostics"] = diagnostics
        flags = record.get("flags")
        if isinstance(flags, (list, tuple)):
            flags = [f for f in flags if not (isinstance(f, str) and f.startswith(FLAG_PREFIX))]
            if value > limit["value"]:
                flags.append(_flag(value, limit))
            record["flags"] = flags
        out[name] = record
    return out


def exceeded(params, device: dict | None) -> list[str]:
    """One line per parameter whose value is above this device's limit: ``params`` maps names to
    objects with a ``value`` (Parameters) or to records."""
    limits = device_limits(device)
    if not limits:
        return []
    out = []
    for name, p in params.items():
        limit = limit_for(name, limits)
        value = p.get("value") if isinstance(p, dict) else getattr(p, "value", None)
        if limit is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value > limit["value"]:
            out.append(f"{name} = {value:.4g} {limit['unit']} is {value / limit['value']:.2f}x the theoretical "
                       f"limit {limit['value']:.4g} ({limit['formula']})")
    return out
