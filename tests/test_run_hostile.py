"""`calib run` against a --profile it cannot write: refused before any notebook runs where that can
be known (a folder, a FIFO, a path under a file), and otherwise (another device's profile, one
holding a NaN record) a one-line error, exit 2, the run folder kept and the command that turns it
into a profile elsewhere, measuring nothing again."""

import json
import math
import os
import shlex

import pytest

from calib import cli, runner
from calib.backends.sim import SimBackend
from calib.calibration import write_fragment


def _no_notebooks(*args, **kwargs):
    raise AssertionError("a notebook ran although the --profile could never be written")


def _fake_notebooks(tasks, jobs, *, progress, signal_dir=None):
    """Every notebook 'runs' at once and leaves a fragment of the simulated device, as a real one would."""
    device, software = SimBackend().fingerprint()
    for nb, _source, _output, _params, cwd, _bar in tasks:
        write_fragment(os.path.join(cwd, f"fragment-{nb}.json"),
                       {"launch.overhead_us": {"value": 6.0, "ci95": [5.9, 6.1], "unit": "us", "n": 20}},
                       device=device, software=software, source=f"notebooks/{nb}.ipynb")
        yield nb, None, 0.0


def _run(tmp_path, profile, capsys):
    code = cli.main(["run", "--backend", "sim", "--notebook", "launch_latency", "--no-progress",
                     "--run-dir", str(tmp_path / "run"), "--profile", str(profile)])
    err = capsys.readouterr().err
    return code, err


