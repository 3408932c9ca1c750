"""On a real GPU: launch_latency's host-timed points come back from one measure call, taken in
interleaved rounds, and its lines fit. Skipped without one."""

import warnings

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend():
    from calib.backends.cupy_backend import CupyBackend

    b = CupyBackend(device=0)
    yield b
    b.close()


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = calibrations.fit(launch.ID, frame_from(configs, out))
    for name in (launch.OVERHEAD, launch.LATENCY, launch.GRAPH_NODE):
        rec = result.records[name]
        assert 0 < rec["value"] < 1000 and rec["ci95"][0] <= rec["value"] <= rec["ci95"][1], (name, rec)
