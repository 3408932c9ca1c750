"""Every bad argument of every subcommand is a one-line message and exit status 2: never a
traceback, never a hang, never exit 0 or 1.

The cases run in-process through ``calib.cli.main`` under a SIGALRM guard: a FIFO, /dev/zero or a
busy loop must fail the case, not the suite. Fixtures stand for what a hostile user passes: a
file where a folder goes, a folder where a file goes, a FIFO, specs with misspelt keys and wrong
types, non-numbers, zeros, negatives, NaN and infinity.
"""

import functools
import json
import os
import signal
import sqlite3

import pytest

from calib import cli

HANG_GUARD_S = 30


class _Hang(Exception):
    pass


@pytest.fixture
def hostile(tmp_path, monkeypatch, fixture_path):
    """The paths the cases name, made once per case; no database or data folder of the user's is touched."""
    monkeypatch.delenv("CALIB_DB_URL", raising=False)
    monkeypatch.delenv("CALIB_PROFILE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    paths = {"tmp": tmp_path, "file": tmp_path / "a-file.txt", "dir": tmp_path / "a-dir", "fifo": tmp_path / "a-fifo",
             "db": f"sqlite:///{tmp_path / 'results.sqlite'}", "not_sqlite": tmp_path / "not.sqlite"}
    paths["file"].write_text("not a profile, not a folder\n")
    paths["dir"].mkdir()
    os.mkfifo(paths["fifo"])
    paths["not_sqlite"].write_text("hello")
    specs = {"missing": None, "not_json": "{", "list": [1, 2], "misspelt_param": {"params": {
        "memory.dram.read_bandwith_gbps": 4000.0}}, "misspelt_top": {"parms": {}},
        "misspelt_noise": {"noise": {"rel_sdd": 0.1}}, "misspelt_device": {"device": {"sm_cont": 10}},
        "true_bandwidth": {"params": {"memory.dram.read_bandwidth_gbps": True}},
        "string_bandwidth": {"params": {"memory.dram.read_bandwidth_gbps": "4000"}},
        "zero_bandwidth": {"params": {"memory.dram.read_bandwidth_gbps": 0}},
        "float_sm_count": {"device": {"sm_count": 13.5}}, "bool_seed": {"noise": {"seed": False}},
        "negative_pace": {"pace_s": -1}, "params_list": {"params": [1]}, "not_utf8": b'{"name": "\xff"}'}
    for name, content in specs.items():
        path = tmp_path / f"spec-{name}.json"
        paths[f"spec_{name}"] = path
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        elif content is not None:
            path.write_text(json.dumps(content))
    for name in ("not_json.json", "truncated.json", "future_schema.json", "wrong_type.json", "good_h200.json",
                 "other_device.json"):
        paths[name] = fixture_path(name)
    _review_paths(tmp_path, paths)
    return paths


H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "memory_bytes": 150754820096}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "sm_count": 108, "memory_bytes": 85899345920}
RECORD = {"value": 4460.0, "ci95": [4451.0, 4469.0], "unit": "GB/s", "n": 8}


def _fragment(path, **fields):
    doc = {"schema": "calib.fragment/1", "device": H200, "software": {"cuda_runtime": "13.2"},
           "params": {"memory.dram.read_bandwidth_gbps": RECORD}, **fields}
    path.write_text(json.dumps(doc))
    return path


def _review_paths(tmp, paths):
    """Run folders, fragments and problems files for calib report / merge / show / heuristics."""
    def folder(name, **files):
        d = tmp / name
        d.mkdir()
        for fname, content in files.items():
            (d / fname.replace("_", "-", 1) if fname.startswith("fragment_") else d / fname).write_text(content)
        return d

    good = folder("run-good")
    _fragment(good / "fragment-memory_bandwidth.json")
    paths["run_good"] = good
    paths["run_bad_index"] = folder("run-bad-index", **{"run.json": "{"})
    paths["run_index_list"] = folder("run-index-list", **{"run.json": "[1, 2]"})
    paths["run_bad_fragment"] = folder("run-bad-fragment", **{"fragment_memory_bandwidth.json": "{"})
    paths["run_bad_snapshot"] = folder("run-bad-snapshot", **{"profile.json": "{", "run.json": "{}"})
    fifo_run = folder("run-fifo-fragment")
    os.mkfifo(fifo_run / "fragment-memory_bandwidth.json")
    paths["run_fifo_fragment"] = fifo_run
    paths["fragment"] = _fragment(tmp / "fragment-memory_bandwidth.json")
    paths["fragment_a100"] = _fragment(tmp / "fragment-a100.json", device=A100)
    paths["fragment_bad_param"] = _fragment(tmp / "fragment-bad-param.json", params={"x.y": {"value": "fast"}})
    paths["fragment_params_list"] = _fragment(tmp / "fragment-params-list.json", params=[1])
    problems = {"bad_lines": "{\nnot json\n[1, 2]\n{\"rows\": -5}\n", "empty": "", "comments": "# nothing\n\n",
                "other_kind": json.dumps({"kind": "matmul_splitk", "m": 64, "n": 64, "k": 64}) + "\n",
                "missing_fields": json.dumps({"m": 64}) + "\n"}
    for name, text in problems.items():
        paths[f"problems_{name}"] = tmp / f"problems-{name}.jsonl"
        paths[f"problems_{name}"].write_text(text)
    (tmp / "clash.json").mkdir()  # --out clash would write clash.json: a folder
    paths["a100_profile"] = tmp / "a100.json"  # merge writes a lock beside it: a copy, not the fixture
    paths["a100_profile"].write_text(paths["other_device.json"].read_text())
    paths["problems_not_utf8"] = tmp / "problems-not-utf8.jsonl"
    paths["problems_not_utf8"].write_bytes(b'{"rows": "\xff"}\n')


