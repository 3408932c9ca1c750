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
    for name in ("not_json.json", "truncated.json", "future_schema.json", "wrong_type.json", "good_h200.json"):
        paths[name] = fixture_path(name)
    return paths


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
    ("worker-session-abc", lambda p: ["worker", *_db(p), "--session", "abc"], "whole number"),
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
    assert len(CASES) >= 60
    commands = {c[0].split("-")[0] for c in CASES}
    parser = cli.build_parser()
    core = {"run", "show", "query", "catalogue", "worker", "sweep", "status", "winners", "cache"}
    assert core <= commands and core <= set(parser._subparsers._group_actions[0].choices)


def test_show_json_is_valid_json_when_a_record_holds_nan(fixture_path, capsys):
    assert cli.main(["show", "--json", str(fixture_path("nan_value.json")), "--no-device-check"]) == 0
    text = capsys.readouterr().out

    def refuse(constant):
        raise AssertionError(f"{constant} in calib show --json")

    doc = json.loads(text, parse_constant=refuse)
    assert doc["params"]["memory.dram.read_bandwidth_gbps"]["value"] is None


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
