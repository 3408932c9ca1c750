"""The notebooks run headless in a real Jupyter kernel through papermill, on the simulated device,
and `calib run` turns them into a profile. Committed notebooks carry no outputs."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebooks_have_no_outputs_and_a_parameters_cell(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has committed outputs"
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), f"{path.name} has no parameters cell"


@pytest.mark.parametrize("saved_in_lab", [False, True], ids=["as-committed", "after-a-jupyterlab-save"])
def test_notebooks_are_what_the_generator_writes(tmp_path, monkeypatch, saved_in_lab):
    """tools/make_notebooks.py is the source of the notebooks: edits must go through it. What must
    match is what a notebook says: its cells' types, sources and tags, in order. Not what saving it
    from JupyterLab rewrites (kernelspec, language_info, cell ids, execution counts; outputs are
    checked above), so that opening and saving a notebook does not fail this test."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import make_notebooks
    finally:
        sys.path.pop(0)
    generated = tmp_path / "generated"
    generated.mkdir()
    monkeypatch.setattr(make_notebooks, "HERE", generated)
    make_notebooks.main()

    def content(path):
        nb = nbformat.read(path, as_version=4)
        return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]

    committed = {p.name: p for p in NOTEBOOKS}
    if saved_in_lab:  # what JupyterLab 4 writes when a notebook is opened, run and saved, outputs cleared
        saved = tmp_path / "saved"
        saved.mkdir()
        for name, path in committed.items():
            nb = nbformat.read(path, as_version=4)
            nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python",
                                         "name": "python3"}
            nb.metadata["language_info"] = {"codemirror_mode": {"name": "ipython", "version": 3},
                                            "file_extension": ".py", "mimetype": "text/x-python", "name": "python",
                                            "nbconvert_exporter": "python", "pygments_lexer": "ipython3",
                                            "version": "3.11.7"}
            for i, cell in enumerate(nb.cells):
                cell.id = f"{i:08x}-5e1f-4c2a-9d3b-{i:012x}"  # Lab gives every cell a fresh uuid
                if cell.cell_type == "markdown":
                    cell.metadata["jp-MarkdownHeadingCollapsed"] = True
            nbformat.validate(nb)
            nbformat.write(nb, saved / name)
            committed[name] = saved / name
        assert (saved / NOTEBOOKS[0].name).read_text() != NOTEBOOKS[0].read_text()  # the save did rewrite it
        edited = nbformat.read(NOTEBOOKS[0], as_version=4)  # ...while an edit of a cell is still caught
        edited.cells[-1].source += "\nprint('edited in Lab')"
        nbformat.write(edited, tmp_path / "edited.ipynb")
        assert content(tmp_path / "edited.ipynb") != content(generated / NOTEBOOKS[0].name)

    assert sorted(committed) == sorted(p.name for p in generated.glob("*.ipynb")), "notebooks/ and the generator differ"
    for name, path in committed.items():
        assert content(path) == content(generated / name), f"{name} differs from tools/make_notebooks.py's cells"


