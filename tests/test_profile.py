"""The profile library: forgiving for heuristics, strict on request, atomic and lossless on write."""

import json
import os
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
    doc["params"][READ] = {"value": 1111.0, "unit": "GB/s"}  # no CI: a value outside its own CI is refused
    env.write_text(json.dumps(doc))
    explicit = tmp_path / "explicit.json"
    doc["params"][READ] = {"value": 2222.0, "unit": "GB/s"}
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


def test_a_missing_explicit_path_stops_the_lookup_rather_than_serve_the_users_profile(
        tmp_path, monkeypatch, fixture_path, capsys):
    from calib import profile as profile_mod
    from calib.cli import main

    user = tmp_path / "xdg" / "calib" / "profiles"
    user.mkdir(parents=True)
    (user / "nvidia-h200.json").write_text(fixture_path("good_h200.json").read_text())
    monkeypatch.setattr(profile_mod, "user_profiles_dir", lambda: user)
    monkeypatch.setattr("calib.fingerprint.detect_current", lambda index=0: (H200, H200_SW))
    assert load_profile(device=H200, software=H200_SW).query(READ, 5.0) == 4460.0  # the user's, looked up
    missing = tmp_path / "typo.json"
    with pytest.warns(ProfileWarning, match="typo.json .* does not exist"):
        p = load_profile(missing, device=H200, software=H200_SW)
    assert p.origin == "empty" and p.query(READ, 5.0) == 5.0
    monkeypatch.setenv("CALIB_PROFILE", str(missing))
    with pytest.warns(ProfileWarning, match="does not exist"):
        assert load_profile(device=H200, software=H200_SW).query(READ, 5.0) == 5.0
    monkeypatch.delenv("CALIB_PROFILE")
    assert main(["show", str(missing)]) == 2 and main(["show", str(missing), "--json"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["query", READ, "--profile", str(missing), "--default", "5"]) == 0
    assert capsys.readouterr().out.strip() == "5.0"


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


def test_merge_into_a_profile_of_a_newer_calib_leaves_it_as_it_is(tmp_path):
    """A newer calib's profile is not corrupt: moved aside and replaced by this calib's older schema,
    it lost its place (and the records only that calib can carry) to a downgrade."""
    path = tmp_path / "p.json"
    text = json.dumps({"schema": "calib.profile/7", "device": H200, "params": {READ: {"value": 4400.0}}})
    path.write_text(text)
    with pytest.raises(ProfileError, match="newer than this calib.*left as it is"):
        merge_into(path, {READ: {"value": 1.0}}, device=H200, software=H200_SW)
    assert path.read_text() == text and not list(tmp_path.glob("p.json.corrupt-*"))


def test_a_parameter_written_twice_is_refused_and_a_merge_leaves_the_file(tmp_path):
    """JSON keeps the last of two equal keys without a word: a record pasted in twice served the
    value nobody checked, and a merge wrote that one back and lost the other."""
    path = tmp_path / "p.json"
    record = '{"value": %s, "unit": "GB/s"}'
    text = ('{"schema": "calib.profile/1", "device": %s, "params": {"%s": %s, "%s": %s, "launch.latency_us": '
            '{"value": 12.0, "unit": "us"}}}' % (json.dumps(H200), READ, record % 4400.0, READ, record % 1.0))
    path.write_text(text)
    p = read_profile(path)
    with pytest.warns(ParameterWarning, match="more than once"):
        assert p.query(READ, 7.0) == 7.0
    assert p.query("launch.latency_us", 0.0) == 12.0  # the rest is served
    with pytest.raises(ProfileError, match="more than once.*left as it is"):
        merge_into(path, {"launch.overhead_us": {"value": 5.0, "unit": "us"}}, device=H200, software=H200_SW)
    assert path.read_text() == text
    path.write_text('{"schema": "calib.profile/1", "device": {"name": "A", "name": "B"}, "params": {}}')
    with pytest.raises(ProfileError, match="'name' more than once"):
        read_profile(path)
    path.write_text('{"%s": 1.0, "%s": 2.0}' % (READ, READ))  # version 0, the flat map
    assert "more than once" in str(read_profile(path).parameters()[READ])


WRITER = textwrap.dedent("""
    import os, sys, time
    from calib.profile import merge_into
    real_replace = os.replace
    def stuck_replace(src, dst):
        with open(sys.argv[2] + ".part", "w") as fh:  # tell the test the temporary file is complete,
            fh.write(str(src))                         # whole: it polls for the name, which opening
        real_replace(sys.argv[2] + ".part", sys.argv[2])  # in place made visible before the text
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
    # the lock died with the writer: the next writer gets through, and removes what the dead one left
    merge_into(path, {"launch.latency_us": {"value": 5.0}}, device={"name": "NVIDIA H200"}, software={})
    assert set(read_profile(path).names()) == {READ, "launch.latency_us"}
    assert not tmp_file.exists() and not list(tmp_path.glob(".p.json.*.tmp"))


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


def test_a_huge_missing_name_gives_a_one_line_warning_not_a_copy_of_the_name(fixture_path):
    """A name built at run time (a bug in the caller) can be a megabyte long: the warning and the
    strict error stay short, and still show how the name starts."""
    p = read_profile(fixture_path("good_h200.json"))
    name = "memory." + "x" * 1_000_000
    with pytest.warns(ParameterWarning) as caught:
        assert p.query(name, 2.0) == 2.0
    message = str(caught[0].message)
    assert len(message) < 1000 and "'memory.xxx" in message and "using the default 2.0" in message
    with pytest.raises(MissingParameterError) as exc:
        p.record(name)
    assert len(str(exc.value)) < 1000


def test_record_of_a_name_whose_hash_fails_raises_profile_error_only(fixture_path):
    """``record`` promises ProfileError and nothing else where ``query`` would fall back."""
    class BadHash(str):
        def __hash__(self):
            raise RuntimeError("no hash")

    p = read_profile(fixture_path("good_h200.json"))
    with pytest.raises(ProfileError, match="cannot look up .*RuntimeError: no hash"):
        p.record(BadHash(READ))
    with pytest.warns(ParameterWarning, match="RuntimeError: no hash"):
        assert p.query(BadHash(READ), 5.0) == 5.0


def test_a_gpus_profile_on_a_machine_whose_gpu_cannot_be_identified_warns_and_serves(fixture_path, monkeypatch):
    """A heuristic developer may read an H200's profile on a laptop; it is served, but not silently
    as if it had been checked against this machine (it had only been noted). A check skipped on
    purpose (``device=None``, ``calib query --no-device-check``) says nothing."""
    monkeypatch.setattr("calib.fingerprint.detect_current", lambda index=0: None)
    with pytest.warns(ProfileWarning, match="measured on NVIDIA H200; this machine's GPU could not be identified"):
        p = load_profile(fixture_path("good_h200.json"))
    assert p.query(READ, 1.0) != 1.0 and not p.unusable
    assert any("could not be identified" in n for n in p.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        skipped = load_profile(fixture_path("good_h200.json"), device=None)
    assert skipped.query(READ, 1.0) == p.query(READ, 1.0) and not skipped.notes


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


# ----------------------------------------------------------------------------------------------
# bad input (issue 10): never crash, hang or lose data. tests/test_profile_fuzz.py throws a
# thousand malformed profiles at every route; these pin each class by an example.

def _lenient_and_strict(path, name=READ, default=1300.0):
    """What a heuristic gets from ``path`` (lenient, with the warnings) and that strict mode says
    so with a ProfileError and nothing else."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = load_profile(path, device=None).query(name, default)
    with pytest.raises(ProfileError):
        load_profile(path, device=None, strict=True).query(name, default, strict=True)
    return value, [str(w.message) for w in caught]


@pytest.mark.parametrize("name, expect", [
    ("not_utf8_unit.json", r"is not UTF-8 text: byte 0xb5 at offset \d+"),
    ("schema_minus_one.json", r"'schema' is 'calib.profile/-1': its version is not a whole number"),
])
def test_a_file_query_used_to_crash_on_is_refused_with_a_message(fixture_path, name, expect):
    # before: UnicodeDecodeError and KeyError escaped query's "never raises"
    path = fixture_path(name)
    with pytest.raises(ProfileError, match=expect):
        read_profile(path)
    value, messages = _lenient_and_strict(path)
    assert value == 1300.0 and messages and all(str(path) in m for m in messages)


def test_diagnostics_that_are_not_an_object_cost_only_their_record(fixture_path):
    # before: TypeError from dict() of a list of pairs that are not pairs, or of a string
    p = read_profile(fixture_path("diagnostics_not_an_object.json"))
    for name in (READ, "memory.dram.write_bandwidth_gbps"):
        with pytest.warns(ParameterWarning, match="'diagnostics' must be an object"):
            assert p.query(name, 1.0) == 1.0
    assert p.query("memory.dram.copy_bandwidth_gbps", 1.0) == 4300.0


@pytest.mark.parametrize("what, text", [
    ("deep nesting", '{"schema": "calib.profile/1", "params": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}"),
    ("nesting that parses but breaks repr later", '{"schema": "calib.profile/1", "params": {"%s": {"value": 1.0, '
     '"diagnostics": {"d": ' % READ + "[" * 900 + "]" * 900 + "}}}}"),
    ("an integer over 4,300 digits", '{"schema": "calib.profile/1", "params": {"%s": %s}}' % (READ, "7" * 5000)),
    ("an integer too large for a float", '{"schema": "calib.profile/1", "params": {"%s": %s}}' % (READ, "7" * 400)),
    ("a CI bound too large for a float", '{"schema": "calib.profile/1", "params": {"%s": {"value": 4460.0, '
     '"ci95": [1, %s], "unit": "GB/s"}}}' % (READ, "9" * 400)),
    ("a device field too large for a float", '{"schema": "calib.profile/1", "device": {"memory_bytes": %s}, '
     '"params": {"%s": 4460.0}}' % ("9" * 400, READ)),
    ("a schema version of 5,000 digits", '{"schema": "calib.profile/%s"}' % ("9" * 5000)),
    ("a schema version 0", '{"schema": "calib.profile/0", "params": {}}'),
    ("flags that are not strings", '{"schema": "calib.profile/1", "params": {"%s": {"value": 4460.0, '
     '"flags": [["x"]], "unit": "GB/s"}}}' % READ),
    ("n that is text", '{"schema": "calib.profile/1", "params": {"%s": {"value": 4460.0, "n": "8", '
     '"unit": "GB/s"}}}' % READ),
    ("a NUL in the unit", '{"schema": "calib.profile/1", "params": {"%s": {"value": 4460.0, '
     '"unit": "GB/s\\u0000"}}}' % READ),
])
def test_malformed_profiles_give_the_default_and_strict_a_profile_error(tmp_path, what, text):
    path = tmp_path / "p.json"
    path.write_text(text)
    value, messages = _lenient_and_strict(path, default=1300.0)
    assert value == 1300.0, what
    assert messages and all(str(path) in m for m in messages), messages
    # what a record keeps must stay printable and writable: the CLI prints it, writers dump it
    try:
        p = read_profile(path)
    except ProfileError:
        return
    for rec in p.parameters().values():
        repr(rec), str(rec)
    json.dumps(p.to_document())


def test_a_profile_in_a_folder_that_cannot_be_entered_is_refused_not_raised(tmp_path):
    # before: Path.exists() raised PermissionError (or OSError for a name too long) out of load_profile
    long_name = tmp_path / ("x" * 300 + ".json")
    value, messages = _lenient_and_strict(long_name)
    assert value == 1300.0 and all(str(long_name) in m for m in messages)
    under_a_file = tmp_path / "a_file"
    under_a_file.write_text("{}")
    value, messages = _lenient_and_strict(under_a_file / "p.json")  # ENOTDIR: does not exist
    assert value == 1300.0 and any("does not exist" in m for m in messages)


UNREADABLE_FOLDER = textwrap.dedent("""
    import os, sys, warnings
    warnings.simplefilter("ignore")
    import calib
    from calib.profile import ProfileError, load_profile, read_profile
    path = sys.argv[1]
    assert load_profile(path, device=None).query("memory.dram.read_bandwidth_gbps", 7.0) == 7.0
    for call in (lambda: read_profile(path), lambda: load_profile(path, device=None, strict=True)):
        try:
            call()
        except ProfileError as exc:
            assert "Permission denied" in str(exc), exc
        else:
            raise AssertionError("no ProfileError")
    os.environ["CALIB_PROFILE"] = path
    assert calib.query("memory.dram.read_bandwidth_gbps", 7.0) == 7.0
    del os.environ["CALIB_PROFILE"]
    os.environ["XDG_DATA_HOME"] = os.path.dirname(os.path.dirname(os.path.dirname(path)))
    calib.reset()
    assert calib.query("memory.dram.read_bandwidth_gbps", 7.0) == 7.0  # the user folder cannot be entered
    print("ok")
""")


def test_a_profile_that_cannot_be_opened_is_refused_on_every_route(tmp_path, monkeypatch, fixture_path):
    """Permission denied on the profile or a folder above it, as the file system says it to a user
    who may not enter: simulated by os.open, so that it runs as root too (root enters every folder;
    the next test checks real permissions where it can)."""
    folder = tmp_path / "xdg-data" / "calib" / "profiles"
    folder.mkdir(parents=True)
    profile = folder / "nvidia-h200.json"
    profile.write_text(fixture_path("good_h200.json").read_text())
    real_open = os.open

    def denied(path, *args, **kwargs):
        if str(path).startswith(str(folder)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    monkeypatch.setattr(Path, "exists", lambda self: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    value, messages = _lenient_and_strict(profile)
    assert value == 1300.0 and all("Permission denied" in m and str(profile) in m for m in messages)
    with pytest.warns(ProfileWarning, match="Permission denied"):  # the user folder: the lookup goes on
        assert load_profile(device=H200, software=None).origin == "shipped"
    monkeypatch.setenv("CALIB_PROFILE", str(profile))
    with pytest.warns(ProfileWarning, match="Permission denied"):
        assert calib.query(READ, 7.0) == 7.0
    with pytest.raises(ProfileError, match="Permission denied"):
        calib.record(READ)


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_a_profile_in_an_unreadable_folder_is_refused_for_a_user_who_cannot_enter_it(fixture_path):
    """Real permissions. Root enters every folder, so as root the check runs as the unprivileged
    user ``nobody``, where ``nobody`` can run this Python."""
    import shutil
    import tempfile

    run_as = {}
    if os.geteuid() == 0:
        run_as = {"user": 65534, "group": 65534, "extra_groups": []}
        try:
            subprocess.run([sys.executable, "-c", "import calib"], check=True, capture_output=True, timeout=60,
                           **run_as)
        except (OSError, subprocess.CalledProcessError):
            pytest.skip("running as root, and user nobody cannot run this Python (its folder is root's); the "
                        "previous test covers the same refusal with a simulated EACCES")
    base = Path(tempfile.mkdtemp(prefix="calib-unreadable-"))
    try:
        base.chmod(0o755)
        folder = base / "calib" / "profiles"
        folder.mkdir(parents=True)
        profile = folder / "nvidia-h200.json"
        profile.write_text(fixture_path("good_h200.json").read_text())
        folder.chmod(0o000)
        env = {k: v for k, v in os.environ.items() if k not in ("CALIB_PROFILE", "XDG_DATA_HOME")}
        env["HOME"] = str(base)
        out = subprocess.run([sys.executable, "-c", UNREADABLE_FOLDER, str(profile)], capture_output=True, text=True,
                             timeout=120, env=env, **run_as)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    finally:
        folder.chmod(0o755)
        shutil.rmtree(base)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_special_files_are_refused_without_reading_them(tmp_path, deadline, monkeypatch):
    # before: a FIFO blocked every route forever; /dev/zero was read until memory ran out
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(calib.profile.MAX_PROFILE_BYTES + 1)  # sparse: costs no disk
    cases = {fifo: "is a FIFO", Path("/dev/zero"): "is a character device", tmp_path: "is a directory",
             big: f"more than the {calib.profile.MAX_PROFILE_BYTES}"}
    for path, expect in cases.items():
        with pytest.raises(ProfileError, match=expect):
            read_profile(path)
        value, messages = _lenient_and_strict(path)
        assert value == 1300.0 and all(str(path) in m for m in messages)
    monkeypatch.setenv("CALIB_PROFILE", str(fifo))
    with pytest.warns(ProfileWarning, match="is a FIFO"):
        assert calib.query(READ, 1300.0) == 1300.0
    monkeypatch.delenv("CALIB_PROFILE")
    user = calib.profile.user_profiles_dir()
    user.mkdir(parents=True)
    os.mkfifo(user / "nvidia-h200.json")
    with pytest.warns(ProfileWarning, match="is a FIFO"):
        p = load_profile(device=H200, software=None)
    assert p.origin != "user"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_file_swapped_for_a_fifo_after_a_check_cannot_block_the_read(tmp_path, deadline, monkeypatch):
    """The type is taken from the opened descriptor: a path that was a file when looked at and is a
    FIFO when opened (a race, or a hostile swap) is refused, not waited on."""
    path = tmp_path / "p.json"
    os.mkfifo(path)
    monkeypatch.setattr(Path, "exists", lambda self: True)
    monkeypatch.setattr(Path, "is_file", lambda self: True)
    with pytest.raises(ProfileError, match="is a FIFO"):
        read_profile(path)


def test_implausible_values_are_refused_with_the_file_and_the_parameter(fixture_path):
    path = fixture_path("implausible_values.json")
    p = read_profile(path)
    refused = {
        READ: "the value is True, not a number of GB/s",
        "memory.dram.write_bandwidth_gbps": "is -4400.0 GB/s: a rate is positive",
        "memory.dram.copy_bandwidth_gbps": "is 0 GB/s: a rate is positive",
        "memory.dram.read_bandwidth_gbps.align1": "is 5e-324 GB/s, outside what any GPU can have",
        "memory.dram.read_bandwidth_gbps.align2": r"is 1e\+308 GB/s, outside what any GPU can have",
        "memory.dram.read_bandwidth_gbps.align4": r"4700.0 lies outside its own ci95 \[4615.0, 4629.0\]",
        "memory.dram.read_bandwidth_gbps.align8": r"'ci95' \[4669.0, 4659.0\] ends below where it starts",
        "memory.dram.read_bandwidth_gbps.align16": "its unit is 'MB/s', but calib measures it in 'GB/s'",
        "memory.dram.write_bandwidth_gbps.align8": "is 1e-300 GB/s, outside",  # no unit: the catalogue's
        "launch.latency_us": "is 0.0 us: a time is positive",
        "memory.l2.capacity_bytes": r"is 1e\+300 bytes, outside",
        "compute.fp32.fma_tflops": "is 61000000.0 TFLOP/s, outside",
        "matmul.splitk.elements_reduced_per_second": "is -1.0 elements/s: a rate is positive",
        "normalization.additional_registers": "is -3 count: a count is positive",
    }
    for name, expect in refused.items():
        with pytest.warns(ParameterWarning) as caught:
            assert p.query(name, "default") == "default"
        message = str(caught[0].message)
        assert str(path) in message and repr(name) in message, message
        assert __import__("re").search(expect, message), (name, message)
        with pytest.raises(ProfileError, match=expect):
            p.query(name, "default", strict=True)
    # good values pass, a value on its CI's end included; names calib does not measure keep the generic checks
    assert p.query("memory.dram.copy_bandwidth_gbps.align16", 0.0) == 4295.2
    assert p.query("normalization.max_persistent_elements_per_thread", 0.0) == 226.0
    assert p.query("my.own.offset", 0) == -5 and p.query("my.own.use_atomics", False) is True


def test_a_hand_written_bandwidth_of_true_is_refused_through_the_catalogue(tmp_path):
    path = tmp_path / "v0.json"
    path.write_text(json.dumps({READ: True, "launch.latency_us": -2, "normalization.additional_registers": 40,
                                "matmul.splitk.use_atomics": True}))
    p = read_profile(path)
    with pytest.warns(ParameterWarning, match="not a number of GB/s"):
        assert p.query(READ, 1300.0) == 1300.0
    with pytest.warns(ParameterWarning, match="a time is positive"):
        assert p.query("launch.latency_us", 5.0) == 5.0
    assert p.query("normalization.additional_registers", 0) == 40
    assert p.query("matmul.splitk.use_atomics", False) is True


def test_loading_a_profile_whose_records_state_their_units_does_not_import_the_catalogue(fixture_path):
    code = ("import sys, calib\nfrom calib.profile import read_profile\n"
            f"p = read_profile({str(fixture_path('good_h200.json'))!r})\n"
            "assert len(p.parameters()) == 2 and not any(isinstance(r, Exception) for r in p.parameters().values())\n"
            "print('calib.catalogue' in sys.modules, 'calib.calibrations' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_every_catalogue_unit_has_a_kind():
    from calib import catalogue
    from calib.profile import KINDS

    units = {info.unit for info in catalogue.parameters().values()}
    assert units <= set(KINDS), f"units without a kind in calib.profile.KINDS: {units - set(KINDS)}"
    for name in catalogue.parameters():
        assert catalogue.kind(name) is KINDS[catalogue.info(name).unit]
    assert catalogue.kind("my.own.parameter") is None


def test_the_shipped_profile_passes_every_check():
    shipped = Path(__file__).resolve().parent.parent / "profiles" / "nvidia-h200.json"
    faults = {n: str(r) for n, r in read_profile(shipped).parameters().items() if isinstance(r, ProfileError)}
    assert faults == {}


def test_every_per_parameter_warning_names_the_file(fixture_path):
    # before: "parameter 'X': 'value' is nan" without the file it came from
    path = fixture_path("nan_value.json")
    p = read_profile(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p.query(READ, 1.0)
        p.query("memory.dram.write_bandwidth_gbps", 1.0)
        p.query(None, 1.0)
    assert len(caught) == 3 and all(str(path) in str(w.message) for w in caught)
    with pytest.raises(ProfileError, match=str(path)):
        p.record(READ)
    # the report shows the file once, above the parameters: its per-parameter errors do not repeat it
    assert str(path) not in str(p.parameters()[READ])


def test_the_empty_profile_names_the_files_it_looked_for(tmp_path, monkeypatch):
    monkeypatch.setattr("calib.profile.shipped_profiles_dir", lambda: tmp_path / "shipped")
    p = load_profile(device=H200, software=None)
    assert p.origin == "empty"
    with pytest.warns(ParameterWarning) as caught:
        p.query(READ, 1.0)
    message = str(caught[0].message)
    assert str(calib.profile.user_profiles_dir() / "nvidia-h200.json") in message
    assert str(tmp_path / "shipped" / "nvidia-h200.json") in message


def test_warnings_from_the_first_calib_query_and_record_point_at_the_caller(monkeypatch, fixture_path):
    """The first call loads the profile; a broken one warns from inside that load, three or four
    frames down, and the warning must still point at the heuristic's line (before: calib/__init__.py)."""
    monkeypatch.setenv("CALIB_PROFILE", str(fixture_path("truncated.json")))
    monkeypatch.setattr("calib.fingerprint.detect_current", lambda index=0: None)
    for first_call in (lambda: calib.query(READ, 1.0), lambda: calib.record(READ)):
        calib.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                first_call()
            except ProfileError:
                pass
        assert caught and all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]
    monkeypatch.setenv("CALIB_PROFILE", str(fixture_path("nan_value.json")))
    calib.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calib.query(READ, 1.0)
        calib.query(READ, 1.0)
    assert caught and all(w.filename == __file__ for w in caught)
    assert len([w for w in caught if READ in str(w.message)]) == 1  # once per parameter, not per query
    with pytest.warns(ProfileWarning) as caught:
        load_profile(fixture_path("truncated.json"), device=None)
    assert caught[0].filename == __file__


# ----------------------------------------------------------------------------------------------
# writes that lose nothing (issue 10, item 5)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_writes_keep_the_mode_of_the_file_they_replace(tmp_path, umask_022):
    # before: every write left a 0600 file (mkstemp's), unreadable to the others sharing the profile
    path = tmp_path / "p.json"
    merge_into(path, {READ: {"value": 1.0}}, device=H200, software=H200_SW)
    assert path.stat().st_mode & 0o777 == 0o644  # a new file: 0666 less the umask, like any new file
    path.chmod(0o664)
    merge_into(path, {"launch.latency_us": {"value": 2.0}}, device=H200, software=H200_SW)
    assert path.stat().st_mode & 0o777 == 0o664
    path.chmod(0o640)
    write_profile(path, read_profile(path))
    assert path.stat().st_mode & 0o777 == 0o640


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_writes_go_through_a_symbolic_link_to_its_target(tmp_path):
    # before: the link was replaced by a plain file and the shared target never updated
    target = tmp_path / "shared" / "h200.json"
    merge_into(target, {READ: {"value": 1.0}}, device=H200, software=H200_SW)
    link = tmp_path / "p.json"
    link.symlink_to(target)
    merge_into(link, {"launch.latency_us": {"value": 2.0}}, device=H200, software=H200_SW)
    write_profile(link, read_profile(link))
    assert link.is_symlink() and set(read_profile(target).names()) == {READ, "launch.latency_us"}
    assert not list(tmp_path.glob("p.json.*")) and not list(tmp_path.glob(".p.json.*"))


def test_a_later_writer_removes_the_temporary_files_of_dead_writers(tmp_path):
    path = tmp_path / "p.json"
    merge_into(path, {READ: {"value": 1.0}}, device=H200, software=H200_SW)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = [tmp_path / f".p.json.{dead_pid}.0123abcd.tmp", tmp_path / ".p.json.k3j4h5_2.tmp"]  # the latter: mkstemp's
    live = tmp_path / f".p.json.{os.getppid()}.89abcdef.tmp"  # a live process's: maybe mid-write elsewhere
    other = tmp_path / ".q.json.123.tmp"  # another profile's
    for f in (*stale, live, other):
        f.write_text("{half")
    merge_into(path, {"launch.latency_us": {"value": 2.0}}, device=H200, software=H200_SW)
    assert not any(f.exists() for f in stale) and live.exists() and other.exists()


@pytest.mark.parametrize("replace", [False, True])
def test_merge_into_a_directory_is_refused_and_the_directory_kept(tmp_path, replace):
    # before: the user's directory was renamed to DIR.corrupt-<time>
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "mine.txt").write_text("keep me")
    with pytest.raises(ProfileError, match="is a directory"):
        merge_into(folder, {READ: {"value": 1.0}}, device=H200, software=H200_SW, replace=replace)
    with pytest.raises(ProfileError, match="is a directory"):
        write_profile(folder, Profile({READ: {"value": 1.0}}))
    assert (folder / "mine.txt").read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == [
        "profiles", "profiles.lock"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_merge_into_a_fifo_is_refused_without_blocking(tmp_path, deadline):
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    with pytest.raises(ProfileError, match="is a FIFO"):
        merge_into(fifo, {READ: {"value": 1.0}}, device=H200, software=H200_SW)
    assert fifo.is_fifo()


def test_corrupt_profiles_moved_aside_in_one_second_keep_both_backups(tmp_path, monkeypatch):
    monkeypatch.setattr("calib.profile.utc_now", lambda: "2026-12-01T12:00:00Z")
    path = tmp_path / "p.json"
    for text in ("{ first half", "{ second half"):
        path.write_text(text)
        with pytest.warns(ProfileWarning, match="moved it to"):
            merge_into(path, {READ: {"value": 1.0}}, device=H200, software=H200_SW)
    backups = sorted(tmp_path.glob("p.json.corrupt-*"))
    assert [b.read_text() for b in backups] == ["{ first half", "{ second half"]


def test_write_errors_are_profile_errors_that_name_the_file(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    with pytest.raises(ProfileError, match="cannot write profile"):
        merge_into(blocker / "p.json", {READ: {"value": 1.0}}, device=H200, software=H200_SW)