def _diff_same(p, *extra) -> list:
    """calib diff of the good profile against itself, with the options under test."""
    return ["diff", str(p["good_h200.json"]), str(p["good_h200.json"]), *extra]


def _db(p):
    return ["--db", p["db"]]


def _sim(p, spec):
    return ["--backend", "sim", "--sim-spec", str(p[f"spec_{spec}"])]


P = "memory.dram.read_bandwidth_gbps"
SPECS = ["missing", "not_json", "list", "misspelt_param", "misspelt_top", "misspelt_noise", "misspelt_device",
         "true_bandwidth", "string_bandwidth", "zero_bandwidth", "float_sm_count", "bool_seed", "negative_pace",
         "params_list", "not_utf8"]



def _spec_cases(command: str, head) -> list:
    """One case per bad spec: ``head(paths)`` then ``--backend sim --sim-spec SPEC``."""
    return [(f"{command}-sim-spec-{spec}", functools.partial(_with_spec, head, spec),
             "did you mean" if spec.startswith("misspelt") else None) for spec in SPECS]


def _with_spec(head, spec: str, p) -> list:
    return head(p) + _sim(p, spec)


# (id, argv from the fixture's paths, a text the message must hold or None)
CASES = [
    # calib (no subcommand) and unknown ones
    ("no-command", lambda p: [], None),
    ("unknown-command", lambda p: ["frobnicate"], None),
    # calib run
    ("run-jobs-abc", lambda p: ["run", "--jobs", "abc"], "whole number"),
    ("run-jobs-0", lambda p: ["run", "--jobs", "0"], "at least 1"),
    ("run-jobs-negative", lambda p: ["run", "--jobs", "-3"], "at least 1"),
    ("run-jobs-fraction", lambda p: ["run", "--jobs", "1.5"], "whole number"),
    ("run-device-negative", lambda p: ["run", "--device", "-1"], "at least 0"),
    ("run-device-abc", lambda p: ["run", "--device", "x"], "whole number"),
    ("run-suite", lambda p: ["run", "--suite", "huge"], "invalid choice"),
    ("run-backend", lambda p: ["run", "--backend", "tpu"], "invalid choice"),
    ("run-unknown-flag", lambda p: ["run", "--fast"], "unrecognized"),
    ("run-run-dir-is-a-file", lambda p: ["run", "--backend", "sim", "--run-dir", str(p["file"])], "is a file"),
    ("run-run-dir-under-a-file", lambda p: ["run", "--backend", "sim", "--run-dir", str(p["file"] / "r")], None),
    ("run-profile-is-a-dir", lambda p: ["run", "--backend", "sim", "--profile", str(p["dir"])], "directory"),
    ("run-profile-is-a-fifo", lambda p: ["run", "--backend", "sim", "--profile", str(p["fifo"])], "not a regular"),
    ("run-profile-under-a-file", lambda p: ["run", "--backend", "sim", "--profile", str(p["file"] / "p.json")], None),
    ("run-notebook-unknown", lambda p: ["run", "--backend", "sim", "--notebook", "memory_bandwith"],
     "memory_bandwidth"),
    ("run-backend-cupy-without-cupy", lambda p: ["run", "--backend", "cupy", "--run-dir", str(p["tmp"] / "r")],
     "cupy"),
    *_spec_cases("run", lambda p: ["run", "--run-dir", str(p["tmp"] / "r")]),
    # calib show
    ("show-missing", lambda p: ["show", str(p["tmp"] / "missing.json")], "does not exist"),
    ("show-not-json", lambda p: ["show", str(p["not_json.json"]), "--no-device-check"], "not valid JSON"),
    ("show-truncated", lambda p: ["show", str(p["truncated.json"]), "--no-device-check"], "truncated"),
    ("show-future-schema", lambda p: ["show", str(p["future_schema.json"]), "--no-device-check"], "newer"),
    ("show-wrong-type", lambda p: ["show", str(p["wrong_type.json"]), "--no-device-check"], None),
    ("show-a-text-file", lambda p: ["show", str(p["file"])], None),
    ("show-a-fifo", lambda p: ["show", str(p["fifo"])], None),
    ("show-a-folder", lambda p: ["show", str(p["dir"])], None),
    ("show-dev-zero", lambda p: ["show", "/dev/zero"], None),
    ("show-json-missing", lambda p: ["show", "--json", str(p["tmp"] / "missing.json")], None),
    ("show-unknown-flag", lambda p: ["show", "--yaml"], "unrecognized"),
    # calib query
    ("query-no-name", lambda p: ["query"], "required"),
    ("query-default-abc", lambda p: ["query", P, "--default", "abc"], "number"),
    ("query-default-nan", lambda p: ["query", P, "--default", "nan"], "finite"),
    ("query-default-inf", lambda p: ["query", P, "--default", "inf"], "finite"),
    ("query-missing-profile-strict", lambda p: ["query", P, "--profile", str(p["tmp"] / "m.json"), "--strict"], None),
    ("query-not-json-strict", lambda p: ["query", P, "--profile", str(p["not_json.json"]), "--no-device-check"], None),
    ("query-fifo", lambda p: ["query", P, "--profile", str(p["fifo"])], None),
    ("query-unknown-name", lambda p: ["query", "no.such.parameter", "--profile", str(p["good_h200.json"]),
                                      "--no-device-check"], None),
    ("query-record-unknown", lambda p: ["query", "no.such", "--record", "--profile", str(p["good_h200.json"]),
                                        "--no-device-check"], None),
    # calib catalogue
    ("catalogue-extra", lambda p: ["catalogue", "extra"], "unrecognized"),
    # calib worker
    ("worker-no-db", lambda p: ["worker", "--backend", "sim", "--exit-when-empty"], "no database"),
    ("worker-batch-negative", lambda p: ["worker", *_db(p), "--batch", "-5"], "at least 1"),
    ("worker-batch-0", lambda p: ["worker", *_db(p), "--batch", "0"], "at least 1"),
    ("worker-batch-abc", lambda p: ["worker", *_db(p), "--batch", "abc"], "whole number"),
    ("worker-heartbeat-0", lambda p: ["worker", *_db(p), "--heartbeat-s", "0"], "at least 0.1"),
    ("worker-heartbeat-negative", lambda p: ["worker", *_db(p), "--heartbeat-s", "-1"], "at least 0.1"),
    ("worker-heartbeat-nan", lambda p: ["worker", *_db(p), "--heartbeat-s", "nan"], "finite"),
    ("worker-lease-0", lambda p: ["worker", *_db(p), "--lease-timeout-s", "0"], "over 0"),
    ("worker-lease-negative", lambda p: ["worker", *_db(p), "--lease-timeout-s", "-5"], "over 0"),
    ("worker-lease-inf", lambda p: ["worker", *_db(p), "--lease-timeout-s", "inf"], "finite"),
    ("worker-lease-under-3-heartbeats", lambda p: ["worker", *_db(p), "--backend", "sim", "--heartbeat-s", "5",
                                                   "--lease-timeout-s", "10"], "3 heartbeats"),
    ("worker-max-retries-negative", lambda p: ["worker", *_db(p), "--max-retries", "-1"], "at least 0"),
    # huge counts overflowed SQLite's INTEGER or the datetime arithmetic inside the worker loop: tracebacks
    ("worker-max-retries-huge", lambda p: ["worker", *_db(p), "--backend", "sim", "--exit-when-empty",
                                           "--max-retries", "9" * 20], "at most"),
    ("worker-session-huge", lambda p: ["worker", *_db(p), "--backend", "sim", "--exit-when-empty",
                                       "--session", "9" * 20], "at most"),
    ("worker-batch-huge", lambda p: ["worker", *_db(p), "--backend", "sim", "--exit-when-empty",
                                     "--batch", "9" * 20], "at most"),
    ("worker-lease-huge", lambda p: ["worker", *_db(p), "--backend", "sim", "--exit-when-empty",
                                     "--lease-timeout-s", "1e300"], "at most"),
    ("worker-session-abc", lambda p: ["worker", *_db(p), "--session", "abc"], "whole number"),
    ("status-session-huge", lambda p: ["status", *_db(p), "--session", "9" * 20], "at most"),
    ("winners-session-huge", lambda p: ["winners", "export", str(p["dir"] / "w.tsv"), *_db(p), "--session", "9" * 20],
     "at most"),
    ("worker-session-0", lambda p: ["worker", *_db(p), "--session", "0"], "at least 1"),
    ("worker-device-negative", lambda p: ["worker", *_db(p), "--device", "-1"], "at least 0"),
    ("worker-cupy-missing", lambda p: ["worker", *_db(p), "--backend", "cupy", "--exit-when-empty"], "cupy"),
    ("worker-db-not-a-url", lambda p: ["worker", "--db", "no-such-dialect://x", "--backend", "sim"], None),
    ("worker-db-not-sqlite", lambda p: ["worker", "--db", f"sqlite:///{p['not_sqlite']}", "--backend", "sim"], None),
    ("worker-db-under-a-file", lambda p: ["worker", "--db", f"sqlite:///{p['file']}/x.sqlite", "--backend", "sim"],
     None),
    *_spec_cases("worker", lambda p: ["worker", *_db(p), "--exit-when-empty"]),
    # calib sweep
    ("sweep-no-label", lambda p: ["sweep", *_db(p)], "required"),
    ("sweep-no-db", lambda p: ["sweep", "--label", "x", "--backend", "sim"], "no database"),
    ("sweep-suite", lambda p: ["sweep", "--label", "x", "--suite", "all"], "invalid choice"),
    ("sweep-device-abc", lambda p: ["sweep", "--label", "x", "--device", "one"], "whole number"),
    ("sweep-cupy-missing", lambda p: ["sweep", "--label", "x", *_db(p), "--backend", "cupy"], "cupy"),
    *_spec_cases("sweep", lambda p: ["sweep", "--label", "x", *_db(p), "--no-progress"]),
    # calib status
    ("status-no-db", lambda p: ["status"], "no database"),
    ("status-missing-sqlite", lambda p: ["status", "--db", f"sqlite:///{p['tmp'] / 'typo.sqlite'}"], "does not create"),
    ("status-not-sqlite", lambda p: ["status", "--db", f"sqlite:///{p['not_sqlite']}"], None),
    ("status-a-dir", lambda p: ["status", "--db", f"sqlite:///{p['dir']}"], None),
    ("status-session-abc", lambda p: ["status", "--session", "x"], "whole number"),
    # calib winners
    ("winners-no-file", lambda p: ["winners", "export"], "required"),
    ("winners-bad-action", lambda p: ["winners", "frobnicate", "f.tsv"], "invalid choice"),
    ("winners-no-db", lambda p: ["winners", "export", str(p["tmp"] / "w.tsv")], "no database"),
    ("winners-import-missing", lambda p: ["winners", "import", str(p["tmp"] / "missing.tsv"), *_db(p)], None),
    ("winners-import-not-tsv", lambda p: ["winners", "import", str(p["not_json.json"]), *_db(p)], None),
    ("winners-import-a-dir", lambda p: ["winners", "import", str(p["dir"]), *_db(p)], None),
    ("winners-session-abc", lambda p: ["winners", "export", "w.tsv", "--session", "x"], "whole number"),
    # calib cache
    ("cache-bad-action", lambda p: ["cache", "frobnicate"], "invalid choice"),
    ("cache-older-than-abc", lambda p: ["cache", "prune", "--older-than-days", "abc"], "number"),
    ("cache-older-than-negative", lambda p: ["cache", "prune", "--older-than-days", "-1"], "at least 0"),
    ("cache-older-than-inf", lambda p: ["cache", "prune", "--older-than-days", "1e400"], "finite"),
    ("cache-prune-nothing-chosen", lambda p: ["cache", "prune", "--backend", "sim"], "needs"),
    ("cache-show-no-key", lambda p: ["cache", "show", "--backend", "sim"], "needs"),
    ("cache-import-missing", lambda p: ["cache", "import", str(p["tmp"] / "missing.jsonl"), "--backend", "sim"], None),
    ("cache-export-into-a-dir", lambda p: ["cache", "export", str(p["dir"]), "--backend", "sim"], None),
    ("cache-sim-spec-misspelt", lambda p: ["cache", "list", *_sim(p, "misspelt_param")], "did you mean"),
    ("cache-db-not-sqlite", lambda p: ["cache", "list", "--db", f"sqlite:///{p['not_sqlite']}", "--backend", "sim"],
     None),
    # calib diff
    ("diff-no-args", lambda p: ["diff"], "required"),
    ("diff-one-arg", lambda p: ["diff", str(p["good_h200.json"])], "required"),
    ("diff-a-missing", lambda p: ["diff", str(p["tmp"] / "missing.json"), str(p["good_h200.json"])],
     "does not exist"),
    ("diff-b-missing", lambda p: ["diff", str(p["good_h200.json"]), str(p["tmp"] / "missing.json")],
     "does not exist"),
    ("diff-a-folder", lambda p: ["diff", str(p["dir"]), str(p["good_h200.json"])], "directory"),
    ("diff-b-fifo", lambda p: ["diff", str(p["good_h200.json"]), str(p["fifo"])], "not a file"),
    ("diff-dev-zero", lambda p: ["diff", "/dev/zero", str(p["good_h200.json"])], "not a file"),
    ("diff-a-text-file", lambda p: ["diff", str(p["file"]), str(p["good_h200.json"])], None),
    ("diff-not-json", lambda p: ["diff", str(p["not_json.json"]), str(p["good_h200.json"])], "not valid JSON"),
    ("diff-truncated", lambda p: ["diff", str(p["good_h200.json"]), str(p["truncated.json"])], "truncated"),
    ("diff-future-schema", lambda p: ["diff", str(p["future_schema.json"]), str(p["good_h200.json"])], "newer"),
    ("diff-a-fragment", lambda p: ["diff", str(p["fragment"]), str(p["good_h200.json"])], None),
    ("diff-under-a-file", lambda p: ["diff", str(p["file"] / "p.json"), str(p["good_h200.json"])], None),
    ("diff-threshold-abc", lambda p: _diff_same(p, "--threshold",
                                      "abc"), "number"),
    ("diff-threshold-negative", lambda p: _diff_same(p, "--threshold", "-0.1"), "at least 0"),
    ("diff-threshold-nan", lambda p: _diff_same(p, "--threshold",
                                      "nan"), "finite"),
    ("diff-threshold-inf", lambda p: _diff_same(p, "--threshold",
                                      "1e400"), "finite"),
    ("diff-alpha-0", lambda p: _diff_same(p, "--alpha", "0"),
     "between 0 and 1"),
    ("diff-alpha-1", lambda p: _diff_same(p, "--alpha", "1"),
     "between 0 and 1"),
    ("diff-alpha-negative", lambda p: _diff_same(p, "--alpha",
                                       "-0.05"), "between 0 and 1"),
    ("diff-alpha-nan", lambda p: _diff_same(p, "--alpha", "nan"),
     "finite"),
    ("diff-alpha-abc", lambda p: _diff_same(p, "--alpha", "5%"),
     "number"),
    ("diff-fail-on-bogus", lambda p: _diff_same(p, "--fail-on",
                                      "bogus"), "invalid choice"),
    ("diff-unknown-flag", lambda p: _diff_same(p, "--html"),
     "unrecognized"),
    # calib verify (the simulated device: every bad argument is refused before anything is measured)
    ("verify-budget-0", lambda p: ["verify", "--backend", "sim", "--budget-s", "0"], "over 0"),
    ("verify-budget-negative", lambda p: ["verify", "--backend", "sim", "--budget-s", "-5"], "over 0"),
    ("verify-budget-nan", lambda p: ["verify", "--backend", "sim", "--budget-s", "nan"], "finite"),
    ("verify-budget-inf", lambda p: ["verify", "--backend", "sim", "--budget-s", "inf"], "finite"),
    ("verify-budget-huge", lambda p: ["verify", "--backend", "sim", "--budget-s", "1e400"], "finite"),
    ("verify-budget-abc", lambda p: ["verify", "--backend", "sim", "--budget-s", "ten"], "number"),
    ("verify-threshold-abc", lambda p: ["verify", "--backend", "sim", "--threshold", "abc"], "--threshold"),
    ("verify-threshold-name-abc", lambda p: ["verify", "--backend", "sim", "--threshold", "launch.latency_us=abc"],
     "--threshold"),
    ("verify-threshold-no-name", lambda p: ["verify", "--backend", "sim", "--threshold", "=0.1"], "--threshold"),
    ("verify-threshold-no-value", lambda p: ["verify", "--backend", "sim", "--threshold", "launch.latency_us="],
     "--threshold"),
    ("verify-threshold-negative", lambda p: ["verify", "--backend", "sim", "--threshold", "-0.02"], "--threshold"),
    ("verify-threshold-name-negative", lambda p: ["verify", "--backend", "sim", "--threshold",
                                                  "launch.latency_us=-1"], "--threshold"),
    ("verify-threshold-nan", lambda p: ["verify", "--backend", "sim", "--threshold", "nan"], "--threshold"),
    ("verify-threshold-inf", lambda p: ["verify", "--backend", "sim", "--threshold", "launch.latency_us=inf"],
     "--threshold"),
    ("verify-threshold-two-equals", lambda p: ["verify", "--backend", "sim", "--threshold", "a=b=0.1"],
     "no sentinel"),
    ("verify-threshold-unknown-sentinel", lambda p: ["verify", "--backend", "sim", "--threshold",
                                                     "launch.latncy_us=0.3"], "no sentinel"),
    ("verify-backend", lambda p: ["verify", "--backend", "tpu"], "invalid choice"),
    ("verify-device-negative", lambda p: ["verify", "--backend", "sim", "--device", "-1"], "at least 0"),
    ("verify-device-abc", lambda p: ["verify", "--backend", "sim", "--device", "gpu0"], "whole number"),
    ("verify-seed-abc", lambda p: ["verify", "--backend", "sim", "--seed", "x"], "whole number"),
    ("verify-seed-negative", lambda p: ["verify", "--backend", "sim", "--seed", "-1"], "at least 0"),
    ("verify-unknown-flag", lambda p: ["verify", "--quick"], "unrecognized"),
    ("verify-no-profile", lambda p: ["verify", "--backend", "sim"], "no profile"),
    ("verify-profile-missing", lambda p: ["verify", "--backend", "sim", "--profile", str(p["tmp"] / "m.json")],
     "does not exist"),
    ("verify-profile-a-folder", lambda p: ["verify", "--backend", "sim", "--profile", str(p["dir"])], "directory"),
    ("verify-profile-a-fifo", lambda p: ["verify", "--backend", "sim", "--profile", str(p["fifo"])], "not a file"),
    ("verify-profile-dev-zero", lambda p: ["verify", "--backend", "sim", "--profile", "/dev/zero"], "not a file"),
    ("verify-profile-a-text-file", lambda p: ["verify", "--backend", "sim", "--profile", str(p["file"])], None),
    ("verify-profile-not-json", lambda p: ["verify", "--backend", "sim", "--profile", str(p["not_json.json"])],
     "not valid JSON"),
    ("verify-profile-another-device", lambda p: ["verify", "--backend", "sim", "--profile",
                                                 str(p["other_device.json"])], "another device"),
    ("verify-cupy-without-cupy", lambda p: ["verify", "--backend", "cupy", "--profile", str(p["good_h200.json"])],
     "cupy"),
    *_spec_cases("verify", lambda p: ["verify", "--profile", str(p["good_h200.json"])]),
    # calib report
    ("report-no-arg", lambda p: ["report"], "required"),
    ("report-missing", lambda p: ["report", str(p["tmp"] / "no-such-run")], "not a folder"),
    ("report-a-file", lambda p: ["report", str(p["file"])], "not a folder"),
    ("report-a-fifo", lambda p: ["report", str(p["fifo"])], "not a folder"),
    ("report-not-a-run-folder", lambda p: ["report", str(p["dir"])], "not a calib run folder"),
    ("report-bad-index", lambda p: ["report", str(p["run_bad_index"])], "cannot be read"),
    ("report-index-a-list", lambda p: ["report", str(p["run_index_list"])], "JSON object"),
    ("report-bad-fragment", lambda p: ["report", str(p["run_bad_fragment"])], "cannot be read"),
    ("report-fifo-fragment", lambda p: ["report", str(p["run_fifo_fragment"])], None),
    ("report-bad-snapshot", lambda p: ["report", str(p["run_bad_snapshot"])], None),
    ("report-o-into-a-missing-folder", lambda p: ["report", str(p["run_good"]), "-o", str(p["tmp"] / "no" / "r.html")],
     "cannot write"),
    ("report-o-onto-a-folder", lambda p: ["report", str(p["run_good"]), "-o", str(p["dir"])], "is a folder"),
    ("report-o-under-a-file", lambda p: ["report", str(p["run_good"]), "-o", str(p["file"] / "r.html")],
     "cannot write"),
    ("report-unknown-flag", lambda p: ["report", str(p["run_good"]), "--pdf"], "unrecognized"),
    # calib merge
    ("merge-no-args", lambda p: ["merge"], "required"),
    ("merge-missing", lambda p: ["merge", str(p["tmp"] / "fragment-missing.json"), "--profile",
                                 str(p["tmp"] / "out.json")], "does not exist"),
    ("merge-a-text-file", lambda p: ["merge", str(p["file"]), "--profile", str(p["tmp"] / "out.json")], None),
    ("merge-not-json", lambda p: ["merge", str(p["not_json.json"]), "--profile", str(p["tmp"] / "out.json")], None),
    ("merge-a-profile", lambda p: ["merge", str(p["good_h200.json"]), "--profile", str(p["tmp"] / "out.json")],
     "not a calib.fragment"),
    ("merge-a-fifo", lambda p: ["merge", str(p["fifo"]), "--profile", str(p["tmp"] / "out.json")], None),
    ("merge-dev-zero", lambda p: ["merge", "/dev/zero", "--profile", str(p["tmp"] / "out.json")], None),
    ("merge-a-folder-without-fragments", lambda p: ["merge", str(p["dir"]), "--profile", str(p["tmp"] / "o.json")],
     "holds no fragment"),
    ("merge-run-folder-bad-fragment", lambda p: ["merge", str(p["run_bad_fragment"]), "--profile",
                                                 str(p["tmp"] / "out.json")], "cannot be read"),
    ("merge-run-folder-fifo-fragment", lambda p: ["merge", str(p["run_fifo_fragment"]), "--profile",
                                                  str(p["tmp"] / "out.json")], None),
    ("merge-bad-param", lambda p: ["merge", str(p["fragment_bad_param"]), "--profile", str(p["tmp"] / "out.json")],
     None),
    ("merge-params-a-list", lambda p: ["merge", str(p["fragment_params_list"]), "--profile",
                                       str(p["tmp"] / "out.json")], "must be an object"),
    ("merge-two-devices", lambda p: ["merge", str(p["fragment"]), str(p["fragment_a100"]), "--profile",
                                     str(p["tmp"] / "out.json")], "different devices"),
    ("merge-profile-a-folder", lambda p: ["merge", str(p["fragment"]), "--profile", str(p["dir"])], "directory"),
    ("merge-profile-a-fifo", lambda p: ["merge", str(p["fragment"]), "--profile", str(p["fifo"])], None),
    ("merge-profile-under-a-file", lambda p: ["merge", str(p["fragment"]), "--profile", str(p["file"] / "p.json")],
     None),
    ("merge-profile-another-device", lambda p: ["merge", str(p["fragment"]), "--profile", str(p["a100_profile"])],
     "another device"),
    ("merge-unknown-flag", lambda p: ["merge", str(p["fragment"]), "--force"], "unrecognized"),
    # calib show RUN_DIR | FRAGMENT
    ("show-run-folder-bad-index", lambda p: ["show", str(p["run_bad_index"])], "cannot be read"),
    ("show-run-folder-index-a-list", lambda p: ["show", str(p["run_index_list"])], "JSON object"),
    ("show-run-folder-bad-fragment", lambda p: ["show", str(p["run_bad_fragment"])], "cannot be read"),
    ("show-run-folder-fifo-fragment", lambda p: ["show", str(p["run_fifo_fragment"])], None),
    ("show-run-folder-bad-snapshot", lambda p: ["show", str(p["run_bad_snapshot"]), "--no-device-check"], None),
    ("show-run-folder-json-bad-fragment", lambda p: ["show", "--json", str(p["run_bad_fragment"])], None),
    ("show-fragment-bad-param", lambda p: ["show", str(p["fragment_bad_param"])], None),
    ("show-fragment-params-a-list", lambda p: ["show", str(p["fragment_params_list"])], "must be an object"),
    # calib heuristics evaluate (the simulated device; every bad argument is refused before any problem is timed)
    ("heuristics-no-action", lambda p: ["heuristics"], "required"),
    ("heuristics-bad-action", lambda p: ["heuristics", "tune"], "invalid choice"),
    ("heuristics-no-kind", lambda p: ["heuristics", "evaluate", "--backend", "sim"], "required"),
    ("heuristics-kind-nope", lambda p: ["heuristics", "evaluate", "--kind", "nope"], "invalid choice"),
    ("heuristics-count-negative", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                             "--count", "-1"], "at least 1"),
    ("heuristics-count-0", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                      "--count", "0"], "at least 1"),
    ("heuristics-count-abc", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--count", "ten"],
     "whole number"),
    ("heuristics-count-huge", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                         "--count", "10" * 20], "at most"),
    ("heuristics-seed-abc", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--seed", "x"],
     "whole number"),
    ("heuristics-seed-negative", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                            "--seed", "-1"], "at least 0"),
    ("heuristics-backend", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "rocm"],
     "give auto, cupy, sim or replay:FILE.json"),
    ("heuristics-backend-replay-empty", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                   "replay:"], "give auto, cupy, sim or replay:FILE.json"),
    ("heuristics-backend-replay-missing", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                     f"replay:{p['tmp']}/none.json"], "does not exist"),
    ("heuristics-backend-replay-text", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                  f"replay:{p['file']}"], "is not JSON"),
    ("heuristics-backend-replay-fifo", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                  f"replay:{p['fifo']}"], "is a FIFO"),
    ("heuristics-backend-replay-profile", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                     f"replay:{p['good_h200.json']}"],
     "not a calib heuristics evaluation"),
    ("heuristics-max-bytes-0", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                          "--max-bytes", "0"], "at least"),
    ("heuristics-max-bytes-negative", lambda p: ["heuristics", "evaluate", "--kind", "normalization", "--backend",
                                                 "sim", "--max-bytes=-1e6"], "at least"),
    ("heuristics-max-bytes-nan", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                            "--max-bytes", "nan"], "finite"),
    ("heuristics-max-bytes-inf", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                            "--max-bytes", "inf"], "finite"),
    ("heuristics-max-bytes-tiny", lambda p: ["heuristics", "evaluate", "--kind", "matmul_splitk", "--backend", "sim",
                                             "--max-bytes", "1"], "at least"),
    ("heuristics-budget-0", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                       "--budget-s", "0"], "over 0"),
    ("heuristics-budget-negative", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                              "--budget-s", "-1"], "over 0"),
    ("heuristics-budget-nan", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                         "--budget-s", "nan"], "finite"),
    ("heuristics-budget-abc", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--budget-s", "1m"],
     "number"),
    ("heuristics-problems-missing", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                               "--problems", str(p["tmp"] / "missing.jsonl")], "does not exist"),
    ("heuristics-problems-a-folder", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                                "--problems", str(p["dir"])], "directory"),
    ("heuristics-problems-a-fifo", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                              "--problems", str(p["fifo"])], "not a file"),
    ("heuristics-problems-dev-zero", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                                "--problems", "/dev/zero"], "not a file"),
    ("heuristics-problems-bad-lines", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                                 "--problems", str(p["problems_bad_lines"])], "no usable"),
    ("heuristics-problems-empty", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                             "--problems", str(p["problems_empty"])], "empty"),
    ("heuristics-problems-comments-only", lambda p: ["heuristics", "evaluate", "--kind", "normalization", "--backend",
                                                     "sim", "--problems", str(p["problems_comments"])], "empty"),
    ("heuristics-problems-other-kind", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                  "sim", "--problems", str(p["problems_other_kind"])], "not pointwise"),
    ("heuristics-problems-missing-fields", lambda p: ["heuristics", "evaluate", "--kind", "matmul_splitk", "--backend",
                                                     "sim", "--problems", str(p["problems_missing_fields"])],
     "missing field(s) k, n"),
    ("heuristics-problems-not-utf8", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                                "--problems", str(p["problems_not_utf8"])], "UTF-8"),
    ("heuristics-problems-a-profile", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                 "sim", "--problems", str(p["good_h200.json"])], "no usable"),
    ("heuristics-profile-missing", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                              "--profile", str(p["tmp"] / "missing.json")], "does not exist"),
    ("heuristics-profile-a-folder", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                               "--profile", str(p["dir"])], "directory"),
    ("heuristics-profile-a-fifo", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                             "--profile", str(p["fifo"])], "not a file"),
    ("heuristics-profile-not-json", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                               "--profile", str(p["not_json.json"])], "not valid JSON"),
    ("heuristics-db-not-a-url", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                           "--count", "1", "--db", "no-such-dialect://x"], None),
    ("heuristics-db-not-sqlite", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                            "--count", "1", "--db", f"sqlite:///{p['not_sqlite']}"], None),
    ("heuristics-db-under-a-file", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                              "--count", "1", "--db", f"sqlite:///{p['file']}/x.sqlite"], None),
    ("heuristics-out-into-a-missing-folder", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                        "sim", "--out", str(p["tmp"] / "no" / "res")], "--out"),
    ("heuristics-out-a-folder", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                           "--out", str(p["dir"]) + os.sep], "names a folder"),
    ("heuristics-out-onto-a-folder", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                                "--out", str(p["tmp"] / "clash")], "is a folder"),
    ("heuristics-out-under-a-file", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend", "sim",
                                               "--out", str(p["file"] / "res")], "--out"),
    ("heuristics-cupy-without-cupy", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--backend",
                                                "cupy"], "cupy"),
    ("heuristics-unknown-flag", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--all"],
     "unrecognized"),
    *_spec_cases("heuristics", lambda p: ["heuristics", "evaluate", "--kind", "pointwise", "--count", "1"]),
]


