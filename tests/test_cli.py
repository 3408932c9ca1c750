import json
import subprocess
import sys

H200_FILE = "good_h200.json"


def _calib(*args, env=None):
    return subprocess.run([sys.executable, "-m", "calib", *args], capture_output=True, text=True, timeout=120, env=env)


def test_query_prints_value_and_falls_back_to_default(fixture_path):
    p = str(fixture_path(H200_FILE))
    out = _calib("query", "memory.dram.read_bandwidth_gbps", "--profile", p, "--no-device-check")
    assert out.returncode == 0 and out.stdout.strip() == "4460.0"
    out = _calib("query", "launch.latency_us", "--profile", p, "--default", "7.5", "--no-device-check")
    assert out.returncode == 0 and out.stdout.strip() == "7.5" and "launch.latency_us" in out.stderr
    out = _calib("query", "launch.latency_us", "--profile", p, "--no-device-check")
    assert out.returncode == 2 and "no parameter 'launch.latency_us'" in out.stderr


def test_query_record_prints_the_whole_record(fixture_path):
    out = _calib("query", "memory.dram.read_bandwidth_gbps", "--record", "--profile", str(fixture_path(H200_FILE)),
                 "--no-device-check")
    rec = json.loads(out.stdout)
    assert rec["ci95"] == [4451.0, 4469.0] and rec["unit"] == "GB/s"


def test_show_marks_unusable_profiles(fixture_path):
    out = _calib("show", str(fixture_path("truncated.json")), "--no-device-check")  # not a profile: exit 2
    assert out.returncode == 2 and "truncated" in out.stderr and out.stderr.count("\n") == 1
    out = _calib("show", str(fixture_path("nan_value.json")), "--no-device-check")
    assert "UNUSABLE: parameter 'memory.dram.read_bandwidth_gbps'" in out.stdout
    assert "4300" in out.stdout


def test_query_of_an_unreadable_profile_says_why_once(fixture_path):
    """A truncated --profile was reported twice: the loader's warning, then the same words as the error
    (or again inside the warning that the default was used)."""
    p = str(fixture_path("truncated.json"))
    out = _calib("query", "memory.dram.read_bandwidth_gbps", "--profile", p, "--no-device-check")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("not valid JSON") == 1 and out.stderr.startswith("calib query: error:"), out.stderr
    out = _calib("query", "memory.dram.read_bandwidth_gbps", "--profile", p, "--default", "5", "--no-device-check")
    assert out.returncode == 0 and out.stdout.strip() == "5.0"
    assert out.stderr.count("not valid JSON") == 1 and "using the default 5.0" in out.stderr, out.stderr
