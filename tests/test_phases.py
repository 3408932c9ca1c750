"""Where a notebook's time goes (calib.phases): the recorder, fragments with and without phases,
and the phases of a simulated `calib run` (the session's shared run, conftest.sim_run)."""

import json
import time

import pytest

from calib import cli, phases, runfolder
from calib.backends.sim import SimBackend
from calib.calibration import read_fragment, write_fragment
from calib.html_report import build_report
from calib.profile import ProfileError

RECORD = {"launch.overhead_us": {"value": 6.0, "ci95": [5.9, 6.1], "unit": "us", "n": 20}}


def _assert_ordered(spans, wall_s=None):
    """Spans that do not overlap, each non-negative, in the phases' order; within the wall time."""
    assert spans and spans[0][1] >= 0
    for (_, a0, a1), (_, b0, b1) in zip(spans, spans[1:]):
        assert a0 <= a1 <= b0 + 1e-3 <= b1 + 1e-3, spans
    group = {name: i for i, names in enumerate(phases.ORDER) for name in names}
    ranks = [group[name] for name, _, _ in spans]
    assert ranks == sorted(ranks), spans
    if wall_s is not None:
        assert spans[-1][2] <= wall_s + 0.01


def test_a_phase_inside_another_pauses_it_so_the_phases_never_overlap(monkeypatch):
    monkeypatch.setenv(phases.LAUNCHED_AT_ENV, repr(time.time() - 0.2))
    rec = phases.PhaseRecorder(imported_at=time.time() - 0.1)
    t0 = time.monotonic()
    with rec.phase("measure"):
        time.sleep(0.01)
        with rec.phase("compile"):
            time.sleep(0.02)
        with rec.phase("wait"):
            time.sleep(0.01)
        time.sleep(0.01)
    with rec.phase("fit"):
        pass
    with rec.phase("write"):
        doc = rec.document()  # inside the phase: the open write span is closed at the snapshot
    elapsed = time.monotonic() - t0
    _assert_ordered(doc["timeline"]["spans"])
    t = doc["timings_s"]
    assert list(t) == [p for p in phases.PHASES if p in t]
    assert {"start", "setup", "measure", "compile", "wait"} <= set(t)
    assert t["start"] == pytest.approx(0.1, abs=0.02) and t["compile"] >= 0.02 and t["measure"] >= 0.02
    assert sum(v for k, v in t.items() if k not in ("start", "setup")) <= elapsed + 0.01
    assert doc["timeline"]["origin"] == "launch"
    with pytest.raises(ValueError, match="unknown phase"):
        with rec.phase("lunch"):
            pass


def test_a_notebook_run_by_hand_has_no_start_phase(monkeypatch):
    monkeypatch.delenv(phases.LAUNCHED_AT_ENV, raising=False)
    doc = phases.PhaseRecorder(imported_at=time.time() - 0.05).document()
    assert "start" not in doc["timings_s"] and doc["timeline"] == {**doc["timeline"], "origin": "import",
                                                                     "launched_at": None}
    # a launch stamp that postdates this process (inherited from elsewhere) is not its launch
    monkeypatch.setenv(phases.LAUNCHED_AT_ENV, repr(time.time() + 100))
    assert "start" not in phases.PhaseRecorder(imported_at=time.time()).timings_s()


def _fragment(path, timings=None):
    device, software = SimBackend().fingerprint()
    write_fragment(path, RECORD, device=device, software=software, source="notebooks/launch_latency.ipynb",
                   timings=timings)
    return device, software


def test_fragments_keep_their_phases_and_bad_phases_are_refused_by_field(tmp_path, monkeypatch):
    monkeypatch.setenv(phases.LAUNCHED_AT_ENV, repr(time.time() - 1))
    rec = phases.PhaseRecorder(imported_at=time.time() - 0.5)
    with rec.phase("fit"):
        pass
    _fragment(tmp_path / "fragment-launch_latency.json", rec)
    doc = read_fragment(tmp_path / "fragment-launch_latency.json")
    assert doc["timings_s"]["start"] == pytest.approx(0.5, abs=0.05) and doc["timeline"]["spans"]
    for field, bad, says in (("timings_s", [1], "'timings_s' must be an object"),
                             ("timings_s", {"fit": -1}, "'timings_s'.fit must be a non-negative"),
                             ("timings_s", {"fit": True}, "'timings_s'.fit"),
                             ("timeline", {"spans": [["fit", 2, 1]]}, "'timeline'.spans"),
                             ("timeline", {"launched_at": "soon"}, "'timeline'.launched_at"),
                             ("timeline", {"setup_parts_s": {"store": -0.1}}, "'timeline'.setup_parts_s"),
                             ("timeline", {"setup_parts_s": [0.1]}, "'timeline'.setup_parts_s")):
        broken = {**json.loads((tmp_path / "fragment-launch_latency.json").read_text()), field: bad}
        (tmp_path / "bad.json").write_text(json.dumps(broken))
        with pytest.raises(ProfileError, match=f"bad.json: {says}".replace("(", r"\(").replace(")", r"\)")):
            read_fragment(tmp_path / "bad.json")


