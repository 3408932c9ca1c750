"""Content keys: the one text and the one hash of a problem or config descriptor.

A descriptor is identified by what it says, never by a pointer, an object id or the order its
keys were written in, so the same problem gets the same key in every process on every machine:
the results store keys its config rows by it and the tuner keys its winners by it. This module is
deliberately light (standard library only: no numpy, no SQLAlchemy), because a library asking for
a tuned winner should not pay for the scientific stack to compute a key.

Canonical form: JSON with sorted keys and no spaces, as ``json.dumps`` writes it (so the hashes of
databases written before this module existed stay the same). Before encoding, a descriptor is
normalized so that equal contents give equal text and unequal contents never collide:

- ints and floats stay distinct (``1`` and ``1.0`` are different problems), as in JSON;
- NaN and infinities are refused: they have no JSON spelling and NaN is not even equal to itself;
- tuples and lists are the same sequence;
- numpy scalars (``np.int64``, ``np.float32``, ``np.bool_``) become the Python scalar of the same
  value through their ``.item()``, found by duck typing so that numpy need not be imported;
- anything else (a set, whose order is arbitrary; an object, whose text is its address) is an
  error that names the field, since silently stringifying it would make two runs disagree.
"""

from __future__ import annotations

import hashlib
import json
import math

from .errors import CalibError

__all__ = ["DescriptorError", "canonical_json", "descriptor_hash", "normalize"]


class DescriptorError(CalibError, ValueError):
    """A descriptor holds something that has no single canonical JSON text."""


def _path_text(path: tuple) -> str:
    out = "descriptor"
    for part in path:
        out += f"[{part!r}]"
    return out


def normalize(value, _path: tuple = (), _open: frozenset = frozenset()):
    """The plain-JSON form of ``value``: dicts with string keys, lists, str, int, float, bool, None.

    Raises DescriptorError naming the field path (``descriptor['shape'][2]``) of the first value
    that has no honest canonical form."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:  # SQLite's INTEGER, PostgreSQL's BIGINT, every index on a GPU
            raise DescriptorError(f"{_path_text(_path)} is an integer outside the signed 64-bit range (it needs "
                                  f"{value.bit_length() + 1} bits): the databases keep no larger one, and no GPU "
                                  "indexes one")
        return int(value)  # an IntEnum or other int subclass encodes as its number
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DescriptorError(f"{_path_text(_path)} is {value!r}: NaN and infinities have no canonical "
                                  "JSON form; describe the problem with finite numbers")
        return float(value)
    if isinstance(value, (dict, list, tuple)):
        if id(value) in _open:
            raise DescriptorError(f"{_path_text(_path)} contains itself")
        inner = _open | {id(value)}
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    # json.dumps would write 1 and "1" as the same key: refuse rather than merge.
                    raise DescriptorError(f"{_path_text(_path)} has the key {k!r} of type {type(k).__name__}: "
                                          "descriptor keys must be strings")
                out[str(k)] = normalize(v, _path + (k,), inner)
            return out
        return [normalize(v, _path + (i,), inner) for i, v in enumerate(value)]
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():  # a numpy scalar or 0-d array
        plain = item()
        if isinstance(plain, (bool, int, float, str)):
            return normalize(plain, _path, _open)
    raise DescriptorError(f"{_path_text(_path)} is a {type(value).__module__}.{type(value).__qualname__} "
                          f"({value!r:.80}): a descriptor holds only str, int, float, bool, None, lists, tuples, "
                          "dicts with string keys, and numpy scalars")


def canonical_json(descriptor) -> str:
    """The one text of a descriptor: sorted keys, no spaces. Equal contents, equal text."""
    try:
        return json.dumps(normalize(descriptor), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except RecursionError:
        raise DescriptorError("the descriptor nests deeper than Python recurses (or contains itself): a "
                              "descriptor is a few levels of sizes, types and flags") from None


def descriptor_hash(descriptor) -> str:
    """SHA-256 of :func:`canonical_json`, in hex: the descriptor's content key."""
    return hashlib.sha256(canonical_json(descriptor).encode()).hexdigest()
