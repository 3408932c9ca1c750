"""The autotune cache given what an outside checker would try: checks that answer with NumPy's
truth values, timers that report no time, descriptors Python calls equal but that are different
problems, descriptors that hold themselves or numbers no database keeps, cache files with hostile
numbers, an export that fails half-way, a database in a folder nobody may write."""

import dataclasses
import functools
import json
import os
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from calib import autotune
from calib.autotune import jsonl
from calib.autotune.storage import AutotuneDB
from calib.store import StoreError, sqlite_url
from calib.timing import Measurement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autotune_helpers import run, tuner, workload  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOY = {"name": "toy GPU", "compute_capability": "9.0", "sm_count": 132}


@pytest.fixture
def url(tmp_path):
    return sqlite_url(tmp_path / "autotune.sqlite")


def _times(table):
    return lambda c: Measurement([table[c]] * 8, stop_reason="max_samples")


@pytest.mark.parametrize("false", [np.False_, np.bool_(False), 0, ""])
def test_a_check_answering_with_a_numpy_false_marks_the_candidate_wrong(false, url):
    t = autotune.Autotuner(TOY, {"calib": "t"}, url=url)
    sel = t.select("f", {"k": 1}, ["a", "b"], time=_times({"a": 9.0, "b": 1.0}),
                   check=lambda c: np.True_ if c == "a" else false)
    assert sel.candidate == "a"  # b is faster but wrong
    assert t.entry("f", {"k": 1}).timings["b"].status == "wrong"


def test_a_check_answering_with_an_array_is_wrong_with_its_reason(url):
    t = autotune.Autotuner(TOY, {"calib": "t"}, url=url)
    sel = t.select("f", {"k": 2}, ["a", "b"], time=_times({"a": 9.0, "b": 1.0}),
                   check=lambda c: True if c == "a" else np.array([True, False]))
    assert sel.candidate == "a" and "not one truth value" in t.entry("f", {"k": 2}).timings["b"].reason


