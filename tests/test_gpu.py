"""On a real GPU: the kernels are correct, the timing is sane, a short sweep fits. Skipped without one."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend():
    from calib.backends.cupy_backend import CupyBackend

    b = CupyBackend(device=0)
    yield b
    b.close()


def test_kernels_write_every_element(backend):
    from calib.calibrations import memory_bandwidth

    memory_bandwidth.verify_kernels(backend)  # raises on any unwritten or wrong element


def test_fingerprint_names_the_gpu(backend):
    device, software = backend.fingerprint()
    assert device["sm_count"] > 0 and device["memory_bytes"] > 2**30 and device["l2_bytes"] > 0
    assert not device["simulated"]
    assert software["cupy"] and software["cuda_runtime"]


def test_measurement_is_event_timed_and_tuned(backend):
    size = 8 * backend.l2_bytes
    [m] = backend.measure([{"calibration": "memory_bandwidth", "kind": "read", "width_bytes": 16, "size_bytes": size}])
    assert m.n >= backend.rule.min_samples and m.median_us > 0
    gbps = size / (m.median_us * 1e3)
    assert 10 < gbps < 20000  # a physical range, not a target: targets live in bench/
    assert set(m.protocol["perf_config"]) >= {"threads", "blocks_per_sm", "unroll", "layout"}


def test_oversized_point_fails_alone(backend):
    huge = {"calibration": "memory_bandwidth", "kind": "copy", "width_bytes": 16, "size_bytes": backend.memory_bytes}
    ok = {"calibration": "memory_bandwidth", "kind": "write", "width_bytes": 16, "size_bytes": 4 * backend.l2_bytes}
    from calib.backends.base import DeviceOutOfMemory

    out = backend.measure([huge, ok])
    assert isinstance(out[0], DeviceOutOfMemory) and "GiB" in str(out[0])
    assert out[1].median_us > 0


def test_short_sweep_fits_with_narrow_ci(backend, tmp_path):
    from calib.calibration import Calibration
    from calib.calibrations import memory_bandwidth as dram

    cal = Calibration("memory_bandwidth", backend="cupy", output_dir=tmp_path)
    configs = dram.plan("quick", l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes, kinds=["read"],
                        widths=[16])
    frame, report = cal.sweep(configs, progress=False)
    assert report.measured == len(configs)
    rec = dram.fit(frame).records["memory.dram.read_bandwidth_gbps"]
    assert rec["ci95"][0] < rec["value"] < rec["ci95"][1]
    assert np.isfinite(rec["value"])


@pytest.mark.parametrize("config", [
    {"calibration": "launch_latency", "kind": "overhead", "count": 32},
    {"calibration": "launch_latency", "kind": "latency", "spin_iters": 1000},
    {"calibration": "launch_latency", "kind": "graph", "count": 16},
    {"calibration": "matmul_splitk", "mn": 1 << 22, "splits": 4},
    {"calibration": "compute_throughput", "dtype": "fp32", "iters": 512, "threads": 132 * 2048, "ilp": 16},
    {"calibration": "cache_hierarchy", "working_set_bytes": 16 << 20, "passes": 64},
    {"calibration": "shared_memory", "iters": 1024, "threads": 132 * 2048, "access_bytes": 16},
    {"calibration": "matmul_throughput", "dtype": "fp16", "m": 2048, "n": 2048, "k": 2048},
    {"calibration": "reductions", "axis": "inner", "rows": 4096, "cols": 8192},
    {"calibration": "reductions", "axis": "outer", "rows": 4096, "cols": 8192},
    {"calibration": "occupancy", "blocks_per_sm": 2, "unroll": 4, "width_bytes": 16, "threads": 256, "sm_count": 132,
     "size_bytes": 1 << 30},
    {"calibration": "normalization_bandwidth", "width_bytes": 16, "rows": 16384, "cols": 4096},
], ids=["overhead", "latency", "graph", "splitk", "fma", "l2", "smem", "matmul-fp16", "inner", "outer", "occupancy",
        "softmax"])
def test_other_calibrations_measure(backend, config):
    [m] = backend.measure([config])
    assert not isinstance(m, Exception), m
    if config["calibration"] == "matmul_throughput":  # one burst of a fixed count, before the power cap
        from calib.calibrations import matmul_throughput

        assert m.n == matmul_throughput.SAMPLES and 0 < m.median_us < 1e6
        return
    assert m.n >= backend.rule.min_samples and 0 < m.median_us < 1e6


def test_register_report_grows_with_the_buffer(backend):
    report = backend.compile_report([4, 64, 128])
    regs = [r["registers"] for r in report]
    assert regs[0] < regs[1] < regs[2] <= 255


def test_prepare_compiles_every_planned_kernel_before_measuring(backend):
    """Compiling happens before a notebook takes the GPU; what prepare loads must be what the
    sweeps then use, so that no compile is left inside the measured section."""
    from calib import calibrations

    configs = [c for module in calibrations.timed()
               for c in module.plan("full", l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes,
                                    sm_count=backend.sm_count)]
    backend.prepare(configs)
    compiled = set(backend._modules)  # the test looks inside; the calibrations use backend.module()
    assert {"dram-read-16", "dram-copy-16", "dram-write-1", "small", "softmax"} <= compiled


def test_the_launch_sweep_is_measured_in_rounds_and_fits(backend):
    from calib import calibrations
    from calib.sweep import frame_from

    launch = calibrations.get("launch_latency")
    configs = launch.plan("quick")
    backend.prepare(configs)
    out = backend.measure(configs)
    assert not [m for m in out if isinstance(m, Exception)], out
    for c, m in zip(configs, out):
        if c["kind"] in launch.HOST_KINDS:
            assert m.protocol["interleaved"]["points"] == sum(k["kind"] in launch.HOST_KINDS for k in configs)
            assert m.protocol["timer"] == "host clock"
        else:
            assert "interleaved" not in m.protocol
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = calibrations.fit(launch.ID, frame_from(configs, out))
    for name in (launch.OVERHEAD, launch.LATENCY, launch.GRAPH_NODE):
        rec = result.records[name]
        assert 0 < rec["value"] < 1000 and rec["ci95"][0] <= rec["value"] <= rec["ci95"][1], (name, rec)
