"""Hostile and corrupt input to the review commands, without a `calib run` (fast): the report
escapes every text that comes from a file, and `calib merge`, `calib show` and `calib report` on a
corrupt fragment or run folder say why in one line and exit 2, never with a traceback."""

import json

import pytest

from calib import cli
from calib.calibration import FRAGMENT_SCHEMA
from calib.html_report import build_report

EVIL = '"><img src=x onerror="alert(1)">'
DEVICE = {"name": "GPU", "sm_count": 4, "compute_capability": "9.0", "simulated": True}


def _fragment(**over):
    doc = {"schema": FRAGMENT_SCHEMA, "device": dict(DEVICE), "software": {"calib": "0"}, "created": "2026-12-01",
           "params": {"memory.dram.read_bandwidth_gbps": {"value": 4000.0, "ci95": [3990.0, 4010.0], "unit": "GB/s",
                                                          "n": 8, "flags": []}},
           "failures": {}, "session": {}}
    doc.update(over)
    return doc


def _run_folder(root, cal="registers", fragment=None, index=None):
    (root / cal).mkdir(parents=True)
    (root / cal / f"fragment-{cal}.json").write_text(json.dumps(fragment or _fragment()))
    if index is not None:
        (root / "run.json").write_text(index if isinstance(index, str) else json.dumps(index))
    return root


def test_the_report_escapes_every_text_from_files(tmp_path):
    cal = f"cal{EVIL}"
    frag = _fragment(device={**DEVICE, "name": EVIL, "driver": EVIL}, software={EVIL: EVIL},
                     params={f"x.{EVIL}": {"value": 1.0, "unit": EVIL, "n": 3, "flags": [EVIL], "method": EVIL,
                                           "source": EVIL}},
                     failures={f"y.{EVIL}": EVIL}, note=EVIL)
    run = _run_folder(tmp_path / "run", cal, frag, index={
        "finished": EVIL, "profile": EVIL, "failed": [[EVIL, EVIL]],
        "notebooks": [{"calibration": cal, "notebook": EVIL, "wall_s": EVIL, "status": "failed", "error": EVIL}]})
    (run / cal / f"line-x_{EVIL}.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # a figure with a hostile name
    html = build_report(run)
    assert "<img src=x" not in html and 'onerror="alert' not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert html.count("&lt;img src=x") >= 10  # names, unit, flags, device, software, index fields, figure
    # the figure is there, and its anchors are slugs (no quote can leave an attribute)
    assert 'src="data:image/png;base64,' in html and 'id="fig-cal__' in html


@pytest.mark.parametrize("fragment", [
    b"\xff\xfe not UTF-8", b"{truncated", b"[1, 2]", b'{"schema": "calib.fragment/1", "params": [1]}',
    b'{"schema": "calib.fragment/1", "params": {"a.b": {"value": "fast"}}}',
    b'{"schema": "calib.fragment/1", "params": {}, "device": "GPU"}',
    b'{"schema": "calib.fragment/1", "params": {}, "failures": ["x"]}',
    b'{"schema": "calib.fragment/1", "params": {}, "session": {"id": "one", "db": 5}}',
    b'{"schema": "calib.fragment/1", "params": {}, "note": 5}',
    b"[" * 100000,
], ids=["binary", "truncated", "list", "params-list", "bad-record", "device-text", "failures-list",
        "session-bad", "note-number", "deep"])
def test_corrupt_fragments_are_refused_in_one_line_with_exit_2(tmp_path, capsys, fragment):
    f = tmp_path / "fragment-registers.json"
    f.write_bytes(fragment)
    run = tmp_path / "run"
    (run / "registers").mkdir(parents=True)
    (run / "registers" / f.name).write_bytes(fragment)
    for argv in (["merge", str(f), "--profile", str(tmp_path / "p.json")], ["merge", str(run)],
                 ["show", str(run), "--no-device-check"], ["report", str(run)]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"calib {argv[0]}: error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("index", [
    "nope", b"\xff", "[1]", '{"notebooks": 5}', '{"notebooks": [1, 2]}', '{"failed": 3}', '{"failed": [["a"]]}',
], ids=["not-json", "binary", "list", "notebooks-int", "notebooks-ints", "failed-int", "failed-short"])
def test_corrupt_run_indexes_are_refused_in_one_line_with_exit_2(tmp_path, capsys, index):
    run = _run_folder(tmp_path / "run")
    (run / "run.json").write_bytes(index if isinstance(index, bytes) else index.encode())
    for argv in (["show", str(run), "--no-device-check"], ["report", str(run)]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"calib {argv[0]}: error: ") and "run.json" in err and err.count("\n") == 1, err


def test_a_sound_synthetic_run_folder_still_reports_and_shows(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", index={"notebooks": [{"calibration": "registers"}], "failed": []})
    assert cli.main(["report", str(run)]) == 0 and (run / "report.html").is_file()
    assert cli.main(["show", str(run), "--no-device-check"]) == 0
    assert "memory.dram.read_bandwidth_gbps" in capsys.readouterr().out


def test_heuristics_evaluate_reports_bad_problem_lines_by_number(tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text('nope\n{"op": "pow", "n": 3}\n\n# a comment\n{"op": "add", "n": 0}\n[1]\n' + "[" * 100000 + "\n")
    assert cli.main(["heuristics", "evaluate", "--kind", "pointwise", "--problems", str(f), "--backend", "sim"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no usable pointwise problem" in err
    for n in (1, 2, 5, 6, 7):
        assert f"p.jsonl:{n}:" in err, n
    f.write_bytes(b"\xff\xfe")
    assert cli.main(["heuristics", "evaluate", "--kind", "pointwise", "--problems", str(f), "--backend", "sim"]) == 2
    assert "not UTF-8" in capsys.readouterr().err
