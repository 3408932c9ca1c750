"""Theoretical limits from the fingerprint (flagged at write, warned at load) and staleness on load:
a profile whose fingerprint differs from this machine's says which fields and suggests `calib verify`."""

import json
import math
import time
import warnings

import pytest

import calib
from calib import limits
from calib.profile import ProfileWarning, load_profile, merge_into, read_profile, write_profile

READ = "memory.dram.read_bandwidth_gbps"
FP32 = "compute.fp32.fma_tflops"
H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "memory_bytes": 150109880320,
        "simulated": False, "memory_bus_width_bits": 6016, "memory_clock_mhz": 3201, "max_sm_mhz": 1980,
        "power_limit_w": 700.0}
SW = {"driver": "580.159.04", "cuda_runtime": "13.2", "cupy": "14.2.0", "calib": "0.1.0"}


def _rec(value, unit="GB/s"):
    return {"value": value, "ci95": [value * 0.999, value * 1.001], "unit": unit, "n": 8, "flags": [],
            "diagnostics": {"r2": 0.9999}}


def test_limits_from_the_fingerprint_are_the_datasheet_numbers_of_an_h200():
    got = limits.device_limits(H200)
    assert got["dram_gbps"]["value"] == pytest.approx(6016 * 3201e6 * 2 / 8 / 1e9)  # 4814 GB/s
    assert got["dram_gbps"]["value"] == pytest.approx(4814, abs=1)
    assert got["fp32_tflops"]["value"] == pytest.approx(132 * 128 * 2 * 1980e6 / 1e12)  # 66.9 TFLOP/s
    assert "6016-bit bus" in got["dram_gbps"]["formula"]


def test_a_fingerprint_without_the_properties_has_no_limit_and_an_unknown_architecture_no_fp32_limit():
    assert limits.device_limits({"name": "x", "sm_count": 132}) == {}
    assert limits.device_limits(None) == {}
    assert "fp32_tflops" not in limits.device_limits({**H200, "compute_capability": "42.0"})
    assert limits.device_limits({**H200, "compute_capability": "8.0"})["fp32_tflops"]["value"] == pytest.approx(
        132 * 64 * 2 * 1980e6 / 1e12)  # an A100's SM has 64 FP32 lanes
    assert "dram_gbps" not in limits.device_limits({**H200, "memory_clock_mhz": True})


@pytest.mark.parametrize("field, value", [("max_sm_mhz", 1e300), ("memory_clock_mhz", 1e300),
                                          ("memory_clock_mhz", 5e-324)], ids=["fp32-inf", "dram-inf", "dram-zero"])
def test_a_limit_past_a_floats_range_is_no_limit_and_a_merge_still_writes_the_profile(tmp_path, field, value):
    """Each property finite, their product infinite (or 0): the infinite limit went into the records'
    diagnostics and the profile's strict dump ended ``calib merge`` in a ValueError."""
    device = {**H200, field: value}
    assert all(math.isfinite(v["value"]) and v["value"] > 0 for v in limits.device_limits(device).values())
    p = merge_into(tmp_path / "p.json", {READ: _rec(4000.0), FP32: _rec(60.0, "TFLOP/s")}, device=device, software=SW)
    assert read_profile(p.path).query(READ) == 4000.0


def test_the_simulated_device_records_what_the_limits_need_and_its_truth_is_below_them():
    from calib.backends.sim import SimBackend

    device, _ = SimBackend().fingerprint()
    lim = limits.device_limits(device)
    truth = SimBackend().truth
    assert truth[READ] < lim["dram_gbps"]["value"] and truth[FP32] < lim["fp32_tflops"]["value"]
    small = SimBackend({"device": {"sm_count": 10, "max_sm_mhz": 1000, "fp32_lanes_per_sm": 64}}).fingerprint()[0]
    assert limits.device_limits(small)["fp32_tflops"]["value"] == pytest.approx(10 * 64 * 2 * 1e9 / 1e12)


def test_a_value_above_the_limit_is_flagged_at_write_with_limit_and_ratio_in_its_diagnostics(tmp_path):
    path = tmp_path / "p.json"
    merge_into(path, {READ: _rec(6000.0), "memory.dram.copy_bandwidth_gbps": _rec(4300.0),
                      FP32: _rec(60.0, "TFLOP/s"), "launch.latency_us": _rec(12.0, "us")},
               device=H200, software=SW)
    doc = json.loads(path.read_text())["params"]
    over, under, fp32 = doc[READ], doc["memory.dram.copy_bandwidth_gbps"], doc[FP32]
    assert over["diagnostics"]["limit"] == pytest.approx(4814.304)
    assert over["diagnostics"]["ratio_to_limit"] == pytest.approx(6000 / 4814.304)
    assert any(f.startswith("above the theoretical limit") for f in over["flags"])
    assert over["diagnostics"]["r2"] == 0.9999  # the fit's diagnostics are kept
    assert under["diagnostics"]["ratio_to_limit"] == pytest.approx(4300 / 4814.304) and under["flags"] == []
    assert fp32["diagnostics"]["ratio_to_limit"] == pytest.approx(60 / 66.9, rel=1e-3) and fp32["flags"] == []
    assert "limit" not in doc["launch.latency_us"]["diagnostics"]  # no limit for a latency

    # idempotent: writing the same profile again does not repeat the flag
    write_profile(path, read_profile(path))
    again = json.loads(path.read_text())["params"][READ]
    assert sum(f.startswith("above the theoretical limit") for f in again["flags"]) == 1


