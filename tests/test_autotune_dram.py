"""The DRAM launch shapes of `calib run` in the persistent autotune cache: a second process on the
same machine skips the launch-shape search. On the fake CuPy backend of test_tuning.py (the
simulated device does not run memory_bandwidth's tuner), given a device fingerprint."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_tuning import FakeGpu, _point, dram_on_fake_gpu  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent


class FingerprintedGpu(FakeGpu):
    def __init__(self, name="NVIDIA H200", driver="580.159.04"):
        super().__init__()
        self.name, self.driver = name, driver

    def fingerprint(self):
        return ({"name": self.name, "compute_capability": "9.0", "sm_count": self.sm_count, "simulated": False},
                {"calib": "0.1.0", "driver": self.driver, "cuda_runtime": "13.2", "cupy": "14.2.0"})


def _tuning_timings(gpu):
    return sum(1 for _, _, tuning in gpu.timed if tuning)


def test_a_second_run_skips_the_launch_shape_search(dram_on_fake_gpu, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("CALIB_DB_URL", f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    dram, broken = dram_on_fake_gpu
    first = FingerprintedGpu()
    m1 = [dram.measure(first, _point(kind, 4 * first.l2_bytes)) for kind in ("copy", "read")]
    assert _tuning_timings(first) > 20  # every shape of copy and of read, timed once
    second = FingerprintedGpu()  # a new process: fresh scratch, the same database
    m2 = [dram.measure(second, _point(kind, 4 * second.l2_bytes)) for kind in ("copy", "read")]
    assert _tuning_timings(second) == 0 and second.scratch(dram.ID).get("checks") is None
    assert [m.protocol["perf_config"] for m in m2] == [m.protocol["perf_config"] for m in m1]
    assert [m.protocol["tuned_on"] for m in m2] == [m.protocol["tuned_on"] for m in m1]
    assert all(m.candidates == [] for m in m2)  # nothing timed, nothing to file as tuning results

    other = FingerprintedGpu(name="NVIDIA A100-SXM4-80GB")  # another GPU: its own search
    dram.measure(other, _point("copy", 4 * other.l2_bytes))
    assert _tuning_timings(other) > 0
    upgraded = FingerprintedGpu(driver="590.1")  # stale under the default policy: tuned again
    dram.measure(upgraded, _point("copy", 4 * upgraded.l2_bytes))
    assert _tuning_timings(upgraded) > 0


def test_the_cache_can_be_switched_off(dram_on_fake_gpu, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("CALIB_DB_URL", f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    monkeypatch.setenv("CALIB_AUTOTUNE", "off")
    dram, _ = dram_on_fake_gpu
    for _ in range(2):
        gpu = FingerprintedGpu()
        dram.measure(gpu, _point("copy", 4 * gpu.l2_bytes))
        assert _tuning_timings(gpu) > 0
    assert not (tmp_path / "fleet.sqlite").exists()


SCRIPT = """
import sys, json, pytest
sys.path.insert(0, 'tests')
from test_autotune_dram import FingerprintedGpu, _point, _tuning_timings
from calib.calibrations import memory_bandwidth as dram
mp = pytest.MonkeyPatch()
import test_tuning
gen = test_tuning.dram_on_fake_gpu.__wrapped__(mp)
gpu = FingerprintedGpu()
m = dram.measure(gpu, _point('copy', 4 * gpu.l2_bytes))
print(json.dumps([_tuning_timings(gpu), m.protocol['perf_config']]))
"""


def test_a_second_process_does_no_launch_shape_timing(tmp_path):
    env = {**__import__("os").environ, "CALIB_DB_URL": f"sqlite:///{tmp_path / 'fleet.sqlite'}",
           "XDG_DATA_HOME": str(tmp_path)}
    outs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        outs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert outs[0][0] > 0 and outs[1][0] == 0 and outs[0][1] == outs[1][1]


@pytest.fixture(autouse=True)
def _no_user_db(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
