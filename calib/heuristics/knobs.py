"""Launch parameters as a plain dict that the autotune cache can name, and what families share:
the descriptor's base class, its field checks, and the output check of a GPU candidate."""

from __future__ import annotations

import dataclasses
import math
import numbers

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


# What a knob of a family's launch may be (each family's ``KNOB_VALUES``): an integer of at least 1
# (COUNT) or 0 (COUNT0), or one of the strings of a tuple (which may list COUNT too: pointwise's
# grid is "cover" or blocks per SM).
COUNT, COUNT0 = "an integer >= 1", "an integer >= 0"


def check_knobs(kind: str, spec: dict, params) -> Knobs:
    """``params`` as the family's launch parameters: every knob of ``spec`` present with a value it
    allows (an integral float such as ``256.0`` from a JSON file becomes ``256``, so it names the
    same candidate), other keys kept as given (a user's own knobs ride along). HeuristicError naming
    the knob otherwise: a choice or an override that no kernel of the family could launch."""
    if not isinstance(params, dict):
        raise HeuristicError(f"{kind} launch parameters must be a mapping, not {type(params).__name__}")
    missing = [name for name in spec if name not in params]
    if missing:
        raise HeuristicError(f"{kind} launch parameters {_short(params)} lack {', '.join(missing)} "
                             f"(a {kind} launch has {', '.join(spec)})")
    out = dict(params)
    for name, allowed in spec.items():
        options = allowed if isinstance(allowed, tuple) else (allowed,)
        value = params[name]
        if isinstance(value, str):
            if value in options:
                continue
        elif isinstance(value, numbers.Real) and not isinstance(value, (bool, np_bool_types())):
            least = 1 if COUNT in options else 0 if COUNT0 in options else None
            integral = isinstance(value, numbers.Integral) or (math.isfinite(value) and float(value).is_integer())
            if least is not None and integral and least <= value <= MAX_COUNT:
                out[name] = int(value)  # NumPy's int64 too: a user's heuristic computes with arrays
                continue
        raise HeuristicError(f"{kind} launch parameter {name} is {_short(value)}; it must be "
                             f"{' or '.join(o if o in (COUNT, COUNT0) else repr(o) for o in options)}")
    return Knobs(out)


MAX_BLOCK_THREADS = 1024  # CUDA's limit on the threads of one block, every architecture since 2.0


def vector_problem(d, vec: int) -> str | None:
    """Why ``vec`` elements of ``d``'s dtype are no vector access (None if they are one): CUDA loads
    1, 2, 4, 8 or 16 bytes at once."""
    width = vec * d.itemsize_bytes
    if width > 16 or width & (width - 1):
        return f"vec {vec} of {d.dtype} is {width} bytes; a vector access is 1, 2, 4, 8 or 16 bytes"
    return None


def block_problem(threads: int, name: str) -> str | None:
    if threads > MAX_BLOCK_THREADS:
        return f"{name} {threads} is more than the {MAX_BLOCK_THREADS} threads a CUDA block may have"
    return None


def np_bool_types() -> tuple:
    """NumPy's bool type where NumPy is loaded (it is no number of threads), without importing it."""
    import sys

    np = sys.modules.get("numpy")
    return (np.bool_,) if np is not None else ()


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


ITEMSIZE = {"float16": 2, "float32": 4, "float64": 8}


