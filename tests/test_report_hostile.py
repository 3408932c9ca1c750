"""Hostile and corrupt input to the review commands, without a `calib run` (fast): the report
escapes every text that comes from a file, and `calib merge`, `calib show` and `calib report` on a
corrupt fragment or run folder say why in one line and exit 2, never with a traceback."""

import json
import os

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
    b'{"schema": "calib.fragment/1", "params": {}, "timings_s": {"measure": 1' + b"0" * 400 + b"}}",
    # NaN, Infinity and 1e400 are no JSON calib writes; read as floats they ended the merge in the
    # profile's strict dump (a ValueError traceback), from any field, the device's name included
    json.dumps(_fragment(device={**DEVICE, "name": float("nan")})).encode(),
    json.dumps(_fragment()).replace('"n": 8', '"n": 8, "r2": Infinity').encode(),
    json.dumps(_fragment()).replace('"n": 8', '"n": 8, "diagnostics": {"curvature_p": 1e400}').encode(),
    json.dumps(_fragment()).replace('"n": 8', '"n": 8, "n": 9').encode(),
], ids=["binary", "truncated", "list", "params-list", "bad-record", "device-text", "failures-list",
        "session-bad", "note-number", "deep", "timing-too-large", "nan-device-name", "infinite-r2",
        "diagnostic-past-float", "key-twice"])
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
    '{"notebooks": null}', '{"wall_s": 1%s}' % ("0" * 400),
    '{"notebooks": [{"calibration": "registers", "wall_s": 1%s}]}' % ("0" * 400),
], ids=["not-json", "binary", "list", "notebooks-int", "notebooks-ints", "failed-int", "failed-short",
        "notebooks-null", "wall-too-large", "notebook-wall-too-large"])
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


def test_a_figure_that_is_a_folder_a_fifo_or_a_link_loop_costs_only_itself(tmp_path, deadline):
    """``*.png`` is whatever a folder holds: a folder of that name ended the report in a traceback,
    a FIFO hung it for ever, a link loop raised. Each is named in the report; the rest is there."""
    run = _run_folder(tmp_path / "run")
    figures = run / "registers"
    (figures / "registers.png").mkdir()
    os.mkfifo(figures / "line-memory_dram_read_bandwidth_gbps.png")
    (figures / "residuals-loop.png").symlink_to("residuals-loop.png")
    (figures / "residuals-memory_dram_read_bandwidth_gbps.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    html = build_report(run)
    assert html.count('src="data:image/png;base64,') == 1
    for name, why in (("registers.png", "is a directory"), ("line-memory_dram_read_bandwidth_gbps.png", "is a FIFO"),
                      ("residuals-loop.png", "symbolic links")):
        assert f"Figure <code>{name}</code> not included:" in html and why in html, name


def test_the_report_to_an_open_descriptor_is_written_through_it(tmp_path, capsys):
    """``calib report RUN -o /dev/stdout``: a temporary file renamed over the path replaced the
    /dev/stdout link itself (as root) and printed nothing; the path is a stream, written in place,
    and the line saying so goes to stderr."""
    run = _run_folder(tmp_path / "run")
    out = tmp_path / "out.html"
    with open(out, "wb") as fh:
        assert cli.main(["report", str(run), "-o", f"/dev/fd/{fh.fileno()}"]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    captured = capsys.readouterr()
    assert captured.out == "" and "wrote /dev/fd/" in captured.err


def test_a_run_index_write_that_fails_leaves_the_old_index_whole(tmp_path, monkeypatch):
    """run.json is replaced whole: written in place, a run killed (or a disk filled) mid-write left
    a truncated index that the report refused and a resume read as none."""
    from calib import runfolder
    from calib.errors import CalibError

    run = _run_folder(tmp_path / "run", index={"notebooks": [{"calibration": "registers"}], "failed": []})
    before = (run / "run.json").read_bytes()
    real_replace = os.replace

    def no_room(src, dst, *args, **kwargs):
        if str(dst).endswith("run.json"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", no_room)
    with pytest.raises(CalibError, match="No space left"):
        runfolder.write_index(run, {"notebooks": ["registers"]}, {}, device=DEVICE, software={"calib": "0"})
    assert (run / "run.json").read_bytes() == before
    assert not [p for p in run.iterdir() if p.name.startswith(".run.json")]


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


def test_the_report_reads_no_database_the_user_did_not_name(tmp_path, monkeypatch):
    """A run folder from elsewhere names its sessions' databases; the report read whatever they
    said: it connected to the host of a PostgreSQL URL, or opened an SQLite file anywhere. It reads
    the folder's own file, or CALIB_DB_URL's database, and says what it left unread."""
    from calib import html_report

    opened = []

    class Refused:
        def __init__(self, url, **kw):
            opened.append(url)
            raise RuntimeError("no such database")

    monkeypatch.setattr("calib.store.Store", Refused)
    monkeypatch.delenv("CALIB_DB_URL", raising=False)
    elsewhere = "postgresql+psycopg://someone:***@db.example.org/calib"
    run = _run_folder(tmp_path / "run", fragment=_fragment(session={"id": 1, "db": elsewhere}))
    html = build_report(run)
    assert opened == [] and "db.example.org/calib: not read" in html
    monkeypatch.setenv("CALIB_DB_URL", "postgresql+psycopg://someone:secret@db.example.org/calib")
    html = build_report(run)  # the database the user names: read with its password, never shown
    assert opened == ["postgresql+psycopg://someone:secret@db.example.org/calib"]
    assert "secret" not in html and "no such database" in html
    other = _run_folder(tmp_path / "other", fragment=_fragment(session={"id": 1, "db": "sqlite:////etc/x.db"}))
    opened.clear()
    assert "x.db: not read" in html_report.build_report(other) and opened == []