def _alarm(signum, frame):
    raise _Hang(f"no answer within {HANG_GUARD_S} s")


def _main(argv) -> int:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_GUARD_S)
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("make_argv, needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_argument_is_one_line_and_exit_2(hostile, capsys, make_argv, needle):
    code = _main(make_argv(hostile))
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert "Traceback" not in err + out, err
    assert code == 2, f"exit {code}: {err[-1500:]}"
    assert len(errors) == 1, err  # one line says what is wrong (argparse adds its usage above it)
    if needle:
        assert needle in errors[0], errors[0]


def test_there_are_many_cases_and_every_subcommand_has_some():
    assert len(CASES) >= 290
    commands = {c[0].split("-")[0] for c in CASES}
    parser = cli.build_parser()
    core = {"run", "show", "query", "catalogue", "worker", "sweep", "status", "winners", "cache", "diff", "verify",
            "report", "merge", "heuristics"}
    assert core <= commands and core <= set(parser._subparsers._group_actions[0].choices)


def test_show_json_is_valid_json_when_a_record_holds_nan(fixture_path, capsys):
    assert cli.main(["show", "--json", str(fixture_path("nan_value.json")), "--no-device-check"]) == 0
    text = capsys.readouterr().out

    def refuse(constant):
        raise AssertionError(f"{constant} in calib show --json")

    doc = json.loads(text, parse_constant=refuse)
    assert doc["params"]["memory.dram.read_bandwidth_gbps"]["value"] is None


def test_query_record_is_valid_json_when_a_record_holds_nan(tmp_path, capsys):
    """``calib query --record`` printed ``Infinity`` and ``NaN`` (a hand-edited r2 or diagnostic):
    no JSON reader takes them."""
    path = tmp_path / "p.json"
    path.write_text('{"schema": "calib.profile/1", "params": {"launch.latency_us": {"value": 12.0, "unit": "us", '
                    '"r2": Infinity, "diagnostics": {"curvature_p": NaN}}}}')
    assert cli.main(["query", "launch.latency_us", "--record", "--profile", str(path), "--no-device-check"]) == 0

    def refuse(constant):
        raise AssertionError(f"{constant} in calib query --record")

    doc = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert doc["value"] == 12.0 and doc["r2"] is None and doc["diagnostics"]["curvature_p"] is None


def test_a_lease_of_a_few_heartbeats_is_accepted_and_throws_nothing_away(hostile, capsys):
    """The shortest lease allowed still keeps a live worker's jobs, though a batch takes longer
    than the lease: every point is measured once and kept."""
    from calib.backends.sim import SimBackend
    from calib.calibrations import memory_bandwidth as dram
    from calib.store import Store

    spec = hostile["tmp"] / "paced.json"
    spec.write_text(json.dumps({"pace_s": 0.01}))  # 32 points a batch: 0.32 s, over the 0.3 s lease
    backend = SimBackend(spec)
    store = Store(hostile["db"])
    sid = store.open_session("lease", *backend.fingerprint())
    store.enqueue(sid, dram.plan("quick", l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes)[:64])
    assert _main(["worker", *_db(hostile), "--backend", "sim", "--sim-spec", str(spec), "--heartbeat-s", "0.1",
                  "--lease-timeout-s", "0.3", "--exit-when-empty"]) == 0
    assert "0 reclaimed from dead workers, 0 results refused" in capsys.readouterr().out
    with sqlite3.connect(hostile["tmp"] / "results.sqlite") as db:
        assert db.execute("SELECT state, count(*) FROM job GROUP BY state").fetchall() == [("completed", 64)]
        assert db.execute("SELECT count(DISTINCT job_id), count(*) FROM result WHERE role = 'measurement'"
                          ).fetchone() == (64, 64)
