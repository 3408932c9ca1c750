import sys
from pathlib import Path

import pytest

# the shared bar check lives in a helper module: rewrite its asserts so that a failure shows the values
pytest.register_assert_rewrite("h200_recordings")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Every test gets its own user data folder and no CALIB_PROFILE from the environment, so no
    test reads or writes the developer's real profiles."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.delenv("CALIB_PROFILE", raising=False)
    import calib
    from calib import fingerprint

    calib.reset()
    fingerprint.detect_current.cache_clear()
    yield
    calib.reset()


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and CuPy; none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_cublaslt_state(monkeypatch):
    """calib.heuristics.cublaslt's process state (oracle, answer cache, warnings given, the library)
    empty for the test and restored after it: a split-K test must not see another's answers."""
    from calib.heuristics import cublaslt

    monkeypatch.setitem(cublaslt._state, "oracle", None)
    monkeypatch.setitem(cublaslt._state, "cache", {})
    monkeypatch.setitem(cublaslt._state, "warned", set())
    monkeypatch.setitem(cublaslt._state, "lt", None)


@pytest.fixture
def without_fp16_split1_correction(monkeypatch):
    """splitk's fp16 split-1 correction off: a test pinning what another of split-K's mechanisms
    changes (the fp32 choice, its reduction) replays as those numbers were measured, without it."""
    from calib.heuristics import splitk

    monkeypatch.setitem(splitk._fp16_split1, "doc", None)


@pytest.fixture
def before_the_fp32_forest(monkeypatch):
    """split-K as it was before its fp32 split-1 forest (2026-12-04): no forest, the margins of then
    (0.84, and 0.88 for 16-row outputs timed from cuBLAS's kernel). The tests that pin what each of
    split-K's earlier mechanisms did on the recordings (the cuBLASLt choice, the batched kernels, the
    serial chain, the margins' own folds) replay as those numbers were measured; the forest and the
    margins chosen with it are judged in tests/test_heuristics_splitk_fp32_recorded.py."""
    from calib.heuristics import splitk

    monkeypatch.setitem(splitk._fp32_recorded, "doc", None)
    monkeypatch.setitem(splitk._fp32_splits, "doc", None)
    monkeypatch.setattr(splitk.margins, "SPLIT_MARGIN", 0.84)
    monkeypatch.setattr(splitk.margins, "SPLIT_MARGIN_FROM_CHOICE", 0.88)


@pytest.fixture
def before_the_normalization_forest():
    """normalization as it was before its residual forest (2026-12-07, session 24): the corrected
    model and the strategy biases. The tests that pin what each earlier mechanism of the model did on
    the recordings (its terms, the biases, the live runs that chose with them) replay as those
    numbers were measured; the forest is judged in tests/test_heuristics_normalization_residual.py."""
    from calib.heuristics import normalization

    with normalization.use_residual(None):
        yield


# Session 12's fp32 split-1 forest (version 1: the shape alone, fitted on TRAINING), kept beside the
# live runs it made (seeds 55-63) so that those replay as they ran.
SESSION12_FP32_FOREST = (Path(__file__).resolve().parents[1] / "bench" / "results" / "2026-12-04-h200-heuristics-s12c4"
                         / "splitk_fp32_split1_recorded-session12.json.gz")


@pytest.fixture
def session12_splitk(monkeypatch):
    """split-K as it ran in session 12 (2026-12-04): its fp32 split-1 forest of the shape alone, no
    forest of the splits' times, the margins 0.90 and 0.86 chosen with it."""
    from calib.heuristics import splitk

    monkeypatch.setitem(splitk._fp32_recorded, "doc", splitk.load_fp32_recorded(SESSION12_FP32_FOREST))
    monkeypatch.setitem(splitk._fp32_splits, "doc", None)
    monkeypatch.setattr(splitk.margins, "SPLIT_MARGIN", 0.90)
    monkeypatch.setattr(splitk.margins, "SPLIT_MARGIN_FROM_CHOICE", 0.86)


@pytest.fixture
def fixture_path():
    return lambda name: FIXTURES / name


@pytest.fixture
def python_exe():
    return sys.executable


@pytest.fixture
def quick_dram_points():
    """Points of the quick DRAM sweep on the built-in simulated device: what `calib run` and
    `calib sweep` measure when told nothing else."""
    from calib.backends.sim import SimBackend
    from calib.calibrations import memory_bandwidth as dram

    sim = SimBackend()
    return len(dram.plan("quick", l2_bytes=sim.l2_bytes, memory_bytes=sim.memory_bytes))


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory):
    """One `calib run` of the whole quick suite on the simulated device (the small slow GPU spec),
    shared by the tests that read a run folder (the end-to-end run, the report, the browser test):
    a run costs over a minute on CI's two cores. `--backend auto` where there is no GPU, so that
    the fallback is tested too; `sim` on a GPU host. Tests that change the folder must say so."""
    import os
    import subprocess
    from types import SimpleNamespace

    from calib.backends import resolve_backend_name

    root = tmp_path_factory.mktemp("sim-run")
    run_dir, profile = root / "run", root / "profile.json"
    backend = "auto" if resolve_backend_name("auto", 0)[0] == "sim" else "sim"
    env = {**os.environ, "XDG_DATA_HOME": str(root / "xdg-data")}
    env.pop("CALIB_PROFILE", None)
    proc = subprocess.run([sys.executable, "-m", "calib", "run", "--backend", backend, "--sim-spec",
                           str(FIXTURES / "small_slow_gpu.json"), "--run-dir", str(run_dir), "--profile", str(profile),
                           "--no-progress", "--jobs", "2"], capture_output=True, text=True, timeout=600, env=env)
    return SimpleNamespace(run_dir=run_dir, profile=profile, proc=proc, backend=backend, env=env)


@pytest.fixture
def heuristic_layers_cleared():
    """No user heuristic or override from another test: each test starts from the built-ins."""
    from calib import heuristics

    heuristics.clear()
    yield
    heuristics.clear()


@pytest.fixture(scope="module")
def sim_prof():
    """The simulated device's profile as the heuristics read it (planted values with CIs)."""
    from calib.backends.sim import SimBackend
    from calib.heuristics.simdevice import sim_profile

    return sim_profile(SimBackend())


@pytest.fixture
def deadline():
    """Fail a test that blocks (a FIFO opened for reading waits for a writer for ever) rather than
    hang the suite: SIGALRM interrupts the blocked call after 10 s."""
    import signal

    if not hasattr(signal, "setitimer"):
        pytest.skip("needs SIGALRM")

    def alarm(signum, frame):
        raise TimeoutError("blocked for 10 s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 10)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)
