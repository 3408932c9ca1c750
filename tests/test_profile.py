"""The profile library: forgiving for heuristics, strict on request, atomic and lossless on write."""

import json
import math
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import calib
from calib.profile import (MissingParameterError, ParameterWarning, Profile, ProfileError, ProfileWarning,
                           load_profile, merge_into, read_profile, write_profile)

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "memory_bytes": 150754820096,
        "simulated": False}
H200_SW = {"driver": "580.159.04", "cuda_runtime": "13.2", "cupy": "14.2.0", "calib": "0.1.0"}
READ = "memory.dram.read_bandwidth_gbps"


def test_query_returns_measured_value_and_record(fixture_path):
    p = load_profile(fixture_path("good_h200.json"), device=H200, software=H200_SW)
    assert p.query(READ, 1300.0) == 4460.0
    rec = p.record(READ)
    assert rec.ci95 == (4451.0, 4469.0) and rec.unit == "GB/s" and rec.n == 8 and rec.method.startswith("WLS")


def test_missing_parameter_warns_once_and_returns_default(fixture_path):
    p = load_profile(fixture_path("good_h200.json"), device=H200, software=H200_SW)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert p.query("memory.dram.write_bandwidth_gbps", 1300.0) == 1300.0
        assert p.query("memory.dram.write_bandwidth_gbps", 1300.0) == 1300.0
    msgs = [str(w.message) for w in caught if issubclass(w.category, ParameterWarning)]
    assert len(msgs) == 1 and "memory.dram.write_bandwidth_gbps" in msgs[0] and "1300.0" in msgs[0]
    # a parameter calib measures that this profile lacks: the message says which calibration measures it
    assert "memory_bandwidth" in msgs[0]
    # a misspelt name: the close name is suggested
    with pytest.warns(ParameterWarning, match="did you mean 'memory.dram.read_bandwidth_gbps'"):
        assert p.query("memory.dram.read_bandwidht_gbps", 1300.0) == 1300.0


def test_strict_query_raises(fixture_path):
    p = load_profile(fixture_path("good_h200.json"), device=H200, software=H200_SW)
    with pytest.raises(MissingParameterError, match="no parameter 'compute.fp32.fma_tflops'"):
        p.query("compute.fp32.fma_tflops", 60.0, strict=True)


@pytest.mark.parametrize("name, expect", [
    ("truncated.json", r"not valid JSON \(the file looks truncated\)"),
    ("not_json.json", "not valid JSON"),
    ("wrong_type.json", "'params' must be an object"),
    ("future_schema.json", "schema version 7 is newer than this calib understands"),
])
def test_unreadable_profiles_give_clear_message_and_defaults(fixture_path, name, expect):
    path = fixture_path(name)
    with pytest.raises(ProfileError, match=expect):
        read_profile(path)
    with pytest.raises(ProfileError, match=expect):
        load_profile(path, device=H200, strict=True)
    with pytest.warns(ProfileWarning, match=expect):
        p = load_profile(path, device=H200)
    assert str(path) in p.unusable
    with pytest.warns(ParameterWarning, match=expect):
        assert p.query(READ, 1300.0) == 1300.0


def test_nan_and_wrong_typed_values_cost_only_themselves(fixture_path):
    p = load_profile(fixture_path("nan_value.json"), device=H200, software=None)
    with pytest.warns(ParameterWarning, match="'value' is nan, not a finite number"):
        assert p.query(READ, 1300.0) == 1300.0
    with pytest.warns(ParameterWarning, match="'value' must be a number, got str"):
        assert p.query("memory.dram.write_bandwidth_gbps", 1200.0) == 1200.0
    assert p.query("memory.dram.copy_bandwidth_gbps", 1.0) == 4300.0
    with pytest.raises(ProfileError, match="nan"):
        p.record(READ)


def test_other_device_profile_is_refused_with_the_differing_fields(fixture_path):
    with pytest.warns(ProfileWarning, match=r"another device \(name: 'NVIDIA A100-SXM4-80GB' -> 'NVIDIA H200'"):
        p = load_profile(fixture_path("other_device.json"), device=H200, software=H200_SW)
    with pytest.warns(ParameterWarning):
        assert p.query(READ, 4000.0) == 4000.0
    with pytest.raises(ProfileError, match="another device"):
        load_profile(fixture_path("other_device.json"), device=H200, strict=True)
    with pytest.warns(ProfileWarning):
        foreign = load_profile(fixture_path("other_device.json"), device=H200, allow_foreign=True)
    assert foreign.query(READ, 4000.0) == 1780.0


