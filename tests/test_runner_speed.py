"""What `calib run` keeps off the critical path of its notebooks (issue 13: the quick suite in 30 s):
each notebook's process imports what starting the notebook needs and nothing else, the fit imports
only the estimators it uses, and a notebook queued behind others imports its fit and plot stack
while it waits for the GPU."""

import json
import subprocess
import sys
import textwrap


def _imported(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_notebook_process_imports_neither_numpy_nor_sqlalchemy_before_its_kernel_starts():
    """`python -m calib.runner --one` is eleven processes at once beside eleven starting kernels:
    the module runs as __main__ there, without the run's own imports."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "calib.runner"], capture_output=True,
                         text=True, timeout=120)
    assert "usage: python -m calib.runner --one" in out.stderr
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "calib.phases" in imported and "calib.lifeline" in imported
    assert not {"numpy", "pandas", "sqlalchemy", "calib.calibration", "calib.store"} & imported


def test_the_run_itself_still_has_what_it_needs_when_imported():
    from calib import runner

    assert callable(runner.read_fragment) and callable(runner.default_url) and runner.TURN_WAIT_ENV


def test_a_fit_imports_the_estimators_and_not_statsmodels_api():
    imported = _imported(textwrap.dedent("""
        import json, sys
        import numpy as np
        from calib.fit import fit_linear_time
        x = np.array([1.0, 2, 4, 8, 16, 32])
        fit = fit_linear_time(x, 3.0 + 0.5 * x * (1 + 0.01 * np.sin(x)), n_samples=np.full(6, 20.0))
        robust = fit_linear_time(x, 3.0 + 0.5 * x * (1 + 0.01 * np.cos(x)), robust=True)
        assert abs(fit.slope_us - 0.5) < 0.05 and abs(robust.slope_us - 0.5) < 0.05
        print(json.dumps(sorted(sys.modules)))
    """))
    assert "statsmodels.regression.linear_model" in imported
    assert not {"statsmodels.api", "statsmodels.formula.api", "statsmodels.tsa.api"} & imported


def test_a_notebook_queued_behind_others_imports_its_fit_and_plot_stack_before_it_takes_the_gpu(tmp_path):
    """Calibration._take_gpu queues with the warm-up steps: with enough live waiters ahead
    (GpuQueue.MEANWHILE_AHEAD), every module of WARM_UP_MODULES is imported before the lock is
    taken."""
    code = textwrap.dedent(f"""
        import json, os, sys, threading, time
        from pathlib import Path
        from calib.calibration import MEASURED_SIGNAL_DIR_ENV, WARM_UP_MODULES, Calibration

        folder = Path({str(tmp_path / "signals")!r}); folder.mkdir()
        os.environ[MEASURED_SIGNAL_DIR_ENV] = str(folder)
        cal = Calibration("occupancy", backend="sim", output_dir={str(tmp_path / "out")!r},
                          db="sqlite:///{tmp_path / 'r.sqlite'}", progress=False)

        class Lock:
            held = False
            def acquire(self):
                self.held = True
                self.modules = [m for m in WARM_UP_MODULES if m in sys.modules]

        cal._gpu_lock = Lock()
        from calib.gpulock import GpuQueue
        for i in range(GpuQueue.MEANWHILE_AHEAD):  # longer tails, alive (this pid): they go first
            (folder / f"waiter{{i}}.queued").write_text(json.dumps({{"tail_s": 99.0 - i, "pid": os.getpid()}}))
        before = [m for m in WARM_UP_MODULES if m in sys.modules]

        def measured_in_turn():  # those ahead take the GPU once the steps are done (or after 60 s)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(m in sys.modules for m in WARM_UP_MODULES):
                time.sleep(0.05)
            for path in folder.glob("*.queued"):
                if path.stem != "occupancy":
                    path.unlink()

        threading.Thread(target=measured_in_turn, daemon=True).start()
        cal._take_gpu()
        print(json.dumps({{"before": before, "at_lock": cal._gpu_lock.modules, "held": cal._gpu_lock.held,
                          "left": sorted(p.name for p in folder.glob("*.queued"))}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    from calib.calibration import WARM_UP_MODULES

    assert "matplotlib.pyplot" not in got["before"] and "scipy.stats" not in got["before"]
    assert got["at_lock"] == list(WARM_UP_MODULES) and got["held"] and got["left"] == []


def test_the_runs_end_is_imported_once_the_host_timed_notebook_has_measured_not_before(tmp_path):
    code = textwrap.dedent(f"""
        import json, sys, time
        from pathlib import Path
        from calib import runner

        signals = Path({str(tmp_path)!r})
        seen = {{}}

        def fake(task, signal_dir, env):
            nb = task[0]
            if nb == "launch_latency":  # host-timed: measures first, on a quiet host
                seen[nb] = [m for m in runner.END_MODULES if m in sys.modules]
                (signal_dir / f"{{nb}}.measured").touch()
            else:
                (signal_dir / f"{{nb}}.ready").touch()
            return nb, None, 0.0

        runner._execute_in_process = fake
        tasks = [(nb, "in", "out", {{}}, ".", False) for nb in ("launch_latency", "occupancy", "registers")]
        before = [m for m in runner.END_MODULES if m in sys.modules]
        results = list(runner._execute_all(tasks, 3, progress=False, signal_dir=signals))
        print(json.dumps({{"before": before, "while_host_timed": seen["launch_latency"],
                          "after": [m for m in runner.END_MODULES if m in sys.modules],
                          "results": [r[0] for r in results]}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    from calib.runner import END_MODULES

    assert got["before"] == [] and got["while_host_timed"] == []
    assert got["after"] == list(END_MODULES) and got["results"] == ["launch_latency", "occupancy", "registers"]


def test_a_host_timed_notebook_without_turns_measures_before_the_runs_end_is_imported(tmp_path):
    """With no turns to wait for (the host-timed notebook alone, several jobs), nothing tells when it
    has measured: the run's end is imported after it, as before, not beside it."""
    code = textwrap.dedent(f"""
        import json, sys, time
        from pathlib import Path
        from calib import runner

        seen = []

        def fake(task, signal_dir, env):  # measures for 2 s, or until the run's end is imported beside it
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and not any(m in sys.modules for m in runner.END_MODULES):
                time.sleep(0.02)
            seen.append([m for m in runner.END_MODULES if m in sys.modules])
            return task[0], None, 0.0

        runner._execute_in_process = fake
        tasks = [("launch_latency", "in", "out", {{}}, ".", False)]
        results = list(runner._execute_all(tasks, 2, progress=False, signal_dir=Path({str(tmp_path)!r})))
        print(json.dumps({{"while_host_timed": seen[0], "results": [r[0] for r in results]}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["while_host_timed"] == [] and got["results"] == ["launch_latency"]


def test_a_notebook_process_hands_its_result_back_and_ends_without_the_interpreters_exit(tmp_path):
    """`python -m calib.runner --one` ends by os._exit once its result line is out (calib run waits
    for the process, and a normal exit took 0.3-0.5 s more): the line must still arrive whole,
    and the executed notebook be written."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from calib import runner

    nb = new_notebook(cells=[new_code_cell("x = 1", metadata={"tags": ["parameters"]}), new_code_cell("print(x + 1)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "in.ipynb")
    task = ("t", str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), {"x": 41}, str(tmp_path), False)
    name, error, wall_s = runner._execute_in_process(task, None)
    assert (name, error) == ("t", None) and wall_s > 0
    assert nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[-1].outputs[0]["text"] == "42\n"


def test_a_sweep_gives_the_gpu_back_before_it_reads_its_frames_from_the_store(tmp_path):
    """After its last point a notebook's sweep read the jobs and results through pandas (its first
    import: 0.4-1.1 s) with the GPU lock still held (0.29-0.50 s a notebook on the H200); now the
    next notebook measures meanwhile. The points are enqueued and every result written with the
    lock held: a run's notebooks share one session, and a sweep's worker measures every new job of
    its session, so points enqueued without the lock would be measured by the notebook holding it."""
    code = textwrap.dedent(f"""
        import json, sys
        from calib.calibration import Calibration

        cal = Calibration("occupancy", backend="sim", output_dir={str(tmp_path / "out")!r},
                          db="sqlite:///{tmp_path / 'r.sqlite'}", progress=False)

        class Lock:
            held = False
            def acquire(self):
                self.held = True
            def release(self):
                self.held = False

        cal._gpu_lock = Lock()
        seen = []
        for name in ("enqueue", "complete", "jobs_frame", "frame"):
            def spy(*a, _name=name, _orig=getattr(cal.store, name), **k):
                seen.append([_name, cal._gpu_lock.held, "pandas" in sys.modules])
                return _orig(*a, **k)
            setattr(cal.store, name, spy)
        data = cal.measure("quick")
        print(json.dumps({{"seen": seen, "rows": len(data), "held": cal._gpu_lock.held}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rows"] > 0 and not got["held"]
    calls = [name for name, _, _ in got["seen"]]
    assert calls[0] == "enqueue" and "complete" in calls and calls[-2:] == ["jobs_frame", "frame"], calls
    assert all(held == (name in ("enqueue", "complete")) for name, held, _ in got["seen"]), got["seen"]
    first_read = calls.index("jobs_frame")
    assert got["seen"][first_read][2] is False  # pandas was first imported after the GPU was given back


def test_the_runs_sessions_are_linked_to_its_profile_once_each(tmp_path, monkeypatch):
    from calib import runner
    from calib.store import Store, default_url

    store = Store(default_url(tmp_path / "results.sqlite"))
    device, software = {"name": "sim", "simulated": True}, {"calib": "0"}
    first, second = (store.open_session(label, device, software) for label in ("run:a", "run:b"))
    links = []
    original = Store.link_profile
    monkeypatch.setattr(Store, "link_profile", lambda self, sid, path: (links.append(sid), original(self, sid, path)))
    fragments = [{"session": {"id": first}}, {"session": {"id": first}}, {"session": {"id": second}}, {}]
    runner._link_sessions(fragments, tmp_path / "p.json", tmp_path)
    assert links == [first, second]
    rows = dict(store.engine.connect().exec_driver_sql("SELECT id, profile_path FROM session").all())
    assert rows == {first: str(tmp_path / "p.json"), second: str(tmp_path / "p.json")}
