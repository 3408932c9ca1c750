"""bench/evaluations_table.py: the table a results README carries, read off the recorded evaluations,
and its exit status naming the runs that miss a bar."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from h200_recordings import read_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import evaluations_table as T  # noqa: E402

S12C4 = ROOT / "bench" / "results" / "2026-12-04-h200-heuristics-s12c4"


def test_the_table_of_session_12_call_4_is_the_one_its_readme_carries(capsys):
    assert T.main([str(S12C4)]) == 1  # seed 63 missed the worst case
    out = capsys.readouterr().out
    readme = (S12C4 / "README.md").read_text()
    for label in ("geomean", "worst", "memory-bound median", "all problems median", "static baseline geomean"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {label} |"))
        assert row in readme
    assert "8 of 9 meet every bar\n  splitk-seed63: worst 0.838" in out


def test_runs_sort_by_seed_and_read_gzipped_and_plain_evaluations(tmp_path):
    import gzip

    for seed in (10, 9):
        (tmp_path / f"splitk-seed{seed}").mkdir()
    shutil.copy(S12C4 / "splitk-seed55" / "heuristics-matmul_splitk.json.gz", tmp_path / "splitk-seed10")
    src = (S12C4 / "splitk-seed56" / "heuristics-matmul_splitk.json.gz").read_bytes()
    (tmp_path / "splitk-seed9" / "heuristics-matmul_splitk.json").write_bytes(gzip.decompress(src))
    names = [n for n, _ in T.runs(tmp_path, "matmul_splitk")]
    assert names == ["splitk-seed9", "splitk-seed10"]


def test_two_runs_of_one_seed_get_a_column_each_named_by_their_folder(tmp_path):
    for sub in ("splitk-seed55", "heuristics-seed55", "splitk-seed56"):
        (tmp_path / sub).mkdir()
        shutil.copy(S12C4 / "splitk-seed55" / "heuristics-matmul_splitk.json.gz", tmp_path / sub)
    header = T.table(T.runs(tmp_path, "matmul_splitk")).splitlines()[0]
    assert header == "| seed | heuristics-seed55 | splitk-seed55 | splitk-seed56 |"
    header = T.table(T.runs(S12C4, "matmul_splitk")).splitlines()[0]
    assert header.startswith("| seed | 55 | 56 |")  # one run a seed: the number alone


def test_a_run_that_stopped_short_misses_a_bar():
    res = read_json(S12C4 / "splitk-seed56" / "heuristics-matmul_splitk.json.gz")
    assert T.misses(res) == []
    short = dict(res, evaluated=97, failed=3)
    assert T.misses(short) == ["evaluated 97 of 100, failed 3, choice failed 0"]
    slow = dict(res, summary=dict(res["summary"], heuristic=dict(res["summary"]["heuristic"], geomean_efficiency=0.96)))
    assert T.misses(slow) == ["geomean 0.960"]
    behind = dict(res, summary=dict(res["summary"], baseline=dict(res["summary"]["baseline"], geomean_efficiency=1.0)))
    assert T.misses(behind) == ["baseline 1.000 not behind"]


def test_what_an_evaluation_does_not_record_misses_its_bar_and_prints_as_a_dash():
    """A group without problems records only its count, a run stopped before any problem no summary."""
    res = read_json(S12C4 / "splitk-seed56" / "heuristics-matmul_splitk.json.gz")
    no_mb = dict(res, prediction=dict(res["prediction"], memory_bound={"n": 0}))
    assert T.misses(no_mb) == ["memory-bound median -"]
    empty = {"problems": 100, "evaluated": 0, "failed": 0, "stopped_early": "budget", "prediction": {"all": {"n": 0}}}
    assert T.misses(empty) == ["evaluated 0 of 100, failed 0, choice failed None, stopped early", "geomean -",
                               "worst -", "baseline - not behind", "memory-bound median -", "all-problems median -"]
    out = T.table([("splitk-seed1", no_mb), ("splitk-seed2", empty)])
    assert "| memory-bound median | - | - |" in out and "| worst | 0.977 | **-** |" in out


def test_a_folder_without_evaluations_is_an_error(tmp_path, capsys):
    assert T.main([str(tmp_path)]) == 1
    assert "no heuristics-matmul_splitk.json" in capsys.readouterr().err


def test_where_runs_record_pi95_the_table_says_how_often_it_held_and_no_bar_reads_it():
    res = read_json(S12C4 / "splitk-seed56" / "heuristics-matmul_splitk.json.gz")
    assert "pi95" not in T.table([("seed56", res)])  # recorded before the band: no such row
    pred = dict(res["prediction"], all=dict(res["prediction"]["all"], pi95_contains_measured=0.93))
    rows = [("seed56", dict(res, prediction=pred)), ("seed57", res)]
    assert "| pi95 holds the choice | 93.0% | - |" in T.table(rows).splitlines()
    assert T.misses(rows[0][1]) == T.misses(res)