def test_soft_differences_warn_and_name_the_fields(fixture_path):
    newer = {**H200_SW, "driver": "590.1", "cupy": "14.3.0"}
    changed = r"other software \(driver: '580.159.04' -> '590.1'; cupy: '14.2.0' -> '14.3.0'\)"
    with pytest.warns(ProfileWarning, match=changed):
        p = load_profile(fixture_path("good_h200.json"), device=H200, software=newer)
    assert p.query(READ, 1.0) == 4460.0  # soft: still used


def test_hand_written_flat_file_migrates_forward(fixture_path):
    p = read_profile(fixture_path("hand_written_v0.json"))
    assert p.query(READ, 1.0) == 4400
    assert p.query("matmul.splitk.use_atomics", False) is True
    assert p.record("normalization.additional_registers").method == "entered by hand"


def test_lookup_order_explicit_env_user_shipped_empty(tmp_path, monkeypatch, fixture_path):
    from calib.profile import candidate_paths, user_profiles_dir

    user = user_profiles_dir() / "nvidia-h200.json"
    write_profile(user, read_profile(fixture_path("good_h200.json")))
    env = tmp_path / "env.json"
    doc = json.loads(fixture_path("good_h200.json").read_text())
    doc["params"][READ]["value"] = 1111.0
    env.write_text(json.dumps(doc))
    explicit = tmp_path / "explicit.json"
    doc["params"][READ]["value"] = 2222.0
    explicit.write_text(json.dumps(doc))

    origins = [o for o, _ in candidate_paths(explicit, H200)]
    assert origins == ["explicit", "user", "shipped"]
    assert load_profile(explicit, device=H200, software=H200_SW).query(READ, 0.0) == 2222.0
    monkeypatch.setenv("CALIB_PROFILE", str(env))
    assert load_profile(device=H200, software=H200_SW).query(READ, 0.0) == 1111.0
    monkeypatch.delenv("CALIB_PROFILE")
    assert load_profile(device=H200, software=H200_SW).origin == "user"
    user.unlink()
    p = load_profile(device={**H200, "name": "NVIDIA B999"}, software=None)
    assert p.origin == "empty"
    with pytest.warns(ParameterWarning, match="no parameter"):
        assert p.query(READ, 1300.0) == 1300.0


def test_shipped_profile_warns_that_it_is_not_this_machine(tmp_path, monkeypatch, fixture_path):
    from calib import profile as profile_mod

    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "nvidia-h200.json").write_text(fixture_path("good_h200.json").read_text())
    monkeypatch.setattr(profile_mod, "shipped_profiles_dir", lambda: shipped)
    with pytest.warns(ProfileWarning, match="shipped with calib"):
        p = load_profile(device=H200, software=H200_SW)
    assert p.origin == "shipped" and p.query(READ, 0.0) == 4460.0


def test_missing_explicit_path_is_an_error_only_in_strict_mode(tmp_path):
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(tmp_path / "nope.json", device=None, strict=True)
    with pytest.warns(ProfileWarning, match="does not exist"):
        p = load_profile(tmp_path / "nope.json", device=None)
    assert p.origin == "empty"


def test_module_level_query_uses_the_lookup(tmp_path, monkeypatch, fixture_path):
    monkeypatch.setenv("CALIB_PROFILE", str(fixture_path("good_h200.json")))
    monkeypatch.setattr("calib.fingerprint.detect_current", lambda index=0: None)
    calib.reset()
    assert calib.query(READ, 1.0) == 4460.0
    assert calib.record(READ).unit == "GB/s"


def test_write_refuses_what_read_would_refuse(tmp_path):
    with pytest.raises(ProfileError, match="finite"):
        write_profile(tmp_path / "p.json", Profile({READ: {"value": math.inf}}))
    assert not (tmp_path / "p.json").exists()