def test_a_fragment_without_phases_still_reads_merges_and_reports(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "launch_latency").mkdir(parents=True)
    frag_path = run_dir / "launch_latency" / "fragment-launch_latency.json"
    device, software = _fragment(frag_path)  # as written before phases were recorded
    doc = read_fragment(frag_path)
    assert "timings_s" not in doc and "timeline" not in doc
    assert phases.notebook_timing(doc, 12.0, run_started_at=0.0) == {}
    summary = {"notebooks": ["launch_latency"], "failed": [], "simulated": True, "wall_s": 13.0,
               "notebook_wall_s": {"launch_latency": 12.0}, "critical_path": None, "notebook_timing": {}}
    index = runfolder.write_index(run_dir, summary, {"launch_latency": doc}, device=device, software=software)
    nb = index["notebooks"][0]
    assert nb["wall_s"] == 12.0 and nb["timings_s"] is None and "notebook_timing" not in index
    table = phases.format_table(index["notebooks"], index["critical_path"])
    assert table.splitlines()[1].split() == ["launch_latency", "12.0"]  # its wall time, no phases
    assert "| launch_latency | 12.0 |" in phases.format_table(index["notebooks"], markdown=True)
    html = build_report(run_dir)
    assert 'id="phase-table"' in html and "<td>launch_latency</td><td>12.0</td>" in html
    assert cli.main(["merge", str(frag_path), "--profile", str(tmp_path / "merged.json")]) == 0
    assert "launch.overhead_us" in json.loads((tmp_path / "merged.json").read_text())["params"]


def test_the_critical_path_names_the_last_notebook_its_slot_and_what_held_the_gpu():
    timing = {
        "a": {"timings_s": {"measure": 5.0, "other": 1.0}, "started_s": 0.0, "finished_s": 8.0,
              "spans": [["measure", 2.0, 7.0]]},
        "b": {"timings_s": {"wait": 4.0, "measure": 2.0, "plot": 3.0}, "started_s": 8.1, "finished_s": 20.0,
              "spans": [["wait", 9.0, 13.0], ["measure", 13.0, 15.0], ["plot", 15.0, 18.0]]},
        "c": {"timings_s": {"measure": 4.0}, "started_s": 0.0, "finished_s": 14.0, "spans": [["measure", 8.5, 12.5]]},
    }
    path = phases.critical_path(timing)
    assert path["notebook"] == "b" and path["slot_after"] == "a" and path["waited_while"] == ["c"]
    assert path["longest_phase"] == ["wait", 4.0]
    text = phases.describe_critical_path(path)
    assert text.startswith("critical path: b finished last, 20.0 s into the run")
    assert "until a finished" in text and "4.0 s for its turn on the GPU while c measured" in text


@pytest.mark.slow
def test_a_simulated_run_says_where_each_notebooks_time_went(sim_run):
    """Every notebook of the shared run (test_notebooks may have resumed memory_bandwidth in place
    since: its entry is then that resume's) has its phases in run.json and its fragment: none
    negative, in order, and together no more than its wall time."""
    assert sim_run.proc.returncode == 0, sim_run.proc.stderr[-3000:]
    run_dir = sim_run.run_dir
    index = json.loads((run_dir / "run.json").read_text())
    assert len(index["notebooks"]) == 11
    for nb in index["notebooks"]:
        t, wall = nb["timings_s"], nb["wall_s"]
        assert set(t) <= set(phases.COLUMNS) and {"start", "setup", "measure", "fit", "write", "other"} <= set(t), nb
        assert all(v >= 0 for v in t.values()), nb
        assert sum(v for k, v in t.items() if k != "other") <= wall + 0.01, nb
        assert sum(t.values()) == pytest.approx(wall, abs=0.02)  # other: the rest of the wall time
        assert nb["finished_s"] == pytest.approx(nb["started_s"] + wall, abs=0.01)
        frag = read_fragment(run_dir / nb["fragment"])
        assert frag["timeline"]["origin"] == "launch"
        _assert_ordered(frag["timeline"]["spans"], wall)
        assert {k: v for k, v in t.items() if k != "other"} == frag["timings_s"]
    assert "plot" in index["notebooks"][0]["timings_s"] and "compile" in next(
        nb["timings_s"] for nb in index["notebooks"] if nb["calibration"] == "registers")
    # launch_latency measures first; a notebook in flight beside it waited for its turn
    assert any(nb["timings_s"].get("wait", 0) > 0 for nb in index["notebooks"] if nb["calibration"] != "launch_latency")
    assert index["critical_path"]["notebook"] in {nb["calibration"] for nb in index["notebooks"]}

    out = sim_run.proc.stdout
    head = next(line for line in out.splitlines() if line.startswith("notebook "))
    assert head.split() == ["notebook", "wall", *phases.COLUMNS]
    assert sum(1 for line in out.splitlines() if line.split()[:1] and line.split()[0] in
               {nb["calibration"] for nb in index["notebooks"]}) == 11
    assert "critical path: " in out and " finished last, " in out
    html = (run_dir / "report.html").read_text()
    assert 'id="phase-table"' in html and 'id="critical-path"' in html
    md = phases.format_table(index["notebooks"], index["critical_path"], markdown=True)  # as bench/ceilings.py
    assert md.startswith("| notebook | wall | start |") and md.count("\n| ") == 11  # the rows after the header


def test_a_notebooks_setup_is_recorded_in_parts_that_add_up_to_its_setup_phase(tmp_path, monkeypatch):
    """Every notebook's setup comes before the host-timed one may measure: its parts (imports,
    backend, fingerprint, store) say which of them a run waits for."""
    import calib
    from calib.calibration import Calibration

    monkeypatch.setattr(calib, "_IMPORTED_AT", time.time() - 0.3)  # as if calib was imported 0.3 s ago
    cal = Calibration("occupancy", backend="sim", output_dir=tmp_path, db=f"sqlite:///{tmp_path / 'r.sqlite'}",
                      progress=False)
    parts = cal.phases.document()["timeline"]["setup_parts_s"]
    assert list(parts) == ["imports", "backend", "fingerprint", "store"] and all(v >= 0 for v in parts.values())
    assert parts["imports"] >= 0.29
    assert sum(parts.values()) == pytest.approx(cal.phases.timings_s()["setup"], abs=0.02)