def _unwritable_targets(tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    fifo = tmp_path / "a-fifo"
    os.mkfifo(fifo)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {"folder": folder, "fifo": fifo, "under-a-file": a_file / "p.json"}


@pytest.mark.parametrize("kind", ["folder", "fifo", "under-a-file"])
def test_a_profile_that_can_never_be_written_is_refused_before_any_notebook_runs(tmp_path, monkeypatch, capsys, kind):
    monkeypatch.setattr(runner, "_execute_all", _no_notebooks)
    target = _unwritable_targets(tmp_path)[kind]
    before = sorted(os.listdir(tmp_path))
    code, err = _run(tmp_path, target, capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(target) in err
    assert sorted(os.listdir(tmp_path)) == before  # nothing renamed aside, no run folder made
    if kind == "folder":
        assert (target / "keep.txt").read_text() == "mine"


def _other_device(tmp_path, fixture_path):
    path = tmp_path / "other.json"
    path.write_text(fixture_path("other_device.json").read_text())
    return path


def _nan_record(tmp_path, fixture_path):
    device, software = SimBackend().fingerprint()
    path = tmp_path / "nan.json"
    path.write_text(json.dumps({"schema": "calib.profile/1", "device": device, "software": software,
                                "params": {"memory.dram.read_bandwidth_gbps": {"value": math.nan, "unit": "GB/s"}}}))
    return path


@pytest.mark.parametrize("make", [_other_device, _nan_record], ids=["other-device", "nan-record"])
def test_a_profile_refused_after_the_notebooks_ran_keeps_the_run_and_says_how_to_merge_it(
        tmp_path, monkeypatch, capsys, fixture_path, make):
    monkeypatch.setattr(runner, "_execute_all", _fake_notebooks)
    profile = make(tmp_path, fixture_path)
    before = profile.read_bytes()
    code, err = _run(tmp_path, profile, capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert profile.read_bytes() == before  # the user's profile is left as it was
    assert (tmp_path / "run" / "launch_latency" / "fragment-launch_latency.json").is_file()
    assert f"kept in {(tmp_path / 'run').resolve()}" in err
    command = err.split("`")[1]
    assert command.startswith("calib run ") and "--profile OTHER.json" in command

    # the command it gives works: the same run folder, another profile
    argv = shlex.split(command.replace("OTHER.json", str(tmp_path / "elsewhere.json")))[1:]
    assert cli.main(argv + ["--no-progress"]) == 0
    assert "launch.overhead_us" in json.loads((tmp_path / "elsewhere.json").read_text())["params"]


def test_a_notebook_named_twice_runs_once(tmp_path, monkeypatch, capsys):
    """``--notebook X --notebook X`` started two processes of X at once, both writing its executed
    notebook, fragment and figures, and listed X twice in run.json."""
    ran = []

    def execute(tasks, jobs, *, progress, signal_dir=None):
        ran.extend(t[0] for t in tasks)
        yield from _fake_notebooks(tasks, jobs, progress=progress)

    monkeypatch.setattr(runner, "_execute_all", execute)
    assert cli.main(["run", "--backend", "sim", "--notebook", "launch_latency", "--notebook", "launch_latency",
                     "--no-progress", "--run-dir", str(tmp_path / "run"), "--profile", str(tmp_path / "p.json")]) == 0
    assert ran == ["launch_latency"]
    index = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [nb["calibration"] for nb in index["notebooks"]] == ["launch_latency"]


def test_an_unknown_notebook_is_refused_before_a_run_folder_is_made(tmp_path, monkeypatch, capsys):
    """The default run folder (a new one per run) was made, and left empty but for its id, before
    the name was checked."""
    monkeypatch.setattr(runner, "_execute_all", _no_notebooks)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(runner, "default_runs_dir", lambda: tmp_path / "runs")
    assert cli.main(["run", "--backend", "sim", "--notebook", "memory_bandwith", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no calibration 'memory_bandwith'" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_ctrl_c_while_the_run_writes_its_profile_is_one_line_and_exit_130(tmp_path):
    """Once every notebook had ended, nothing caught a Ctrl-C: the merge, index and report stopped
    with a KeyboardInterrupt traceback. In a process of its own: the signal goes to it alone."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import os, signal, sys, time
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from calib import cli, runner
        from test_run_hostile import _fake_notebooks

        def interrupted(*args):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)

        runner._execute_all = _fake_notebooks
        runner._link_sessions = interrupted
        sys.exit(cli.main(["run", "--backend", "sim", "--notebook", "launch_latency", "--no-progress",
                           "--run-dir", {str(tmp_path / "run")!r}, "--profile", {str(tmp_path / "p.json")!r}]))
    """)
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path)}
    env.pop("CALIB_DB_URL", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 130, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "stopped by SIGINT" in out.stderr, out.stderr[-2000:]
    assert f"--run-dir {(tmp_path / 'run').resolve()}" in out.stderr


def test_a_second_run_on_a_folder_in_use_is_refused_and_the_first_keeps_it(tmp_path, monkeypatch, capsys):
    """Two runs on one folder (a resume typed while the first still ran) had both written its
    notebooks, fragments and run.json, the second deleting the first's notebook signals. The folder
    is held by the run (another process's lock, here this test's) and freed when it ends."""
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    hold = ("import sys, filelock; l = filelock.FileLock(sys.argv[1]); l.acquire(); print('held', flush=True); "
            "sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(run_dir / runner.RUN_LOCK)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(runner, "_execute_all", _no_notebooks)
        code = cli.main(["run", "--backend", "sim", "--notebook", "launch_latency", "--no-progress",
                         "--run-dir", str(run_dir), "--profile", str(tmp_path / "p.json")])
        err = capsys.readouterr().err
        assert code == 2 and "is in use by another calib run" in err and "Traceback" not in err
        assert sorted(os.listdir(run_dir)) == [runner.RUN_LOCK]  # nothing of the first run's touched
    finally:
        holder.communicate("")
    monkeypatch.setattr(runner, "_execute_all", _fake_notebooks)
    code = cli.main(["run", "--backend", "sim", "--notebook", "launch_latency", "--no-progress",
                     "--run-dir", str(run_dir), "--profile", str(tmp_path / "p.json")])
    assert code == 0, capsys.readouterr().err
    from filelock import FileLock

    FileLock(str(run_dir / runner.RUN_LOCK), timeout=0).acquire()  # freed when the run ended