def test_merge_keeps_other_parameters_and_refuses_another_device(tmp_path):
    path = tmp_path / "p.json"
    merge_into(path, {READ: {"value": 1.0}}, device=H200, software=H200_SW)
    merge_into(path, {"launch.latency_us": {"value": 2.0}}, device=H200, software=H200_SW)
    p = read_profile(path)
    assert set(p.names()) == {READ, "launch.latency_us"}
    a100 = {**H200, "name": "NVIDIA A100", "compute_capability": "8.0"}
    with pytest.raises(ProfileError, match="belongs to another device"):
        merge_into(path, {READ: {"value": 9.0}}, device=a100, software=H200_SW)
    assert read_profile(path).query(READ, 0.0) == 1.0


def test_merge_moves_a_corrupt_profile_aside(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{ half a profile")
    with pytest.warns(ProfileWarning, match="moved it to"):
        merge_into(path, {READ: {"value": 1.0}}, device=H200, software=H200_SW)
    assert read_profile(path).query(READ, 0.0) == 1.0
    assert len(list(tmp_path.glob("p.json.corrupt-*"))) == 1


WRITER = textwrap.dedent("""
    import os, sys, time
    from calib.profile import merge_into
    real_replace = os.replace
    def stuck_replace(src, dst):
        open(sys.argv[2], "w").write(src)   # tell the test the temporary file is complete
        time.sleep(600)                     # ... and be killed here, before the rename
    os.replace = stuck_replace
    merge_into(sys.argv[1], {"memory.dram.read_bandwidth_gbps": {"value": 9999.0}},
               device={"name": "NVIDIA H200"}, software={})
""")


def test_writer_killed_mid_write_leaves_old_profile_intact(tmp_path):
    path = tmp_path / "p.json"
    merge_into(path, {READ: {"value": 4460.0}}, device={"name": "NVIDIA H200"}, software={})
    before = path.read_bytes()
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(ready)])
    try:
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "writer never reached the rename"
        tmp_file = Path(ready.read_text())
        assert tmp_file.exists() and b"9999" in tmp_file.read_bytes()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert path.read_bytes() == before
    assert read_profile(path).query(READ, 0.0) == 4460.0
    # the lock died with the writer: the next writer gets through
    merge_into(path, {"launch.latency_us": {"value": 5.0}}, device={"name": "NVIDIA H200"}, software={})
    assert set(read_profile(path).names()) == {READ, "launch.latency_us"}


MERGER = textwrap.dedent("""
    import sys
    from calib.profile import merge_into
    path, worker = sys.argv[1], int(sys.argv[2])
    for k in range(6):
        merge_into(path, {f"test.worker{worker}.param{k}_count": {"value": worker * 100 + k}},
                   device={"name": "NVIDIA H200"}, software={})
""")