@pytest.mark.slow
def test_calib_run_on_the_simulated_device_end_to_end(sim_run, fixture_path):
    # the session's shared run (conftest.sim_run); this test resumes it in place at the end
    run_dir, profile, proc = sim_run.run_dir, sim_run.profile, sim_run.proc
    spec = fixture_path("small_slow_gpu.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first_line = proc.stdout.splitlines()[0]
    assert "SIMULATED" in first_line and ("no GPU found" in first_line or sim_run.backend == "sim")

    doc = json.loads(profile.read_text())
    assert doc["device"]["simulated"] is True and doc["schema"] == "calib.profile/1"
    rec = doc["params"]["memory.dram.read_bandwidth_gbps"]
    lo, hi = rec["ci95"]
    assert lo < rec["value"] < hi and rec["source"] == "notebooks/memory_bandwidth.ipynb"
    assert abs(rec["value"] / 310.0 - 1) < 0.1  # the spec's planted truth, within noise
    assert "memory.dram.fixed_cost_us" in doc["params"]
    for name, truth in {"launch.overhead_us": 12.0, "matmul.splitk.elements_reduced_per_second": 7.5e10,
                        "compute.fp32.fma_tflops": 4.8, "normalization.additional_registers": 22.0,
                        "memory.l2.read_bandwidth_gbps": 950.0, "memory.shared.bandwidth_gbps": 2900.0,
                        "compute.fp16.tensor_tflops": 65.0, "reduction.outer.bandwidth_gbps": 250.0}.items():
        assert abs(doc["params"][name]["value"] / truth - 1) < 0.15, name  # every notebook of the suite ran

    # two notebooks in flight: the other one started beside the host-timed one and got ready, but
    # measured nothing until the host-timed one had finished measuring
    def started(nb):
        stamp = pd.Timestamp(nbformat.read(run_dir / nb / f"{nb}.ipynb", as_version=4).metadata.papermill.start_time)
        return stamp.tz_convert(None) if stamp.tzinfo else stamp

    jobs = pd.DataFrame(sqlite3.connect(run_dir / "results.sqlite").execute(
        "select c.experiment, j.started_at, j.finished_at from job j join config c on c.id = j.config_id").fetchall(),
        columns=["experiment", "started", "finished"]).astype({"started": "datetime64[us]",
                                                                "finished": "datetime64[us]"})
    launch_jobs = jobs[jobs.experiment == "launch_latency"]
    assert len(launch_jobs) and (jobs[jobs.experiment != "launch_latency"].started >= launch_jobs.finished.max()).all()
    others = [p.stem for p in run_dir.glob("*/*.ipynb") if p.stem != "launch_latency"]
    beside = min(others, key=started)  # the notebook that was in flight with the host-timed one
    assert len(others) == 10 and started(beside) < launch_jobs.started.min()
    ready = pd.Timestamp((run_dir / ".measured" / f"{beside}.ready").stat().st_mtime, unit="s")
    assert ready <= launch_jobs.started.min()  # the host-timed notebook measured once the other was ready

    # every file the run wrote says it is simulated
    executed = nbformat.read(run_dir / "memory_bandwidth" / "memory_bandwidth.ipynb", as_version=4)
    text = "".join(str(o.get("text", "")) for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert text.index("SIMULATED DEVICE") < 200
    assert json.loads((run_dir / "memory_bandwidth" / "fragment-memory_bandwidth.json").read_text())["simulated"]
    assert json.loads((run_dir / "run.json").read_text())["simulated"] is True
    assert any(run_dir.glob("*/residuals-*.png"))
    assert (run_dir / "memory_bandwidth" / "memory_bandwidth.parquet").exists()
    assert pd.read_parquet(run_dir / "memory_bandwidth" / "memory_bandwidth.parquet")["simulated"].all()
    assert "SIMULATED" in proc.stdout.splitlines()[-1]

    # the same run folder again: nothing is re-measured
    again = subprocess.run([sys.executable, "-m", "calib", "run", "--backend", sim_run.backend, "--sim-spec", str(spec),
                            "--run-dir", str(run_dir),
                            "--profile", str(profile), "--no-progress", "--notebook", "memory_bandwidth",
                            "--jobs", "1"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    executed = nbformat.read(run_dir / "memory_bandwidth" / "memory_bandwidth.ipynb", as_version=4)
    text = "".join(str(o.get("text", "")) for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert "0 measured now" in text
    # the run folder still describes the whole run: its index, snapshot and report keep every calibration
    index = json.loads((run_dir / "run.json").read_text())
    assert len(index["notebooks"]) == 11 and "memory.dram.read_bandwidth_gbps" in index["parameters"]
    assert {"memory.dram.read_bandwidth_gbps", "launch.overhead_us"} <= set(
        json.loads((run_dir / "profile.json").read_text())["params"])
    assert "launch_latency" in (run_dir / "report.html").read_text()

    show = subprocess.run([sys.executable, "-m", "calib", "show", str(profile), "--no-device-check"],
                          capture_output=True, text=True, timeout=60)
    assert show.returncode == 0 and "SIMULATED" in show.stdout and "memory.dram.copy_bandwidth_gbps" in show.stdout
    query = subprocess.run([sys.executable, "-m", "calib", "query", "memory.dram.read_bandwidth_gbps", "--profile",
                            str(profile), "--no-device-check"], capture_output=True, text=True, timeout=60)
    assert query.returncode == 0 and float(query.stdout) == rec["value"]


@pytest.mark.slow
def test_a_failing_notebook_is_reported_and_nothing_is_written(tmp_path):
    profile = tmp_path / "profile.json"
    proc = subprocess.run([sys.executable, "-m", "calib", "run", "--backend", "sim", "--sim-spec",
                           str(tmp_path / "missing-spec.json"), "--run-dir", str(tmp_path / "run"), "--profile",
                           str(profile), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "missing-spec.json does not exist" in proc.stderr
    assert not profile.exists()


@pytest.mark.slow
def test_a_calibration_killed_half_way_resumes_without_remeasuring(tmp_path, quick_dram_points):
    import os
    import signal
    import sqlite3
    import time

    spec = tmp_path / "paced.json"
    spec.write_text(json.dumps({"pace_s": 0.02, "noise": {"seed": 11}}))
    run_dir = tmp_path / "run"

    def calib_run(run_dir, profile, **popen):
        cmd = [sys.executable, "-m", "calib", "run", "--backend", "sim", "--sim-spec", str(spec), "--run-dir",
               str(run_dir), "--profile", str(profile), "--no-progress", "--notebook", "memory_bandwidth"]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)

    def results():
        try:
            with sqlite3.connect(run_dir / "results.sqlite") as db:
                return db.execute("SELECT id, job_id FROM result ORDER BY id").fetchall()
        except sqlite3.Error:
            return []

    victim = calib_run(run_dir, tmp_path / "p1.json", start_new_session=True)  # its kernel is in its group
    deadline = time.time() + 240
    while len(results()) < 40 and time.time() < deadline and victim.poll() is None:
        time.sleep(0.1)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    before = results()
    assert 40 <= len(before) < quick_dram_points, f"{len(before)} results when killed"
    assert not (tmp_path / "p1.json").exists()

    resumed = calib_run(run_dir, tmp_path / "p1.json")
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read()[-3000:]
    after = results()
    assert after[: len(before)] == before  # the completed points were kept, not measured again
    assert len(after) == quick_dram_points and len({job for _, job in after}) == quick_dram_points

    straight = calib_run(tmp_path / "run2", tmp_path / "p2.json")
    assert straight.wait(timeout=600) == 0
    p1 = json.loads((tmp_path / "p1.json").read_text())["params"]
    p2 = json.loads((tmp_path / "p2.json").read_text())["params"]
    assert set(p1) == set(p2)
    for name in p1:
        (lo1, hi1), (lo2, hi2) = p1[name]["ci95"], p2[name]["ci95"]
        assert lo1 <= hi2 and lo2 <= hi1, f"{name}: {p1[name]['ci95']} and {p2[name]['ci95']} do not overlap"


class _FakeKernel:
    """A kernel manager as _start_kernel hands it to papermill; records how it was ended."""

    def __init__(self, log):
        self.log = log
        log.append(["started", self])

    async def shutdown_kernel(self, now=False, restart=False):
        self.log.append(["ended", self, now])


def test_a_kernel_that_dies_is_started_again_and_a_second_death_is_reported(monkeypatch):
    """Each attempt runs in a kernel of its own, started before papermill runs it and killed at
    once (now=True) after it, whatever the attempt's outcome."""
    import papermill

    from calib import runner

    calls, kernels = [], []
    monkeypatch.setattr(runner, "_start_kernel", lambda cwd: _FakeKernel(kernels))

    def dies_once(*args, **kwargs):
        calls.append(kwargs["km"])
        if len(calls) == 1:
            raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(papermill, "execute_notebook", dies_once)
    nb, error, _ = runner._execute_one("occupancy", "in.ipynb", "out.ipynb", {}, ".", False)
    assert (nb, error, len(calls)) == ("occupancy", None, 2)
    first, second = calls
    assert first is not second
    assert kernels == [["started", first], ["ended", first, True], ["started", second], ["ended", second, True]]

    def always_dies(*args, **kwargs):
        raise RuntimeError("Kernel died")

    monkeypatch.setattr(papermill, "execute_notebook", always_dies)
    assert runner._execute_one("occupancy", "in.ipynb", "out.ipynb", {}, ".", False)[1] == "RuntimeError: Kernel died"

    def never_starts(cwd):  # the kernel of the first attempt did not start: the second attempt starts one
        kernels.append(["failed"])
        return RuntimeError("no kernel spec python3") if len(kernels) == 1 else _FakeKernel(kernels)

    kernels.clear()
    monkeypatch.setattr(runner, "_start_kernel", never_starts)
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: None)
    assert runner._execute_one("occupancy", "in.ipynb", "out.ipynb", {}, ".", False)[1] is None
    assert [k[0] for k in kernels] == ["failed", "failed", "started", "ended"]


@pytest.mark.slow
def test_a_notebook_runs_in_the_kernel_started_for_it_which_is_gone_when_it_returns(tmp_path):
    """The real path: the kernel _start_kernel starts (in the notebook's folder, before papermill is
    imported) runs the cells, its outputs are in the executed notebook, and it is dead by the time
    _execute_one returns, though its notebook never asked it to exit."""
    import os
    import time

    from nbformat.v4 import new_code_cell, new_notebook

    from calib import runner
    from calib.lifeline import pid_alive

    nb = new_notebook(cells=[new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
                             new_code_cell("import os\nprint(os.getpid(), os.getcwd(), x)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source, output = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    folder = tmp_path / "cwd"
    folder.mkdir()
    name, error, wall_s = runner._execute_one("t", str(source), str(output), {"x": 7}, str(folder), False)
    assert (name, error) == ("t", None) and wall_s > 0
    pid, cwd, x = nbformat.read(output, as_version=4).cells[-1].outputs[0]["text"].split()
    assert (os.path.realpath(cwd), x) == (os.path.realpath(folder), "7") and int(pid) != os.getpid()
    deadline = time.monotonic() + 5  # killed: gone at once; reaped by its manager
    while pid_alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(int(pid))


# A write past the size limit fails as on a full disk (EFBIG for ENOSPC) once the file has grown to it,
# in this process and in its kernel, which inherits the limit; SIGXFSZ ignored, so that the write fails
# with an error rather than killing the process.
_UNDER_A_SIZE_LIMIT = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

def fill_the_disk(limit):
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
"""


@pytest.mark.slow
def test_an_executed_notebook_whose_save_fails_half_way_keeps_its_last_whole_save_and_names_it(tmp_path):
    """papermill saves the executed notebook as it runs (before and after each cell). Written in
    place, the save that met the full disk left a truncated file, no notebook at all, and the run
    said only "OSError: [Errno 27] File too large" and started the notebook again. Each save now
    replaces the file whole: it keeps the last save that succeeded (showing how far the notebook
    got), no temporary file is left, and the one attempt's error names the file and the reason."""
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
                             new_code_cell("print('measured', x)"),
                             new_code_cell("print('b' * 200_000)")])  # this cell's save outgrows the limit
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source, output = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    script = _UNDER_A_SIZE_LIMIT + f"""
import json
from calib import runner
fill_the_disk(64 * 1024)
print(json.dumps(runner._execute_one("t", {str(source)!r}, {str(output)!r}, {{"x": 7}}, {str(tmp_path)!r}, False)))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    saved = nbformat.read(output, as_version=4)  # whole: the save before the one that failed
    assert [o.get("text") for c in saved.cells for o in c.get("outputs", [])] == ["measured 7\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.ipynb", "out.ipynb"]
    name, error, _ = json.loads(proc.stdout.splitlines()[-1])
    assert error == f"cannot write {output}: File too large (it is unchanged)", error
    assert "starting it again" not in proc.stderr  # a second attempt meets the same full disk


def test_a_frame_whose_write_fails_half_way_leaves_the_old_parquet_whole_and_names_it(tmp_path):
    """A notebook's tidy frame (``Calibration.measure``) went to its parquet file in place: a disk
    that filled as it was written left a truncated file under its name, and the notebook's error
    ("[Errno 27] Error writing bytes to file") named none. The file is now replaced whole."""
    out, db = tmp_path / "out", tmp_path / "results.sqlite"
    path = out / "launch_latency.parquet"
    script = _UNDER_A_SIZE_LIMIT + f"""
from pathlib import Path
from calib.calibration import Calibration
cal = Calibration("launch_latency", backend="sim", output_dir={str(out)!r}, db="sqlite:///{db}", progress=False)
cal.measure("quick")
size, release = Path({str(path)!r}).stat().st_size, cal.release_gpu

def release_then_fill():  # measured again (nothing left to measure), the disk fills as the frame is written
    release()
    fill_the_disk(size // 2)

cal.release_gpu = release_then_fill
try:
    cal.measure("quick")
except Exception as exc:
    print(f"{{type(exc).__name__}}: {{exc}}")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_parquet(path)  # the first measure's file, whole
    assert len(frame) > 0 and frame["simulated"].all()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    assert proc.stdout.splitlines()[-1] == f"RunFolderError: cannot write {path}: File too large (it is unchanged)"


def test_a_figure_whose_write_fails_leaves_no_truncated_file_names_it_and_the_fragment_is_still_written(tmp_path):
    """A notebook's figures (``Calibration.save_figure``) went to their PNGs in place, before its
    fragment: a disk that filled as one was written left a truncated PNG under its name (shown
    broken by ``calib report``), and the bare OSError ended the notebook before ``write_fragment``,
    losing the fit's numbers. A figure is now replaced whole; a write that fails costs only that
    figure: one line names its file and the reason, and the notebook goes on to its fragment."""
    out, db = tmp_path / "out", tmp_path / "results.sqlite"
    script = _UNDER_A_SIZE_LIMIT + f"""
import json
from pathlib import Path
from calib.calibration import Calibration
out = Path({str(out)!r})
cal = Calibration("launch_latency", backend="sim", output_dir=out, db="sqlite:///{db}", progress=False)
data = cal.measure("quick")
result = cal.fit(data)
cal.show_figures(data, result)
pngs = sorted(out.glob("*.png"))
before = {{p.name: p.read_bytes() for p in pngs}}
pngs[0].unlink()  # a figure not saved before: nothing is written, not a truncated file
fill_the_disk(16 * 1024)  # the fragment (~4 kB) fits, no figure (~30-50 kB) does
cal.show_figures(data, result)
cal.write_fragment(result)
after = {{p.name: p.read_bytes() for p in sorted(out.glob("*.png"))}}
print(json.dumps([pngs[0].name, sorted(before), after == {{k: v for k, v in before.items() if k != pngs[0].name}}]))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    removed, names, others_unchanged = json.loads(proc.stdout.splitlines()[-1])
    assert len(names) == 6 and others_unchanged and not (out / removed).exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    notices = [line for line in proc.stderr.splitlines() if line.startswith("calib: figure ")]
    assert len(notices) == 6, proc.stderr
    for name in names:
        kept = "nothing was written" if name == removed else "it is unchanged"
        assert (f"calib: figure {name[:-4]} not saved: cannot write {out / name}: File too large ({kept}); "
                "the fit's numbers are not affected") in notices
    fragment = json.loads((out / "fragment-launch_latency.json").read_text())
    assert {"launch.overhead_us", "launch.latency_us", "launch.graph_node_us"} <= set(fragment["params"])


def test_a_fragment_whose_write_fails_keeps_the_old_one_whole_and_names_it(tmp_path):
    """``write_fragment`` replaced its file whole, but a write that failed (a full disk) reached the
    notebook as a bare "OSError: [Errno 27] File too large", naming no file. It is now a
    ProfileError (one line and exit 2 from the command line) that names the file and the reason."""
    path = tmp_path / "fragment-launch_latency.json"
    script = _UNDER_A_SIZE_LIMIT + f"""
from pathlib import Path
from calib.backends.sim import SimBackend
from calib.calibration import write_fragment
device, software = SimBackend().fingerprint()
record = {{"launch.overhead_us": {{"value": 3.0, "ci95": [2.9, 3.1], "unit": "us"}}}}
write_fragment({str(path)!r}, record, device=device, software=software, source="notebooks/launch_latency.ipynb")
fill_the_disk(Path({str(path)!r}).stat().st_size + 1024)
try:  # a long failure text: this fragment outgrows the limit
    write_fragment({str(path)!r}, record, device=device, software=software, source="notebooks/launch_latency.ipynb",
                   failures={{"launch.latency_us": "x" * 100_000}})
except Exception as exc:
    print(f"{{type(exc).__name__}}: {{exc}}")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == f"ProfileError: cannot write {path}: File too large (it is unchanged)"
    old = json.loads(path.read_text())  # the first fragment, whole
    assert set(old["params"]) == {"launch.overhead_us"} and old["failures"] == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_fragment_path_that_is_a_fifo_or_a_folder_is_refused_naming_it(tmp_path):
    """Not written through (a FIFO would block the notebook until something read it) nor replaced."""
    import os

    from calib.backends.sim import SimBackend
    from calib.calibration import write_fragment
    from calib.profile import ProfileError

    device, software = SimBackend().fingerprint()
    record = {"launch.overhead_us": {"value": 3.0, "ci95": [2.9, 3.1], "unit": "us"}}
    fifo, folder = tmp_path / "fragment-a.json", tmp_path / "fragment-b.json"
    os.mkfifo(fifo)
    folder.mkdir()
    for path, what in ((fifo, "a FIFO (named pipe)"), (folder, "a directory")):
        with pytest.raises(ProfileError) as err:
            write_fragment(path, record, device=device, software=software, source="s")
        assert str(err.value) == f"cannot write {path}: it is {what}, not a file"
    assert fifo.is_fifo() and folder.is_dir() and not list(folder.iterdir())


@pytest.mark.slow
def test_a_notebook_that_fails_does_not_stop_the_others_running_beside_it(tmp_path):
    """Two notebooks in flight, each in a process of its own: the one whose cell raises is
    reported by name with its error, and the other's parameters still reach the profile."""
    from calib.runner import run

    result = run(backend="sim", suite="quick", run_dir=tmp_path / "run", profile_path=tmp_path / "p.json",
                 notebooks=["memory_bandwidth", "launch_latency"], parameters={"sizes_mib": [-1]},
                 progress=False, jobs=2, echo=lambda text: None)
    assert result.failed == [("memory_bandwidth",
                              "ValueError: DRAM buffer sizes must be positive; got [-1048576] bytes")]
    profile = json.loads((tmp_path / "p.json").read_text())["params"]
    assert {"launch.overhead_us", "launch.latency_us", "launch.graph_node_us"} <= set(profile)
    assert not any(name.startswith("memory.dram") for name in profile)


def test_a_notebook_process_that_dies_is_a_failure_of_that_notebook_only(monkeypatch, tmp_path):
    from calib import runner

    crash = tmp_path / "crash"  # started in place of `python -m calib.runner --one ...`
    crash.write_text("#!/bin/sh\necho 'Segmentation fault' >&2\nexit 139\n")
    crash.chmod(0o755)
    monkeypatch.setattr(runner.sys, "executable", str(crash))
    nb, error, _ = runner._execute_in_process(("occupancy", "in.ipynb", "out.ipynb", {}, ".", False), None)
    assert nb == "occupancy" and error == "its process exited with status 139: Segmentation fault"


def test_an_unusable_spec_is_refused_once_before_any_notebook_starts(tmp_path, fixture_path):
    proc = subprocess.run([sys.executable, "-m", "calib", "run", "--backend", "sim", "--sim-spec",
                           str(fixture_path("ramp_ends_before_it_starts.json")), "--run-dir", str(tmp_path / "run"),
                           "--profile", str(tmp_path / "p.json"), "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "is not usable: memory.l2.capacity_bytes.ramp_end must exceed memory.l2.capacity_bytes" in proc.stderr
    assert not list((tmp_path / "run").glob("*.ipynb")) and not (tmp_path / "p.json").exists()
