"""Launch parameters as a plain dict that the autotune cache can name, and what families share."""

from __future__ import annotations

import dataclasses

from .registry import HeuristicError


class Knobs(dict):
    """A candidate's launch parameters: a dict (what a heuristic returns) whose
    ``autotune_name`` is ``k=v`` pairs in a stable order, so the tuning database's rows read as
    the launch shape they time (``block=256.ept=2.grid=cover.vec=4``)."""

    @property
    def autotune_name(self) -> str:
        return ".".join(f"{k}={self[k]}" for k in sorted(self))

    def __repr__(self):
        return f"Knobs({self.autotune_name})"


def knobs(params: dict) -> Knobs:
    return params if isinstance(params, Knobs) else Knobs(params)


def descriptor_from(cls, obj, kind: str):
    """A family's descriptor from a mapping (a JSON line), with the field at fault named."""
    if isinstance(obj, cls):
        return obj
    if not isinstance(obj, dict):
        raise HeuristicError(f"a {kind} descriptor must be a JSON object, not {type(obj).__name__}")
    names = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
    extra = set(obj) - names - {"kind"}
    if extra:
        raise HeuristicError(f"{kind} descriptor: unknown field(s) {', '.join(sorted(extra))} "
                             f"(fields: {', '.join(sorted(names))})")
    try:
        return cls(**{k: v for k, v in obj.items() if k != "kind"})
    except TypeError as exc:
        raise HeuristicError(f"{kind} descriptor: {exc}") from None


def positive_int(name: str, value, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise HeuristicError(f"{kind} descriptor: {name} is {value!r}, not an integer")
    if value < 1:
        raise HeuristicError(f"{kind} descriptor: {name} is {value}, must be at least 1")
    return int(value)


ITEMSIZE = {"float16": 2, "float32": 4, "float64": 8}