def test_the_decorator_with_a_numpy_compare_never_returns_a_wrong_answer(url):
    t = autotune.Autotuner(TOY, {"calib": "t"}, url=url)

    @autotune.tuned("double", {"right": lambda x: x * 2, "wrong": lambda x: x * 3},
                    describe=lambda x: ("double", x.shape), autotuner=lambda: t,
                    timer=lambda thunk: (thunk(), Measurement([1.0] * 5, stop_reason="max_samples"))[1],
                    reference=lambda x: x * 2, compare=lambda out, ref: (out == ref).all())
    def double(x):
        """x * 2"""

    assert (double(np.ones(4)) == 2).all()


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_a_time_not_above_zero_is_no_time_and_the_entry_stays_readable(bad, url):
    first = autotune.Autotuner(TOY, {"calib": "t"}, url=url)
    table = {"a": 5.0, "b": bad}
    assert first.select("f", {"k": 3}, ["a", "b"], time=_times(table)).candidate == "a"
    assert first.entry("f", {"k": 3}).timings["b"].status == "unsupported"
    again = autotune.Autotuner(TOY, {"calib": "t"}, url=url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sel = again.select("f", {"k": 3}, ["a", "b"], time=_times(table))
    assert not [w for w in caught if "corrupt" in str(w.message)], [str(w.message) for w in caught]
    assert sel.candidate == "a" and again.counters.benchmarks == 0 and again.counters.hits == 1


@dataclasses.dataclass(frozen=True)
class D:
    n: object


def test_descriptors_python_calls_equal_but_that_key_apart_are_tuned_apart(url):
    t, fam = tuner(url)
    a = t.select("toy", D(1), ["x", "y"], time=_times({"x": 1.0, "y": 2.0}))
    b = t.select("toy", D(1.0), ["x", "y"], time=_times({"x": 2.0, "y": 1.0}))
    c = t.select("toy", D(True), ["x", "y"], time=_times({"x": 2.0, "y": 1.0}))
    assert len({a.descriptor_key, b.descriptor_key, c.descriptor_key}) == 3
    assert (a.candidate, b.candidate, c.candidate) == ("x", "y", "y")
    assert t.select("toy", D(1.0), ["x", "y"]).candidate == "y"  # each remembered as itself
    p = workload(1)[0]
    t2, _, _ = run(url, [p])
    hits = t2.counters.hits
    t2.select("toy", p, ["alpha", "beta", "gamma"])
    assert t2.counters.hits == hits + 1  # the same object asked again: a memo hit


def test_a_descriptor_that_holds_itself_or_numbers_no_database_keeps_is_refused():
    cyc = {}
    cyc["self"] = cyc
    deep = functools.reduce(lambda a, _: [a], range(5000), 1)
    for bad, why in ((cyc, "contains itself"), ({"d": deep}, "nests deeper"), ({"x": 10**5000}, "64-bit"),
                     ({"n": 2**70}, "64-bit"), ({"n": -(2**63) - 1}, "64-bit")):
        with pytest.raises(autotune.DescriptorError, match=why):
            autotune.descriptor_key(bad)
    assert autotune.descriptor_key({"n": 2**63 - 1}) != autotune.descriptor_key({"n": -(2**63)})


def test_the_entry_checks_keep_to_the_tuning_databases_column_widths(url):
    """A family or source longer than its column is stored by SQLite and refused by PostgreSQL part
    way through an import or a tune: the checks use the tables' own widths, and select refuses a
    family no database keeps before it times anything."""
    from calib.autotune import entries
    from calib.store.tables import AutotuneEntryRow

    columns = AutotuneEntryRow.__table__.c
    assert (entries.FAMILY_MAX_CHARS, entries.SOURCE_MAX_CHARS) == (columns.family.type.length,
                                                                    columns.source.type.length)
    t = autotune.Autotuner(TOY, {"calib": "t"}, url=url)
    timed = []
    for family in ("f" * 129, "", 5):
        with pytest.raises(autotune.AutotuneError, match="not a name of 1 to 128"):
            t.select(family, {"k": 1}, ["a", "b"], time=lambda c: timed.append(c))
    assert timed == [] and t.select("f" * 128, {"k": 1}, ["a", "b"], time=_times({"a": 1.0, "b": 2.0})).choice == "a"


def test_a_candidate_without_a_name_is_refused(url):
    t = autotune.Autotuner(TOY, {"calib": "t"}, url=url)
    with pytest.raises(autotune.AutotuneError, match="a candidate named ''"):
        t.select("f", {"k": 1}, ["", "b"], time=_times({"": 1.0, "b": 2.0}))


def _exported(url, tmp_path):
    run(url, workload(3))
    out = tmp_path / "e.jsonl"
    assert jsonl.export(AutotuneDB(url), out) == 3
    return out


def test_an_export_that_fails_half_way_leaves_the_old_file_whole(url, tmp_path, monkeypatch):
    out = _exported(url, tmp_path)
    before = out.read_bytes()

    def broken(self, entry_id):
        raise StoreError("the database was written by a newer calib; upgrade calib")

    monkeypatch.setattr(AutotuneDB, "samples", broken)
    with pytest.raises(StoreError, match="newer calib"):
        jsonl.export(AutotuneDB(url), out)
    assert out.read_bytes() == before
    assert [p for p in os.listdir(tmp_path) if p.startswith(".e.jsonl")] == []  # no temporary file left


@pytest.mark.parametrize("edit, why", [
    (lambda o: o["timings"][0].update(time_us=10**400), "too large for a float"),
    (lambda o: o["timings"][0].update(n_samples=1e400), "Infinity is not a number"),  # json.dumps writes Infinity
    (lambda o: o["timings"][0].update(n_samples=10**30), "not a count"),
    (lambda o: o["timings"][0].update(reason={"a": [1]}), "reason is dict"),
    (lambda o: o["timings"][0].update(samples_us=["x"]), "a sample is 'x'"),
    (lambda o: o.update(version=-5), "not an integer from 1"),
    (lambda o: o.update(family="toy\ud800"), "lone surrogate"),
    (lambda o: o["timings"][0].update(candidate="alpha\udcff"), "lone surrogate"),
    (lambda o: o.update(offered=[["alpha"], None]), "offered is not a list of candidate names"),
    (lambda o: o.update(tied=[{"x": 1}]), "tied is not a list of candidate names"),
    (lambda o: o.update(family="f" * 129), "family 'ffff"),  # PostgreSQL refused it mid-import
    (lambda o: o.update(source="imported-from-afar"), "source 'imported-from-afar' is not a name of 1 to 16"),
    (lambda o: o.update(source=7), "source 7"),
])
def test_a_hostile_number_in_an_import_file_skips_its_line_and_imports_the_rest(edit, why, url, tmp_path):
    lines = _exported(url, tmp_path).read_text().splitlines()
    obj = json.loads(lines[1])
    edit(obj)
    lines[1] = json.dumps(obj)
    f = tmp_path / "h.jsonl"
    f.write_text("\n".join(lines) + "\n")
    fresh = AutotuneDB(sqlite_url(tmp_path / "fresh.sqlite"))
    rep = jsonl.import_file(fresh, f)
    assert rep.read.corrupt == 1 and rep.new == 2, rep
    assert rep.read.problems[0][0] == 2 and why in rep.read.problems[0][1]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
@pytest.mark.parametrize("field", ["device", "software", "protocol", "provenance"])
def test_nan_or_infinity_in_an_import_line_skips_it_and_every_later_export_still_works(literal, field, url,
                                                                                     tmp_path):
    """json.loads reads NaN, Infinity and 1e400; stored in an entry's fingerprint or provenance they
    made every later export (strict JSON) end in a ValueError traceback."""
    lines = _exported(url, tmp_path).read_text().splitlines()
    obj = json.loads(lines[1])
    obj[field]["hostile"] = "HOSTILE"
    lines[1] = json.dumps(obj).replace('"HOSTILE"', literal)
    f = tmp_path / "h.jsonl"
    f.write_text("\n".join(lines) + "\n")
    fresh = AutotuneDB(sqlite_url(tmp_path / "fresh.sqlite"))
    rep = jsonl.import_file(fresh, f)
    assert rep.read.corrupt == 1 and rep.new == 2 and rep.read.problems[0][0] == 2, rep
    assert "not JSON" in rep.read.problems[0][1]
    assert jsonl.export(fresh, tmp_path / "again.jsonl") == 2


def test_a_line_nested_deeper_than_the_parser_goes_is_a_corrupt_line(url, tmp_path):
    lines = _exported(url, tmp_path).read_text().splitlines()
    f = tmp_path / "deep.jsonl"
    f.write_text("\n".join([lines[0], "[" * 100000 + "]" * 100000, *lines[1:]]) + "\n")
    rep = jsonl.import_file(AutotuneDB(sqlite_url(tmp_path / "fresh.sqlite")), f)
    assert rep.read.corrupt == 1 and rep.new == 3 and "nested deeper" in rep.read.problems[0][1]


def test_a_database_in_a_folder_nobody_may_write_still_serves_hits(url, tmp_path, monkeypatch):
    """On a read-only mount a WAL database cannot be opened as usual (a reader must create -shm
    beside it): simulated by a connect that fails so unless it asks for an immutable read."""
    run(url, workload(2))
    path = str(tmp_path / "autotune.sqlite")
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    assert not os.path.exists(path + "-wal") or os.path.getsize(path + "-wal") == 0  # nothing an immutable read misses
    from calib import sqlite_files
    from calib.autotune import storage

    real_access, real_connect = os.access, sqlite3.connect

    def read_only_mount(target, *a, uri=False, **kw):
        if not (uri and "immutable=1" in str(target)):
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(target, *a, uri=uri, **kw)

    monkeypatch.setattr(sqlite_files.os, "access", lambda p, mode: False if mode == os.W_OK else real_access(p, mode))
    monkeypatch.setattr(storage.sqlite3, "connect", read_only_mount)
    t, _ = tuner(url)
    for p in workload(2):
        t.select("toy", p, ["alpha", "beta", "gamma"])
    assert t.counters.hits == 2 and t.counters.benchmarks == 0


def test_a_database_path_that_is_a_folder_is_named(tmp_path):
    with pytest.raises(StoreError, match="is a folder"):
        AutotuneDB(sqlite_url(tmp_path)).read_all("f", None)


def test_diff_gate_fails_on_a_parameter_it_could_not_compare(tmp_path, capsys):
    from calib.cli import main

    a = json.loads((ROOT / "profiles" / "nvidia-h200.json").read_text())
    name = next(iter(a["params"]))
    b = json.loads(json.dumps(a))
    b["params"][name]["value"] = float("nan")
    b["params"][name].pop("ci95", None)
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))  # NaN: Python writes it, a strict reader would not
    code = main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--fail-on", "significant"])
    out = capsys.readouterr().out
    assert code == 1 and f"{name} (not compared)" in out
    code = main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--fail-on", "material", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["failed"] == [name] and doc["not_compared"] == [name]


