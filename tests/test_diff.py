"""calib diff: fingerprint differences first, then each parameter's values, CIs, ratio, and whether the
difference is significant (a z-test on the difference with both standard errors) and material
(asv's factor); --fail-on for CI pipelines; --json is valid JSON; bad input is one line and exit 2."""

import json
import math
import random

import pytest

from calib.cli import main
from calib.diff import DiffError, compare_estimates, diff_profiles, failed
from calib.errors import CalibError

READ = "memory.dram.read_bandwidth_gbps"
H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "memory_bytes": 150109880320,
        "simulated": False, "max_sm_mhz": 1980}
SW = {"driver": "580.159.04", "cuda_runtime": "13.2", "cupy": "14.2.0", "calib": "0.1.0"}


def _rec(value, rel, unit="GB/s"):
    return {"value": value, "ci95": [value * (1 - rel), value * (1 + rel)], "unit": unit, "n": 8}


def _write(path, params, device=H200, software=SW):
    path.write_text(json.dumps({"schema": "calib.profile/1", "device": device, "software": software,
                                "created": "2026-12-01T00:00:00Z", "params": params}))
    return path


def test_z_test_uses_both_standard_errors_not_ci_overlap():
    # CIs of ±1% that overlap (1000..1020 and 1005..1025 around 1010 and 1015 would overlap) can still
    # differ significantly: the combined SE is sqrt(2) of one, not two of them.
    a, b = 1000.0, 1016.0
    ci_a, ci_b = (990.0, 1010.0), (1006.0, 1026.0)
    assert ci_a[1] > ci_b[0], "the intervals overlap"
    r = compare_estimates(a, ci_a, b, ci_b)
    assert r["significant"] and r["p"] < 0.05 and r["scale"] == "log"
    se = (math.log(1010) - math.log(990)) / (2 * 1.959963984540054)
    assert r["se_a"] == pytest.approx(se)
    assert r["z"] == pytest.approx(math.log(b / a) / math.sqrt(r["se_a"] ** 2 + r["se_b"] ** 2))
    assert not r["material"]  # 1.6% is not beyond 5%


def test_material_is_asvs_factor_symmetric_in_the_ratio():
    assert compare_estimates(100.0, None, 105.1, None)["material"]
    assert not compare_estimates(100.0, None, 104.9, None)["material"]
    assert compare_estimates(100.0, None, 100 / 1.051, None)["material"]
    assert not compare_estimates(100.0, None, 100 / 1.049, None)["material"]
    assert compare_estimates(100.0, None, 103.0, None, threshold=0.02)["material"]
    r = compare_estimates(100.0, None, 200.0, None)
    assert r["significant"] is None and r["z"] is None, "neither has a CI: nothing to test with"


def test_asymmetric_and_non_positive_intervals_use_the_side_facing_the_other_estimate():
    # an inverted slope's interval: the log scale makes it nearly symmetric
    r = compare_estimates(4700.0, (4600.0, 4820.0), 4750.0, (4700.0, 4800.0))
    assert r["scale"] == "log"
    # an intercept whose CI reaches below zero: linear, the half-width toward the other estimate
    r = compare_estimates(0.5, (-0.5, 0.6), 0.8, (0.7, 2.0))
    assert r["scale"] == "linear"
    assert r["se_a"] == pytest.approx(0.1 / 1.959963984540054)   # A's upper side faces B
    assert r["se_b"] == pytest.approx(0.1 / 1.959963984540054)   # B's lower side faces A