def test_concurrent_mergers_lose_no_parameter(tmp_path):
    path = tmp_path / "p.json"
    procs = [subprocess.Popen([sys.executable, "-c", MERGER, str(path), str(w)]) for w in range(8)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    p = read_profile(path)
    assert len(p) == 48
    assert p.query("test.worker7.param5_count", 0) == 705


# ----------------------------------------------------------------------------------------------
# validation at load, a fast query path


def test_records_are_validated_once_at_load_and_a_broken_one_is_reported_when_queried(fixture_path, monkeypatch):
    path = fixture_path("nan_value.json")
    p = read_profile(path)
    calls = []
    real = calib.Parameter.from_record.__func__
    monkeypatch.setattr(calib.Parameter, "from_record",
                        classmethod(lambda cls, name, rec: calls.append(name) or real(cls, name, rec)))
    for _ in range(3):
        assert p.query("memory.dram.copy_bandwidth_gbps", 1.0) == 4300.0
    assert calls == []  # no validation at query time
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert p.query(READ, 1300.0) == 1300.0
    msgs = [str(w.message) for w in caught if issubclass(w.category, ParameterWarning)]
    assert len(msgs) == 1 and "'value' is nan" in msgs[0] and READ in msgs[0] and "1300.0" in msgs[0]
    for _ in range(2):  # record() raises the named error every time, not only the first
        with pytest.raises(ProfileError, match=rf"parameter '{READ}': 'value' is nan"):
            p.record(READ)
    with pytest.raises(ProfileError, match="'value' must be a number"):
        p.query("memory.dram.write_bandwidth_gbps", 1.0, strict=True)
    report = p.parameters()
    assert isinstance(report[READ], ProfileError) and report["memory.dram.copy_bandwidth_gbps"].value == 4300.0


def test_missing_name_warning_names_the_file_and_points_at_the_caller(fixture_path):
    path = fixture_path("good_h200.json")
    p = read_profile(path)
    with pytest.warns(ParameterWarning) as caught:
        p.query("launch.latency_us", 7.5)
    assert str(path) in str(caught[0].message) and "no parameter 'launch.latency_us'" in str(caught[0].message)
    assert caught[0].filename == __file__


def test_module_level_query_warns_at_the_callers_line(monkeypatch, fixture_path):
    monkeypatch.setenv("CALIB_PROFILE", str(fixture_path("good_h200.json")))
    monkeypatch.setattr("calib.fingerprint.detect_current", lambda index=0: None)
    calib.reset()
    assert calib.query(READ, 1.0) == 4460.0  # the first call loads the profile
    with pytest.warns(ParameterWarning, match="no parameter 'launch.latency_us'") as caught:
        assert calib.query("launch.latency_us", 7.5) == 7.5
    assert caught[0].filename == __file__
    with pytest.raises(MissingParameterError):
        calib.query("launch.latency_us", 7.5, strict=True)
    calib.reset()
    monkeypatch.delenv("CALIB_PROFILE")
    monkeypatch.setattr("calib.profile.shipped_profiles_dir", lambda: fixture_path("good_h200.json").parent / "none")
    with pytest.warns(ParameterWarning, match="no parameter"):  # after reset the lookup runs again: now empty
        assert calib.query(READ, 1.0) == 1.0


def test_query_never_raises_for_odd_names(fixture_path):
    p = read_profile(fixture_path("good_h200.json"))
    with pytest.warns(ParameterWarning, match="parameter names are strings"):
        assert p.query(["not", "hashable"], 3.0) == 3.0
    with pytest.warns(ParameterWarning, match="not NoneType"):
        assert p.query(None, 4.0) == 4.0
    with pytest.raises(ProfileError, match="parameter names are strings"):
        p.query(None, 4.0, strict=True)


def test_unusable_set_after_load_hides_every_value_until_cleared(fixture_path):
    p = read_profile(fixture_path("good_h200.json"))
    p.unusable = "measured on another device"
    with pytest.warns(ParameterWarning, match="another device"):
        assert p.query(READ, 1.0) == 1.0
    with pytest.raises(ProfileError, match="another device"):
        p.record(READ)
    p.unusable = None
    assert p.query(READ, 1.0) == 4460.0


def test_params_are_read_only_so_what_was_validated_is_what_is_served(fixture_path):
    p = read_profile(fixture_path("good_h200.json"))
    with pytest.raises(TypeError):
        p.params[READ] = {"value": 1.0}
    assert json.loads(json.dumps(p.to_document()))["params"][READ]["value"] == 4460.0


def test_parameter_is_an_immutable_value(fixture_path):
    import copy
    import pickle

    rec = read_profile(fixture_path("good_h200.json")).record(READ)
    with pytest.raises(AttributeError):
        rec.value = 1.0
    assert pickle.loads(pickle.dumps(rec)) == rec == copy.copy(rec)
    assert rec != calib.Parameter(READ, 1.0) and hash(rec) == hash(copy.deepcopy(rec))
    assert repr(rec).startswith(f"Parameter(name='{READ}', value=4460.0, ci95=(4451.0, 4469.0)")
    assert calib.Parameter("x", 1.0).diagnostics == {} and calib.Parameter("x", 1.0).flags == ()


def test_load_without_a_device_does_not_detect_the_gpu(monkeypatch, fixture_path):
    def detect(index=0):
        raise AssertionError("no detection was asked for")

    monkeypatch.setattr("calib.fingerprint.detect_current", detect)
    assert load_profile(fixture_path("good_h200.json"), device=None).query(READ, 1.0) == 4460.0


@pytest.mark.parametrize("xdg", ["/somewhere/data", "/somewhere/data/", "", "relative/data", None])
def test_user_folder_is_what_platformdirs_says(monkeypatch, xdg):
    import platformdirs

    from calib.profile import user_profiles_dir

    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    assert user_profiles_dir() == Path(platformdirs.user_data_dir("calib")) / "profiles"
