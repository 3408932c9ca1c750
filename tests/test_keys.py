"""Content keys: one text and one hash per descriptor, stable across releases and processes."""

import subprocess
import sys
from enum import IntEnum

import numpy as np
import pytest

from calib.keys import DescriptorError, canonical_json, descriptor_hash

# Computed with calib.store.core.descriptor_hash before calib.keys existed: databases written then
# are keyed by these, so the same descriptor must keep the same hash.
OLD_DESCRIPTOR = {"experiment": "dram", "kind": "copy", "width_bytes": 16, "size_bytes": 1 << 30, "ratio": 0.25,
                  "flag": True, "none": None, "shape": [1, 2.5, "x"], "nested": {"b": 1, "a": [{"z": 0}]},
                  "unicode": "µs"}
OLD_TEXT = ('{"experiment":"dram","flag":true,"kind":"copy","nested":{"a":[{"z":0}],"b":1},"none":null,'
            '"ratio":0.25,"shape":[1,2.5,"x"],"size_bytes":1073741824,"unicode":"\\u00b5s","width_bytes":16}')
OLD_HASH = "087e62e5b1d28715ccf6a766c6ea83add356fa4894524a3df43570aae72c1dd0"
OLD_DRAM_HASH = "219f0a093188ba6150989eefe350936393cddc30cf609cbdf7cdea9a3af1ba5a"


def test_hashes_of_plain_descriptors_are_those_of_earlier_releases():
    assert canonical_json(OLD_DESCRIPTOR) == OLD_TEXT
    assert descriptor_hash(OLD_DESCRIPTOR) == OLD_HASH
    assert descriptor_hash({"experiment": "dram", "kind": "read", "width_bytes": 16, "size_bytes": 1 << 28}) \
        == OLD_DRAM_HASH


def test_key_order_does_not_matter_and_contents_do():
    a = {"kind": "read", "width_bytes": 16, "nested": {"x": 1, "y": 2}}
    b = {"nested": {"y": 2, "x": 1}, "width_bytes": 16, "kind": "read"}
    assert canonical_json(a) == canonical_json(b) == '{"kind":"read","nested":{"x":1,"y":2},"width_bytes":16}'
    assert descriptor_hash(a) != descriptor_hash({**a, "width_bytes": 8})


def test_ints_and_floats_stay_distinct_and_bools_are_not_ints():
    assert canonical_json({"n": 1}) != canonical_json({"n": 1.0})
    assert canonical_json({"n": True}) != canonical_json({"n": 1})
    assert canonical_json({"n": 1.0}) == '{"n":1.0}'


def test_tuples_and_lists_are_the_same_sequence():
    assert canonical_json({"grid": (4, 2)}) == canonical_json({"grid": [4, 2]}) == '{"grid":[4,2]}'


def test_numpy_scalars_are_their_python_values():
    plain = {"size_bytes": 1 << 28, "ratio": 0.5, "ok": True, "wide": 0.1}
    with_numpy = {"size_bytes": np.int64(1 << 28), "ratio": np.float32(0.5), "ok": np.bool_(True),
                  "wide": np.float64(0.1)}
    assert canonical_json(with_numpy) == canonical_json(plain)
    assert descriptor_hash({"n": np.uint8(3), "v": [np.int32(1), np.float16(2.0)]}) == \
        descriptor_hash({"n": 3, "v": [1, 2.0]})
    # a float32 is the value it holds, not the decimal it was written as: honest, if surprising
    assert canonical_json({"x": np.float32(0.1)}) == '{"x":0.10000000149011612}'
    assert canonical_json({"x": np.array(7)}) == '{"x":7}'  # a 0-d array is a scalar too


def test_int_subclasses_encode_as_their_numbers():
    class Width(IntEnum):
        WIDE = 16

    assert canonical_json({"w": Width.WIDE}) == '{"w":16}'


@pytest.mark.parametrize("bad, where", [
    ({"ratio": float("nan")}, "descriptor['ratio']"),
    ({"a": {"b": [1, float("inf")]}}, "descriptor['a']['b'][1]"),
    ({"x": np.float64("-inf")}, "descriptor['x']"),
    ({"x": np.float32("nan")}, "descriptor['x']"),
])
def test_nan_and_infinities_are_refused_naming_the_field(bad, where):
    with pytest.raises(DescriptorError) as err:
        canonical_json(bad)
    assert str(err.value).startswith(f"{where} is ") and "no canonical JSON form" in str(err.value)


@pytest.mark.parametrize("bad, where, what", [
    ({"layouts": {"NCHW", "NHWC"}}, "descriptor['layouts']", "builtins.set"),
    ({"a": [1, {"b": object()}]}, "descriptor['a'][1]['b']", "builtins.object"),
    ({"shape": np.array([1, 2])}, "descriptor['shape']", "numpy.ndarray"),
    ({"b": b"bytes"}, "descriptor['b']", "builtins.bytes"),
])
def test_unsupported_types_are_refused_naming_the_field(bad, where, what):
    with pytest.raises(DescriptorError) as err:
        descriptor_hash(bad)
    assert str(err.value).startswith(f"{where} is a {what}")


def test_non_string_keys_and_cycles_are_refused():
    with pytest.raises(DescriptorError, match=r"descriptor\['m'\] has the key 1 of type int"):
        canonical_json({"m": {1: "a"}})
    loop = {"a": []}
    loop["a"].append(loop)
    with pytest.raises(DescriptorError, match=r"descriptor\['a'\]\[0\] contains itself"):
        canonical_json(loop)
    shared = [1, 2]
    assert canonical_json({"a": shared, "b": shared}) == '{"a":[1,2],"b":[1,2]}'  # shared is not a cycle


def test_descriptor_error_is_a_value_error():
    assert issubclass(DescriptorError, ValueError)


def test_importing_keys_loads_neither_numpy_nor_sqlalchemy():
    code = ("import sys, calib.keys; heavy = [m for m in ('numpy', 'sqlalchemy', 'pandas') if m in sys.modules]; "
            "print(calib.keys.descriptor_hash({'a': 1})); assert not heavy, heavy")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
