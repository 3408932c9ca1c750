"""Problem descriptors and their content keys.

A descriptor says what the problem is (sizes, data types, layouts, pad / stride / dilation /
groups, math mode ...), never where it lives: cuDNN.jl keyed its algorithm cache by the pointer
to a C descriptor, which dies with the process, so nothing could be saved or shipped (the CUDA.jl
discussion in ../shared/seeds/). Here a descriptor is data, a dataclass or a mapping, brought to one
plain-JSON form and hashed by :mod:`calib.keys`, so equal problems get equal keys in every process,
Python version and machine.

What is folded together before hashing, on top of calib.keys (sorted keys; tuples and lists; NumPy
and Python scalars; ints and floats distinct; NaN, sets and objects refused with the field's path):

- dataclasses become the mapping of their fields (fields whose name starts with ``_`` are caches,
  not the problem, and are left out), so a dataclass and a dict with the same contents agree;
- enums become their value (a ``str``/``int`` enum equals its plain value), or ``Class.MEMBER``
  when the value is not a scalar;
- dtypes in any spelling (``numpy.float16``, ``numpy.dtype('float16')``, ``torch.float16``,
  ``"half"``, ``"fp16"``, ``"f2"``, ``"<f2"``) become NumPy's name (``"float16"``); strings are read
  as dtypes only in fields named ``dtype`` or ending in ``_dtype`` / ``_type``, where an unknown
  spelling is an error. ``"float"`` is float32 and ``"double"`` float64, as in C and PyTorch.

A plain dict of strings and numbers gets exactly ``calib.keys.descriptor_hash``: the results store,
the tuner and the autotune cache agree on keys.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from ..keys import DescriptorError, canonical_json, descriptor_hash, normalize

__all__ = ["DescriptorError", "canonical_descriptor", "descriptor_json", "descriptor_key", "dtype_name",
           "candidate_id"]

_DTYPES = {
    "float16": ("float16", "half", "fp16", "f2", "<f2", "e", "float16_t", "__half"),
    "bfloat16": ("bfloat16", "bf16", "bfloat", "__nv_bfloat16"),
    "float32": ("float32", "float", "fp32", "f4", "<f4", "single", "f"),
    "float64": ("float64", "double", "fp64", "f8", "<f8", "d"),
    "tfloat32": ("tfloat32", "tf32"),
    "float8_e4m3fn": ("float8_e4m3fn", "fp8_e4m3", "e4m3"),
    "float8_e5m2": ("float8_e5m2", "fp8_e5m2", "e5m2"),
    "int8": ("int8", "i1", "char", "s8"),
    "uint8": ("uint8", "u1", "u8", "byte"),
    "int16": ("int16", "i2", "short"),
    "int32": ("int32", "i4", "<i4", "int", "s32"),
    "int64": ("int64", "i8", "<i8", "long"),
    "bool": ("bool", "?", "bool_"),
}
_ALIASES = {alias: name for name, aliases in _DTYPES.items() for alias in aliases}


def _is_dtype_field(key) -> bool:
    return isinstance(key, str) and (key == "dtype" or key.endswith("_dtype") or key.endswith("_type"))


def _dtype_object_name(value) -> str | None:
    """The name of a dtype object of NumPy, CuPy (NumPy's) or PyTorch, by duck typing, so that
    neither library is imported here."""
    cls = type(value)
    module = cls.__module__ or ""
    if module.startswith("numpy") and not isinstance(value, type) and all(
            hasattr(value, a) for a in ("kind", "char", "names", "name")):
        return str(value.name)  # numpy.dtype('float16') and its subclasses
    if isinstance(value, type) and (value.__module__ or "").startswith("numpy") and hasattr(value, "dtype"):
        return str(getattr(value, "__name__", ""))  # numpy.float16, the scalar type
    if module.startswith("torch") and cls.__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return None


def dtype_name(value, *, field: str = "dtype") -> str:
    """NumPy's name of a dtype given in any of the spellings above; DescriptorError otherwise."""
    name = _dtype_object_name(value)
    if name is None and isinstance(value, str):
        name = value.strip().lower().removeprefix("torch.").removeprefix("numpy.").removeprefix("np.")
    canonical = _ALIASES.get(name) if name is not None else None
    if canonical is None:
        known = ", ".join(sorted(_DTYPES))
        raise DescriptorError(f"{field} is {value!r}, not a data type calib knows ({known}, or their usual "
                              "spellings)")
    return canonical


def _plain(value, path: str, key=None):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), f"{path}[{f.name!r}]", f.name)
                for f in dataclasses.fields(value) if not f.name.startswith("_")}
    if isinstance(value, enum.Enum):
        inner = value.value
        if isinstance(inner, (str, int, float, bool)) and not isinstance(inner, enum.Enum):
            value = inner
        else:
            return f"{type(value).__name__}.{value.name}"
    if _dtype_object_name(value) is not None or (_is_dtype_field(key) and isinstance(value, str)):
        return dtype_name(value, field=path)
    if isinstance(value, Mapping):
        return {k: _plain(v, f"{path}[{k!r}]", k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def canonical_descriptor(descriptor) -> dict | list:
    """The plain-JSON form of a descriptor (see the module docstring); DescriptorError names the
    first field that has none."""
    if isinstance(descriptor, (str, bytes)) or descriptor is None:
        raise DescriptorError(f"a descriptor is a dataclass or a mapping of its fields, not {descriptor!r:.60}")
    try:
        return normalize(_plain(descriptor, "descriptor"))
    except RecursionError:  # a dict that holds itself (found here before normalize could say so), or nesting
        raise DescriptorError("the descriptor contains itself, or nests deeper than Python recurses: a descriptor "
                              "is a few levels of sizes, types and flags") from None


def descriptor_json(descriptor) -> str:
    """The one text of a descriptor: what is hashed, and what the database keeps."""
    return canonical_json(canonical_descriptor(descriptor))


def descriptor_key(descriptor) -> str:
    """The content key of a problem descriptor: SHA-256 of its canonical JSON, in hex."""
    return descriptor_hash(canonical_descriptor(descriptor))


def candidate_id(candidate) -> str:
    """How a candidate is named in the cache: its name when it is a string (an algorithm), else the
    canonical JSON of its knobs (a launch shape). Stable across processes, like descriptor keys."""
    if isinstance(candidate, str):
        return candidate
    name = getattr(candidate, "autotune_name", None)
    if isinstance(name, str):
        return name
    return canonical_json(canonical_descriptor(candidate))