def test_false_positive_rate_of_the_test_is_alpha_under_the_null():
    """Two honest 95% CIs of one true value: the z-test is significant about 5% of the time
    (CI overlap would say so far less often: about 0.6%)."""
    rng = random.Random(7)
    hits = overlaps_disjoint = 0
    trials = 4000
    for _ in range(trials):
        se = 0.01
        a, b = 1 + rng.gauss(0, se), 1 + rng.gauss(0, se)
        ci_a, ci_b = (a - 1.96 * se, a + 1.96 * se), (b - 1.96 * se, b + 1.96 * se)
        hits += compare_estimates(a, ci_a, b, ci_b)["significant"]
        overlaps_disjoint += ci_a[1] < ci_b[0] or ci_b[1] < ci_a[0]
    assert 0.04 <= hits / trials <= 0.06
    assert overlaps_disjoint / trials < 0.015


def _two(tmp_path):
    a = _write(tmp_path / "a.json", {READ: _rec(4700.0, 0.001), "launch.latency_us": _rec(12.0, 0.01, "us"),
                                     "compute.fp32.fma_tflops": _rec(60.7, 0.004, "TFLOP/s"),
                                     "memory.l2.read_bandwidth_gbps": _rec(9100.0, 0.002)})
    b = _write(tmp_path / "b.json", {READ: _rec(4400.0, 0.001), "launch.latency_us": _rec(12.05, 0.01, "us"),
                                     "compute.fp32.fma_tflops": _rec(60.9, 0.004, "TFLOP/s"),
                                     "compute.bf16.tensor_tflops": _rec(800.0, 0.01, "TFLOP/s")},
               device={**H200, "max_sm_mhz": 1755}, software={**SW, "driver": "590.1"})
    return a, b


def test_diff_reports_fingerprint_parameters_and_parameters_only_in_one(tmp_path):
    a, b = _two(tmp_path)
    doc = diff_profiles(a, b)
    fields = [(r["section"], r["field"], r["kind"]) for r in doc["fingerprint"]]
    assert fields == [("software", "driver", "soft"), ("device", "max_sm_mhz", "condition")]
    rows = {r["name"]: r for r in doc["params"]}
    read = rows[READ]
    assert read["ratio"] == pytest.approx(4400 / 4700) and read["significant"] and read["material"]
    lat = rows["launch.latency_us"]
    assert not lat["significant"] and not lat["material"]
    fp32 = rows["compute.fp32.fma_tflops"]
    assert not fp32["material"]
    assert doc["only_in_a"] == ["memory.l2.read_bandwidth_gbps"]
    assert doc["only_in_b"] == ["compute.bf16.tensor_tflops"]
    assert failed(doc, "material") == [READ]


def test_diff_text_lists_the_fingerprint_first_then_the_table(tmp_path, capsys):
    a, b = _two(tmp_path)
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.index("fingerprint differences") < out.index("parameter")
    assert "driver: '580.159.04' -> '590.1'" in out and "max_sm_mhz: 1980 -> 1755" in out
    line = next(ln for ln in out.splitlines() if ln.startswith(READ + " "))
    assert "0.9362" in line and "significant" in line and "material" in line and "±0.10%" in line
    assert "only in A: memory.l2.read_bandwidth_gbps" in out and "only in B: compute.bf16.tensor_tflops" in out


def test_fail_on_gives_exit_1_for_ci_pipelines(tmp_path, capsys):
    a, b = _two(tmp_path)
    assert main(["diff", str(a), str(b), "--fail-on", "material"]) == 1
    assert "--fail-on material: memory.dram.read_bandwidth_gbps" in capsys.readouterr().out
    assert main(["diff", str(a), str(b), "--fail-on", "significant"]) == 1
    assert main(["diff", str(a), str(a), "--fail-on", "significant"]) == 0
    # a threshold beyond the change: nothing material
    assert main(["diff", str(a), str(b), "--fail-on", "material", "--threshold", "0.1"]) == 0


