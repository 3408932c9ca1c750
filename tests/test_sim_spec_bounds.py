"""Simulated-device specs an outside checker would write: a device smaller or stranger than the
H200-like default. An implausible one is refused in one line; a plausible one plants values that
follow its own device (its L2), and a calibration on it says on the terminal which parameters its
sweeps could not fit, not only in run.json."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calib.backends.sim import DEFAULT_DEVICE, SimSpecError, load_spec
from calib.calibrations import cache_hierarchy as ch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("spec, why", [
    ({"device": {"memory_bytes": 1024}}, "need at least 64 MiB"),
    ({"device": {"l2_bytes": 1}}, "an L2 of at least 1 MiB"),
    ({"device": {"l2_bytes": 2**31, "memory_bytes": 2**30}}, "smaller than the device's memory"),
    ({"noise": {"rel_sd": 50}}, "rel_sd must be at most 1.0"),
    ({"params": {"memory.dram.read_bandwidth_gbps": 1e300}}, "outside what any GPU's profile holds"),
    ({"params": {"memory.dram.read_bandwidth_gbps": 1e-300}}, "outside what any GPU's profile holds"),
    ({"device": {"l2_bytes": 4 * 2**20}, "params": {ch.CAPACITY: 40e6}}, "more than the device's L2"),
    ({"device": {"l2_bytes": 4 * 2**20}, "params": {ch.CAPACITY: 3e6, ch.RAMP_END: 2e6}}, "must exceed"),
    # past these a run failed every notebook (sm_count, the name) or lost its profile at the end
    ({"device": {"max_sm_mhz": 1e300}}, r"device.max_sm_mhz is 1e\+300: more than any GPU has"),
    ({"device": {"sm_count": 10**40}}, "sm_count is an integer of 41 digits: more than any GPU has"),
    ({"pace_s": 1e300}, "at most 60 seconds a point"),
    ({"noise": {"outlier_scale": 1e308}}, "outlier_scale must be at most 1000"),
    ({"name": "\ud800"}, "is not UTF-8 text"),
    ({"name": "x" * 200}, "200 characters long; at most 106"),
])
def test_an_implausible_spec_is_refused_by_name(spec, why):
    with pytest.raises(SimSpecError, match=why):
        load_spec(spec)


@pytest.mark.parametrize("text, why", [
    ('{"noise": {"seed": %s}}' % ("1" * 5000), "Exceeds the limit"),  # a ValueError traceback
    ('{"device": {"sm_count": 10, "sm_count": 132}}', 'key "sm_count" appears twice'),  # the second, in silence
    ('{"noise": {"rel_sd": NaN}}', "NaN is not a number JSON allows"),
])
def test_a_spec_file_json_reads_loosely_is_refused_by_name(tmp_path, text, why):
    spec = tmp_path / "spec.json"
    spec.write_text(text)
    with pytest.raises(SimSpecError, match=f"spec {spec} is not valid JSON: {why}"):
        load_spec(spec)


def test_a_spec_file_with_a_byte_order_mark_is_read(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_bytes(b"\xef\xbb\xbf" + json.dumps({"device": {"sm_count": 20}}).encode())
    assert load_spec(spec)["device"]["sm_count"] == 20


def test_the_planted_l2_follows_the_specs_l2_where_the_spec_plants_none():
    default = load_spec(None)["params"]
    small = load_spec({"device": {"l2_bytes": 4 * 2**20}})["params"]
    scale = 4 * 2**20 / DEFAULT_DEVICE["l2_bytes"]
    for name in (ch.CAPACITY, ch.RAMP_END):
        assert small[name] == pytest.approx(default[name] * scale)
    assert small[ch.CAPACITY] <= 4 * 2**20
    given = load_spec({"device": {"l2_bytes": 4 * 2**20}, "params": {ch.CAPACITY: 3e6}})["params"]
    assert given[ch.CAPACITY] == 3e6 and given[ch.RAMP_END] == pytest.approx(default[ch.RAMP_END] * scale)


def test_a_device_too_small_for_some_sweeps_says_which_parameters_were_not_fitted(tmp_path):
    """256 MiB of memory: several sweeps lose every point. The run still makes a profile of what it
    could fit (exit 0), lists each missing parameter with its reason on the terminal, and no notebook
    fails (the reductions fit had raised KeyError on a frame with no points)."""
    proc = subprocess.run([sys.executable, "-m", "calib", "run", "--backend", "sim", "--sim-spec",
                           str(FIXTURES / "tiny_memory_gpu.json"), "--profile", str(tmp_path / "p.json"),
                           "--run-dir", str(tmp_path / "run"), "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "FAILED" not in proc.stderr
    listed = proc.stdout.split("NOT FITTED (")[1].split("\n\n")[0].splitlines()[1:]
    names = {line.split(":")[0].strip() for line in listed}
    assert {"reduction.inner.bandwidth_gbps", "memory.bytes_in_flight_per_sm"} <= names
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    recorded = {n for nb in run["notebooks"] for n in nb.get("not_fitted", {})}
    assert names == recorded
    profile = json.loads((tmp_path / "p.json").read_text())["params"]
    assert not names & set(profile)


@pytest.mark.parametrize("other", [{"params": {"memory.dram.read_bandwidth_gbps": 3000.0}},
                                   {"device": {"sm_count": 100}}])
def test_a_run_folder_is_not_resumed_under_another_spec_or_device(other, tmp_path):
    """Resumed under another spec, the folder's measured points were reused in silence (the profile
    held the old spec's values); for another device every notebook failed on its own and the old
    run's index was rewritten as failed. Now it is one line before any notebook starts."""
    from calib.backends.sim import SimBackend
    from calib.runner import RunError, run

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    device, software = SimBackend().fingerprint()
    (run_dir / "profile.json").write_text(json.dumps({"schema": "calib.profile/1", "device": device,
                                                      "software": software, "params": {}}))
    spec = tmp_path / "other.json"
    spec.write_text(json.dumps(other))
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(RunError, match="was measured on another device"):
        run(backend="sim", sim_spec=spec, run_dir=run_dir, progress=False, echo=lambda *a: None)
    assert sorted(p.name for p in run_dir.iterdir()) == before
    # the same spec resumes: nothing refused before the notebooks
    same = SimBackend().fingerprint()[0]
    assert same["sim_spec_sha256"] == device["sim_spec_sha256"]