def test_a_closed_pipe_ends_the_command_quietly():
    h200 = str(ROOT / "profiles" / "nvidia-h200.json")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line (`| head -0`)
    try:
        proc = subprocess.run([sys.executable, "-m", "calib", "diff", h200, h200], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT)
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and "Traceback" not in proc.stderr and "Broken pipe" not in proc.stderr


def test_an_import_fills_gaps_in_the_users_entry_and_leaves_its_decision_alone(url, tmp_path):
    p = workload(1)[0]
    t, fam, _ = run(url, [p])
    mine = t.entry("toy", p)
    lines = (_exported(url, tmp_path)).read_text().splitlines()
    obj = next(json.loads(x) for x in lines[1:] if json.loads(x)["descriptor_key"] == mine.descriptor_key)
    extra = dict(obj["timings"][0], candidate="delta", time_us=0.5, ci_low_us=0.4, ci_high_us=0.6)
    obj["timings"].append(extra)
    obj.update(software={"driver": "999", "calib": "old"}, tied=["delta"], offered=["delta", *obj["offered"]],
               winner="delta", winner_time_us=0.5)
    f = tmp_path / "theirs.jsonl"
    f.write_text(lines[0] + "\n" + json.dumps(obj) + "\n")
    rep = jsonl.import_file(AutotuneDB(url), f)
    assert rep.changed == 1 and rep.read.problems == []
    t2, _ = tuner(url)
    after = t2.entry("toy", p)
    assert (after.winner, after.tied, after.software) == (mine.winner, mine.tied, mine.software)
    assert "delta" in after.timings and "delta" in after.offered
    t2.select("toy", p, ["alpha", "beta", "gamma"], time=fam.bind(p)[0])
    assert t2.counters.benchmarks == 0 and t2.counters.hits == 1  # not stale, not timed again