class FamilyDescriptor:
    """What every family's (frozen dataclass) descriptor has: a ``dtype`` field, hence
    ``itemsize_bytes``; ``memory_bound`` (True unless the family says otherwise, since the
    predictor's error is reported for memory-bound problems apart); and :meth:`parse`, the
    descriptor from a mapping (a JSON line) with the field at fault named. Subclasses set
    ``KIND``."""

    KIND = "?"

    @property
    def itemsize_bytes(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def memory_bound(self) -> bool:
        return True

    @classmethod
    def parse(cls, obj):
        if isinstance(obj, cls):
            return obj
        kind = cls.KIND
        if not isinstance(obj, dict):
            raise HeuristicError(f"a {kind} descriptor must be a JSON object, not {type(obj).__name__}")
        names = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        extra = set(obj) - names - {"kind"}
        if extra:
            raise HeuristicError(f"{kind} descriptor: unknown field(s) {', '.join(sorted(extra))} "
                                 f"(fields: {', '.join(sorted(names))})")
        required = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_") and f.init
                    and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        missing = required - set(obj)
        if missing:
            raise HeuristicError(f"{kind} descriptor: missing field(s) {', '.join(sorted(missing))} "
                                 f"(fields: {', '.join(sorted(names))})")
        try:
            return cls(**{k: v for k, v in obj.items() if k != "kind"})
        except TypeError as exc:
            raise HeuristicError(f"{kind} descriptor: {exc}") from None

    def _check_fields(self, choices: dict, counts=()):
        """``choices``: field -> allowed values; ``counts``: fields that must be integers >= 1
        (stored back as int, so that ``3e7`` from a JSON line is the same problem as ``30000000``)."""
        for name, allowed in choices.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise HeuristicError(f"{self.KIND} descriptor: {name} {value!r} is none of {', '.join(allowed)}")
        for name in counts:
            object.__setattr__(self, name, positive_int(name, getattr(self, name), self.KIND))


# The largest count a descriptor may hold: what a signed 64-bit index reaches. Beyond it no GPU
# could address the tensor, and the models' float arithmetic (a matmul's m*n*k, a row's bytes
# squared in a margin) overflows, which must not end an evaluation of other problems.
MAX_COUNT = 2**63 - 1


def positive_int(name: str, value, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise HeuristicError(f"{kind} descriptor: {name} is {value!r}, not an integer")
    if value < 1:
        raise HeuristicError(f"{kind} descriptor: {name} is {value}, must be at least 1")
    if value > MAX_COUNT:
        raise HeuristicError(f"{kind} descriptor: {name} is {_magnitude(value)}, more than a 64-bit index counts "
                             f"(2**63 - 1); no GPU holds such a tensor")
    return int(value)


def _magnitude(value: int) -> str:
    """A huge integer in a message: ``%g`` where a float holds it, else its digit count (an integer
    of 400 digits does not convert to float, and should not fill the message)."""
    try:
        return f"{float(value):.4g}"
    except OverflowError:
        return f"an integer of {len(str(value)) if value < 10**4000 else 'over 4000'} digits"


def require_cupy(what: str):
    from .._optional import require

    return require("cupy", what)


def check_output(case, k, tolerance: float, *, relative_to: str = "element") -> bool:
    """Run candidate ``k`` of a GPU case into ``case.y`` (filled with NaN first, so that a kernel
    that writes nothing fails) and compare it with ``case.reference()`` (float64).

    ``relative_to="element"``: ``max |y - ref| / (1 + |ref|)``, for outputs computed element by
    element (pointwise, normalization); ``"max"``: ``max |y - ref| / max |ref|``, for a matmul,
    whose rounding error grows with the sum, not with each output. Raises AssertionError (the
    autotuner records the candidate as wrong) past ``tolerance``."""
    cp = require_cupy("checking a kernel family's candidates on a GPU")
    case.y.fill(float("nan"))
    case.run(k)
    ref = case.reference()
    diff = cp.abs(case.y.astype(cp.float64) - ref)
    if relative_to == "element":
        err, label = float(cp.max(diff / (1 + cp.abs(ref)))), "max |y - ref| / (1 + |ref|)"
    else:
        err, label = float(diff.max()) / (float(cp.abs(ref).max()) or 1.0), "max |y - ref| / max |ref|"
    if not math.isfinite(err) or err > tolerance:
        raise AssertionError(f"{label} = {err:.3g}, tolerance {tolerance:g}")
    return True