def test_a_run_stopped_before_its_profile_is_not_resumed_under_another_spec(tmp_path, monkeypatch):
    """Killed before it wrote profile.json, a run folder holds only its sweeps' session: resumed
    under another spec, its points were reused in silence (planted 1000 GB/s, the profile said
    4298). The session's device now stands for the folder's."""
    from calib import runner
    from calib.backends.sim import SimBackend
    from calib.store import Store, sqlite_url

    monkeypatch.delenv("CALIB_DB_URL", raising=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = Store(sqlite_url(run_dir / "results.sqlite"))
    store.open_session(runner._run_label(run_dir.resolve()), *SimBackend().fingerprint())
    store.engine.dispose()
    spec = tmp_path / "other.json"
    spec.write_text(json.dumps({"params": {"memory.dram.read_bandwidth_gbps": 1000.0}}))
    with pytest.raises(runner.RunError, match="was measured on another device .*sim_spec_sha256"):
        runner.run(backend="sim", sim_spec=spec, run_dir=run_dir, progress=False, echo=lambda *a: None)
    runner._refuse_other_device(run_dir, SimBackend().fingerprint()[0])  # the same spec resumes


def test_show_and_merge_name_a_file_nested_past_the_parser(tmp_path, capsys):
    from calib.cli import main

    deep = tmp_path / "fragment-deep.json"
    deep.write_text("[" * 100000)
    assert main(["show", str(deep)]) == 2
    assert main(["merge", str(deep), "--profile", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("too deeply") == 2 and "Traceback" not in err


def test_the_simulated_device_refuses_a_point_no_gpu_could_run():
    from calib.backends.base import UnsupportedConfig
    from calib.backends.sim import SimBackend

    ok = {"calibration": "memory_bandwidth", "kind": "read", "width_bytes": 16, "size_bytes": 2**24}
    out = SimBackend().measure([dict(ok, size_bytes=-5), dict(ok, size_bytes=0), dict(ok, size_bytes=True), ok])
    assert all(isinstance(r, UnsupportedConfig) and "size_bytes" in str(r) for r in out[:3])
    assert out[3].median_us > 0


def test_a_descriptor_nested_past_the_parser_is_a_descriptor_error():
    import functools

    from calib.keys import DescriptorError, canonical_json

    with pytest.raises(DescriptorError, match="nests deeper"):
        canonical_json({"x": functools.reduce(lambda a, _: [a], range(5000), 1)})


def test_a_run_folder_moved_elsewhere_resumes_without_measuring_again(tmp_path):
    import shutil
    import sqlite3

    from calib.runner import run

    first = tmp_path / "first"
    run(backend="sim", run_dir=first, notebooks=["launch_latency"], profile_path=tmp_path / "a.json",
        progress=False, echo=lambda *a: None)
    moved = tmp_path / "moved"
    shutil.move(str(first), str(moved))
    run(backend="sim", run_dir=moved, notebooks=["launch_latency"], profile_path=tmp_path / "b.json",
        progress=False, echo=lambda *a: None)
    db = sqlite3.connect(moved / "results.sqlite")
    assert db.execute("select count(*) from session").fetchone()[0] == 1
    assert db.execute("select count(*) from result").fetchone()[0] == db.execute(
        "select count(*) from job where state = 'completed'").fetchone()[0]  # no point measured twice
    a = json.loads((tmp_path / "a.json").read_text())["params"]
    b = json.loads((tmp_path / "b.json").read_text())["params"]
    assert {k: v["value"] for k, v in a.items()} == {k: v["value"] for k, v in b.items()}


def test_a_sweep_label_or_worker_under_another_spec_is_another_device(tmp_path):
    """A session of the simulated device is of its spec's content: reused under another spec, a
    sweep had resumed the old points and a worker had claimed the old spec's jobs. The same spec
    copied to another path is the same device."""
    from calib.backends.sim import SimBackend
    from calib.store import Store, StoreError, sqlite_url

    store = Store(sqlite_url(tmp_path / "r.sqlite"))
    base = SimBackend().fingerprint()
    sid = store.open_session("L", *base)
    spec = tmp_path / "other.json"
    spec.write_text(json.dumps({"params": {"memory.dram.read_bandwidth_gbps": 1000.0}}))
    other = SimBackend(spec).fingerprint()
    with pytest.raises(StoreError, match="another device .*sim_spec_sha256"):
        store.open_session("L", *other)
    assert store.sessions_for_device(other[0]) == [] and store.sessions_for_device(base[0]) == [sid]
    copy = tmp_path / "elsewhere" / "other.json"
    copy.parent.mkdir()
    copy.write_text(spec.read_text())
    moved = SimBackend(copy).fingerprint()
    assert moved[0]["sim_spec"] != other[0]["sim_spec"]
    assert store.open_session("M", *other) == store.open_session("M", *moved)
    assert store.open_session("L", *SimBackend(seed=7).fingerprint()) == sid  # a seed is a run's, not the device's
    store.engine.dispose()