def test_a_value_above_the_limit_is_warned_at_load_and_still_served(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema": "calib.profile/1", "device": H200, "software": SW,
                                "params": {READ: _rec(6000.0), FP32: _rec(80.0, "TFLOP/s")}}))
    with pytest.warns(ProfileWarning, match=r"above this device's theoretical limits: "
                                            r"memory.dram.read_bandwidth_gbps = 6000 GB/s is 1.25x") as rec:
        p = load_profile(path, device=H200, software=SW)
    text = " ".join(str(w.message) for w in rec)
    assert FP32 in text and "calib verify" in text
    assert p.query(READ, 1.0) == 6000.0


def test_the_limit_check_completes_an_old_fingerprint_with_this_machines_properties(tmp_path):
    """The shipped H200 profile records the bus width but not the memory clock: the loader takes the
    clock from this machine, which is the same device."""
    old = {k: v for k, v in H200.items() if k not in ("memory_clock_mhz", "power_limit_w")}
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema": "calib.profile/1", "device": old, "software": SW,
                                "params": {READ: _rec(6000.0)}}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_profile(path, device=None)
    assert not any("theoretical" in str(w.message) for w in caught)  # no clock known: nothing to compare
    with pytest.warns(ProfileWarning, match="theoretical limits"):
        load_profile(path, device=H200, software=SW)


def test_the_shipped_h200_profile_is_within_its_limits():
    from calib.resources import shipped_profiles_dir

    p = read_profile(shipped_profiles_dir() / "nvidia-h200.json")
    assert limits.exceeded(p.parameters(), {**H200, **p.device}) == []


def test_staleness_names_the_changed_settings_and_suggests_calib_verify(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema": "calib.profile/1", "device": H200, "software": SW,
                                "params": {READ: _rec(4700.0)}}))
    capped = {**H200, "power_limit_w": 500.0, "max_sm_mhz": 1755}
    newer = {**SW, "driver": "590.1"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = load_profile(path, device=capped, software=newer)
    stale = [str(w.message) for w in caught if "drifted" in str(w.message)]
    assert len(stale) == 1, "one warning per load, naming every changed field"
    assert "driver: '580.159.04' -> '590.1'" in stale[0]
    assert "max_sm_mhz: 1980 -> 1755" in stale[0] and "power_limit_w: 700.0 -> 500.0" in stale[0]
    assert "`calib verify`" in stale[0] and "`calib run`" in stale[0]
    assert p.query(READ, 1.0) == 4700.0  # settings, like software, do not make it another device

    # a reading that differs by rounding only is the same setting
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_profile(path, device={**H200, "power_limit_w": 700.4}, software=SW)
    assert not [w for w in caught if "drifted" in str(w.message)]


def test_another_device_suggests_calib_run(fixture_path):
    with pytest.warns(ProfileWarning, match=r"another device .*`calib run` measures this one"):
        load_profile(fixture_path("other_device.json"), device=H200, software=SW)


def test_staleness_warns_once_per_process_through_calib_query(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema": "calib.profile/1", "device": H200, "software": SW,
                                "params": {READ: _rec(4700.0)}}))
    monkeypatch.setenv("CALIB_PROFILE", str(path))
    monkeypatch.setattr("calib.fingerprint.detect_current",
                        lambda index=0: ({**H200, "power_limit_w": 450.0}, {**SW}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(1000):
            assert calib.query(READ, 1.0) == 4700.0
    assert len([w for w in caught if "power_limit_w" in str(w.message)]) == 1
    # the check is at load: a hit stays a dictionary lookup
    t0 = time.perf_counter()
    for _ in range(100_000):
        calib.query(READ, 1.0)
    assert (time.perf_counter() - t0) / 100_000 < 5e-6


def test_nvml_and_the_cuda_attribute_give_the_properties_the_limits_need():
    """The fingerprint's memory clock, bus width and power limit: NVML where it answers (each call on
    its own: an unsupported one is left out), else the CUDA attribute for the memory clock."""
    from types import SimpleNamespace

    from calib.backends.cupy_backend import _conditions
    from calib.fingerprint import _nvml_conditions

    class FakeNvml:
        NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 2

        def nvmlDeviceGetMaxClockInfo(self, handle, which):
            return {0: 1980, 2: 3201}[which]

        def nvmlDeviceGetMemoryBusWidth(self, handle):
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

        def nvmlDeviceGetEnforcedPowerLimit(self, handle):
            return 700000

    got = _nvml_conditions(FakeNvml(), object())
    assert got == {"max_sm_mhz": 1980, "memory_clock_mhz": 3201, "power_limit_w": 700.0}

    no_nvml = SimpleNamespace(clocks=SimpleNamespace(available=False), props={"memoryClockRate": 3201000},
                              index=0, cp=None)
    assert _conditions(no_nvml) == {"memory_clock_mhz": 3201}
    attribute = SimpleNamespace(clocks=SimpleNamespace(available=False), props={}, index=0,
                                cp=SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(
                                    deviceGetAttribute=lambda attr, dev: 3201000 if attr == 36 else 0))))
    assert _conditions(attribute) == {"memory_clock_mhz": 3201}
