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
