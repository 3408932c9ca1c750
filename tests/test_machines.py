"""The machines file beside a shipped profile (``calib.machines``): read field by field, a
malformed or hostile one refused with what is wrong named, never half used."""

import json

import pytest

from calib.machines import MIN_MACHINES, MachinesError, Spread, path_beside, read_machines


def write(tmp_path, doc, name="m.machines.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def entry(value, measured="2026-12-01", source="bench/results/x.md: call 1"):
    return {"value": value, "measured": measured, "source": source}


def test_a_spread_holds_values_within_the_machines_range_widened_by_the_measurements_ci(tmp_path):
    path = write(tmp_path, {"schema": "calib.machines/1",
                            "params": {"a": [entry(10), entry(12, "2026-11-29"), entry(11)], "b": [entry(1)]}})
    spreads = read_machines(path)
    assert set(spreads) == {"a"}  # b: one machine says nothing of a spread
    a = spreads["a"]
    assert (a.low, a.high, a.first, a.last) == (10, 12, "2026-11-29", "2026-12-01")
    assert a.contains(11) and not a.contains(12.5) and a.contains(12.5, rel_halfwidth=0.05)
    assert not a.contains(9.4, 0.05) and a.contains(9.6, 0.05)
    assert MIN_MACHINES == 3 and isinstance(a, Spread)


def test_beside_a_profile_is_its_stem_with_machines_json(tmp_path):
    assert path_beside(tmp_path / "nvidia-h200.json") == tmp_path / "nvidia-h200.machines.json"


@pytest.mark.parametrize("doc, problem", [
    ("{", "not valid JSON"),
    ("[1, 2]", "not an object"),
    ('{"schema": "calib.machines/1", "params": {"a": [{"value": NaN, "measured": "d", "source": "s"}]}}',
     "not valid JSON"),
    ({"schema": "calib.profile/1", "params": {}}, "not calib.machines"),
    ({"schema": "calib.machines/x", "params": {}}, "not calib.machines"),
    ({"schema": "calib.machines/0", "params": {}}, "does not exist"),
    ({"schema": "calib.machines/2", "params": {}}, "newer than this calib"),
    ({"schema": "calib.machines/1"}, "'params' is missing"),
    ({"schema": "calib.machines/1", "params": {"a": 5}}, "not a list of machines"),
    ({"schema": "calib.machines/1", "params": {"a": ["x"]}}, r"params\['a'\]\[0\] is not an object"),
    ({"schema": "calib.machines/1", "params": {"a": [entry(-1)]}}, "not a positive finite number"),
    ({"schema": "calib.machines/1", "params": {"a": [entry(True)]}}, "not a positive finite number"),
    ({"schema": "calib.machines/1", "params": {"a": [entry("800")]}}, "not a positive finite number"),
    ({"schema": "calib.machines/1", "params": {"a": [entry(1, measured="")]}}, "not a date"),
    ({"schema": "calib.machines/1", "params": {"a": [entry(1, source=None)]}}, "say where the value was recorded"),
])
def test_a_malformed_machines_file_is_refused_naming_the_field(tmp_path, doc, problem):
    path = write(tmp_path, doc)
    with pytest.raises(MachinesError, match=problem) as refused:
        read_machines(path)
    assert str(path) in str(refused.value)


def test_a_directory_a_fifo_or_a_huge_file_is_refused_without_reading_it(tmp_path):
    import os

    with pytest.raises(MachinesError, match="is a directory, not a file"):
        read_machines(tmp_path)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(MachinesError, match="is a FIFO"):
        read_machines(fifo)  # would block on open
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20))
    with pytest.raises(MachinesError, match="a machines file may have"):
        read_machines(big)


@pytest.mark.parametrize("text, why", [
    ("[" * 100000 + "]" * 100000, "not valid JSON"),  # nested past the parser: a RecursionError
    ('{"schema": "calib.machines/\u00b2", "params": {}}', "schema"),  # a digit to str.isdigit, not to int()
    ('{"schema": "calib.machines/1", "params": {"p": [{"value": 1' + "0" * 400 + ', "measured": "2026-12-01", '
     '"source": "x"}]}}', "not a positive finite number"),
])
def test_a_hostile_machines_file_is_one_error_naming_it(tmp_path, text, why):
    path = tmp_path / "m.machines.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MachinesError, match=why) as caught:
        read_machines(path)
    assert str(path) in str(caught.value)