def test_an_export_keeps_a_private_files_mode(url, tmp_path):
    out = _exported(url, tmp_path)
    os.chmod(out, 0o600)
    jsonl.export(AutotuneDB(url), out)
    assert os.stat(out).st_mode & 0o777 == 0o600


def test_a_line_with_bytes_that_are_not_utf8_skips_its_line_and_imports_the_rest(url, tmp_path):
    """Read with errors="replace", a name with a stray byte was imported as another name."""
    lines = _exported(url, tmp_path).read_bytes().splitlines()
    lines[1] = lines[1].replace(b'"candidate":"alpha"', b'"candidate":"alph\xe9"')
    f = tmp_path / "latin1.jsonl"
    f.write_bytes(b"\n".join(lines) + b"\n")
    rep = jsonl.import_file(AutotuneDB(sqlite_url(tmp_path / "fresh.sqlite")), f)
    assert rep.read.corrupt == 1 and rep.new == 2, rep
    assert rep.read.problems[0][0] == 2 and "not UTF-8 (byte 0xe9" in rep.read.problems[0][1], rep.read.problems


def _special(kind, tmp_path):
    path = tmp_path / f"{kind}.autotune.jsonl"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dead link":
        path.symlink_to(tmp_path / "nowhere")
    else:  # a link to a device that never ends
        path.symlink_to("/dev/zero")
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "endless device"])
def test_an_import_of_anything_but_a_regular_file_is_one_line_naming_it(kind, url, tmp_path):
    """A FIFO with no writer had hung the import, and /dev/zero had been read until memory ran out."""
    path = _special(kind, tmp_path)
    out = subprocess.run([sys.executable, "-m", "calib", "cache", "import", str(path), "--db", url, "--backend",
                          "sim"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert str(path) in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.timeout(60)
def test_a_shipped_folder_holding_what_is_no_file_is_warned_about_and_tuning_goes_on(url, tmp_path):
    """Every select of the family had raised (a folder, a dead link) or hung (a FIFO) on them."""
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    paths = [_special(kind, shipped) for kind in ("folder", "fifo", "dead link", "endless device")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t, fam, choices = run(url, workload(2), shipped_dir=shipped)
    assert len(choices) == 2 and t.counters.misses == 2
    said = " ".join(str(w.message) for w in caught)
    assert all(str(p) in said for p in paths), said


@pytest.mark.parametrize("days", ["1e300", "3000000"])
def test_prune_by_an_age_older_than_any_date_prunes_nothing(days, url, capsys):
    from calib.cli import main

    run(url, workload(2))
    assert main(["cache", "prune", "--older-than-days", days, "--db", url, "--backend", "sim"]) == 0
    assert "0 entries pruned" in capsys.readouterr().out
    assert len(AutotuneDB(url).read_all()[0]) == 2


def test_prune_by_age_leaves_an_entry_whose_date_is_not_text(url, tmp_path, capsys):
    from calib.cli import main

    lines = _exported(url, tmp_path).read_text().splitlines()
    obj = json.loads(lines[1])
    obj["provenance"]["when"] = 5
    f = tmp_path / "odd.jsonl"
    f.write_text(lines[0] + "\n" + json.dumps(obj) + "\n")
    other = sqlite_url(tmp_path / "other.sqlite")
    assert jsonl.import_file(AutotuneDB(other), f).new == 1
    assert main(["cache", "prune", "--older-than-days", "0", "--db", other, "--backend", "sim"]) == 0
    assert "0 entries pruned" in capsys.readouterr().out


@pytest.mark.parametrize("winner", ["direct", "[1, 2]", "5"])
def test_a_launch_shape_entry_whose_winner_is_no_knob_dict_is_corrupt_and_tuned_again(winner, url):
    """A DRAM launch-shape entry whose winner is not a JSON object (a hand edit, another family's
    name) had ended `calib run` in a JSONDecodeError, or handed the tuner a number as its knobs."""
    from calib.autotune.decide import Timing
    from calib.autotune.entries import Entry
    from calib.autotune.tuning_cache import PersistentTuningCache
    from calib.keys import canonical_json, descriptor_hash

    problem = {"kind": "copy", "size_bytes": 1 << 30}
    key = descriptor_hash(problem)
    t = autotune.Autotuner(TOY, {"calib": "0.1.0"}, url=url, persist=True, shipped_dir="/nonexistent")
    t.db.replace(Entry(family="launch", descriptor_key=key, device_key=t.device_key,
                       descriptor=canonical_json(problem), device=t.device, software=t.software, protocol={},
                       winner=winner, winner_time_us=1.0, tied=[winner], offered=[winner],
                       timings={winner: Timing(winner, "ok", 1.0, 0.9, 1.1, 0.05, 10)}))
    fresh = autotune.Autotuner(TOY, {"calib": "0.1.0"}, url=url, persist=True, shipped_dir="/nonexistent")
    with pytest.warns(autotune.AutotuneWarning, match="not a JSON object of knobs"):
        assert PersistentTuningCache("launch", fresh).get(key) is None
    assert fresh.counters.corrupt == 1 and fresh.counters.misses == 1


@pytest.mark.parametrize("stored", ["not json", "[NaN, 1.0]", '["x", 2]', "[1e999]"])
def test_an_export_leaves_out_damaged_samples_and_keeps_the_rest(stored, url, tmp_path):
    """One stored samples cell that is not a list of finite numbers had ended the whole export in a
    JSONDecodeError or ValueError; written as it was, it made the exported line fail its import."""
    run(url, workload(2))
    con = sqlite3.connect(tmp_path / "autotune.sqlite")
    con.execute("UPDATE autotune_timing SET samples_us = ? WHERE id = 1", (stored,))
    con.commit()
    con.close()
    out = tmp_path / "e.jsonl"
    assert jsonl.export(AutotuneDB(url), out) == 2
    rep = jsonl.import_file(AutotuneDB(sqlite_url(tmp_path / "fresh.sqlite")), out)
    assert rep.new == 2 and rep.read.problems == []


def test_a_cache_of_a_newer_calibs_schema_is_named_as_such_not_a_missing_column(url, tmp_path, capsys):
    """The cache's fast read goes around the Store (and its schema check): a newer calib's renamed
    column had read as "no such column"."""
    import sqlite3

    from calib.cli import main
    from calib.sqlite_files import path_of

    run(url, workload(1))
    conn = sqlite3.connect(path_of(url))
    conn.execute("UPDATE alembic_version SET version_num = '9999_future'")
    conn.execute("ALTER TABLE autotune_entry RENAME COLUMN winner TO champion")
    conn.commit()
    conn.close()
    assert main(["cache", "list", "--db", url]) == 2
    err = capsys.readouterr().err
    assert "newer calib" in err and "no such column" not in err and "Traceback" not in err