def test_a_flipped_yes_no_parameter_fails_either_gate(tmp_path, capsys):
    flag = "memory.l2.persisting_supported"
    a = _write(tmp_path / "a.json", {READ: _rec(4700.0, 0.01), flag: {"value": True}})
    b = _write(tmp_path / "b.json", {READ: _rec(4700.0, 0.01), flag: {"value": False}})
    for gate in ("significant", "material"):
        assert main(["diff", str(a), str(b), "--fail-on", gate]) == 1
        out = capsys.readouterr().out
        assert f"--fail-on {gate}: {flag}" in out and "1 yes/no parameter changed" in out
    assert diff_profiles(a, b)["summary"]["flipped"] == 1
    same = _write(tmp_path / "c.json", {READ: _rec(4700.0, 0.01), flag: {"value": True}})
    assert main(["diff", str(a), str(same), "--fail-on", "material"]) == 0
    assert "yes/no" not in capsys.readouterr().out


def test_json_output_is_valid_json_without_nan(tmp_path, capsys):
    a, b = _two(tmp_path)
    exact = _write(tmp_path / "exact.json", {READ: {"value": 4700.0, "unit": "GB/s"},
                                             "memory.dram.fixed_cost_us": {"value": 4.0, "unit": "us"}})
    other = _write(tmp_path / "other.json", {READ: {"value": 4800.0, "unit": "GB/s"},
                                             "memory.dram.fixed_cost_us": {"value": 4.0, "ci95": [4.0, 4.0],
                                                                           "unit": "us"}})
    for x, y in ((a, b), (exact, other)):
        assert main(["diff", str(x), str(y), "--json", "--fail-on", "material"]) in (0, 1)
        text = capsys.readouterr().out
        assert "NaN" not in text and "Infinity" not in text
        doc = json.loads(text)
        assert {"fingerprint", "params", "only_in_a", "only_in_b", "summary", "failed"} <= set(doc)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    a, _ = _two(tmp_path)
    fragment = tmp_path / "fragment-x.json"
    fragment.write_text(json.dumps({"schema": "calib.fragment/1", "params": {}}))
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "calib.profile/1", "params": {')
    for bad in (tmp_path / "missing.json", fragment, broken, tmp_path):
        assert main(["diff", str(a), str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("calib diff: error: ") and "\n" not in err and str(bad.name) in err
    with pytest.raises(DiffError):
        diff_profiles(a, a, threshold=-1)
    assert issubclass(DiffError, CalibError)


def test_units_that_differ_are_not_compared(tmp_path):
    a = _write(tmp_path / "a.json", {"my.own.rate": {"value": 1.0, "unit": "GB/s"}})
    b = _write(tmp_path / "b.json", {"my.own.rate": {"value": 1000.0, "unit": "MB/s"}})
    row = diff_profiles(a, b)["params"][0]
    assert "units differ" in row["unusable"] and "ratio" not in row


def test_diff_of_two_simulated_calibrations_finds_the_planted_change(tmp_path):
    """Two real calibrations of the simulated device, the second with DRAM 10% slower: the read
    bandwidth differs significantly and materially; FP32, unchanged, does not differ materially."""
    import warnings

    from calib import calibrations
    from calib.backends.sim import SimBackend
    from calib.profile import Profile
    from calib.sweep import frame_from

    def profile(spec, seed):
        b = SimBackend(spec, seed=seed)
        device, software = b.fingerprint()
        records = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for cid in ("memory_bandwidth", "compute_throughput"):
                m = calibrations.get(cid)
                configs = m.plan("quick", l2_bytes=b.l2_bytes, memory_bytes=b.memory_bytes,
                                 sm_count=device["sm_count"])
                records.update(calibrations.fit(cid, frame_from(configs, b.measure(configs))).records)
        return Profile(records, device=device, software=software, path=tmp_path / f"{seed}.json")

    a = profile(None, 1)
    b = profile({"params": {READ: 4300.0 * 0.9}}, 2)
    rows = {r["name"]: r for r in diff_profiles(a, b)["params"]}
    assert rows[READ]["significant"] and rows[READ]["material"]
    assert rows[READ]["ratio"] == pytest.approx(0.9, abs=0.01)
    assert not rows["compute.fp32.fma_tflops"]["material"]
