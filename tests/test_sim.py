
import numpy as np
import pytest

from calib.backends.base import DeviceOutOfMemory, UnsupportedConfig
from calib.backends.sim import SimBackend, SimSpecError, load_spec
from calib.calibrations import memory_bandwidth as dram


def test_defaults_are_h200_like_and_documented():
    spec = load_spec(None)
    assert spec["params"]["memory.dram.read_bandwidth_gbps"] == 4300.0
    assert spec["params"]["memory.dram.read_bandwidth_gbps.align16"] == 4300.0
    assert spec["device"]["sm_count"] == 132 and spec["noise"]["seed"] == 0


def test_partial_spec_keeps_given_values_and_derates_the_rest(fixture_path):
    spec = load_spec(fixture_path("small_slow_gpu.json"))
    p = spec["params"]
    assert p["memory.dram.read_bandwidth_gbps.align1"] == 41.0
    assert p["memory.dram.read_bandwidth_gbps.align16"] == 310.0
    assert p["memory.dram.write_bandwidth_gbps.align2"] == pytest.approx(275.0 * 0.42)


@pytest.mark.parametrize("spec, message", [
    ({"params": {"memory.dram.read_bandwidth_gbps": -1}}, "must be a positive number"),
    ({"noise": {"outlier_rate": 0.7}}, "outlier_rate"),
    ({"params": {"memory.dram.read_bandwidth_gbps.align16": 5.0}}, "must equal"),
    ({"parms": {}}, "unknown keys"),
])
def test_bad_specs_are_refused_with_reasons(spec, message):
    with pytest.raises((SimSpecError, ValueError), match=message):
        load_spec(spec)


def test_unreadable_spec_file(tmp_path):
    bad = tmp_path / "spec.json"
    bad.write_text("{")
    with pytest.raises(SimSpecError, match="not valid JSON"):
        load_spec(bad)
    with pytest.raises(SimSpecError, match="cannot read"):
        load_spec(tmp_path / "missing.json")


def test_fingerprint_says_simulated():
    device, _ = SimBackend().fingerprint()
    assert device["simulated"] is True and "simulated" in device["name"]


def test_times_follow_the_model_the_fit_assumes():
    b = SimBackend({"noise": {"rel_sd": 0.0, "outlier_rate": 0.0}})
    configs = dram.plan("quick", l2_bytes=b.l2_bytes, memory_bytes=b.memory_bytes)
    out = b.measure(configs)
    expect = dram.true_time_us({k: [c[k] for c in configs] for k in configs[0]}, b.truth)
    assert np.allclose([m.median_us for m in out], expect)


def test_out_of_memory_and_unknown_experiments_fail_alone(fixture_path):
    b = SimBackend(fixture_path("tiny_memory_gpu.json"))
    big = {"calibration": "memory_bandwidth", "kind": "copy", "width_bytes": 16, "size_bytes": 2**30}
    ok = {"calibration": "memory_bandwidth", "kind": "read", "width_bytes": 16, "size_bytes": 2**24}
    out = b.measure([big, {"calibration": "gemm"}, ok])
    assert isinstance(out[0], DeviceOutOfMemory) and "GiB" in str(out[0])
    assert isinstance(out[1], UnsupportedConfig)
    assert out[2].median_us > 0 and out[2].simulated


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_every_planned_point_has_a_compiled_kernel_on_the_gpu(suite):
    """A plan point the CuPy backend has no kernel for fails only on a GPU, after the run has
    started; pin the plans to what the kernels are compiled for (an unroll of 2 once slipped in)."""
    from calib.calibrations import matmul_splitk as splitk, memory_bandwidth as dram, occupancy

    assert {c["unroll"] for c in occupancy.plan(suite)} <= set(dram.UNROLLS)
    assert all(c["mn"] % 4 == 0 for c in splitk.plan(suite, memory_bytes=2**37))


def test_data_sized_grids_cover_the_buffer_and_refuse_what_a_grid_cannot_hold():
    """The DRAM tuner's grids sized to the data (blocks_per_sm None) launch one block per
    threads × unroll elements, rounded up; a grid over 2^31 - 1 blocks is refused by name rather than
    failing inside the driver. Runs without a GPU: only the launch arithmetic."""
    from calib.calibrations import memory_bandwidth as dram

    data = {"threads": 128, "blocks_per_sm": None, "unroll": 1, "layout": "strided"}
    assert dram.grid_blocks(132, data, 2**26) == 2**19
    assert dram.grid_blocks(132, data, 2**26 + 1) == 2**19 + 1  # the last element gets a block
    assert dram.grid_blocks(132, {**data, "blocks_per_sm": 4}, 2**26) == 528
    with pytest.raises(UnsupportedConfig, match="at most 2147483647"):
        dram.grid_blocks(132, data, 2**40)
    for kind in ("read", "write", "copy"):
        configs = list(dram.perf_configs(kind))
        assert {c["threads"] for c in configs if c["blocks_per_sm"] is None} == {128, 256, 512}
        assert all(dram.kernel_name(kind, 16, c) for c in configs)
