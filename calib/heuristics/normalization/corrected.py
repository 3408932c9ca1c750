"""The normalization model's recorded corrections and the corrected model: the file (CORRECTIONS_FILE,
format version 6, and what each version added), :class:`Corrections` and its loader (checked field
by field; versions 2-5 read forward), the corrections in force (:func:`corrections`,
:func:`use_corrections`) and :func:`model_us`, the physical model times its class's factor."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

from ...errors import CalibError
from .. import predictor as P
from .candidates import DTYPES, NormDescriptor
from .classes import LOOP_LOG2, MIN_CLASS_CANDIDATES, kernel_class, parent_class
from .model import plain_model_us
from .residual import log_factor as residual_log_factor
from .residual import residual_for


CORRECTIONS_FILE = Path(__file__).parent.with_name("normalization_corrections.json")  # beside the package
CORRECTIONS_FORMAT = "calib.heuristics.normalization.corrections"
CORRECTIONS_VERSION = 6  # 2: pair_bias; 3: multi-pass classes by loop band (vectors_per_thread_log2);
# 4: "software", the CUDA runtime and CuPy the recordings ran under (predictor.KERNEL_SOFTWARE: NVRTC
# compiled the kernels whose times were learned); a profile under others gets the plain model. A file
# of version 2 or 3 is read forward as applying under any software, as it was.
# 5: "compute_capability", the recordings' GPU's: the corrections apply to every GPU of that
# architecture (predictor.measured_on says why); a file of version 2-4 to its named GPU alone.
# 6: "persistent_bias_by_dtype", the few-rows bias of each dtype's rows (why: at BIAS_QUANTILE, biases.py); a
# file of version 2-5 is read forward with its one "persistent_bias" for every dtype, as it was.
SOFTWARE_SINCE = 4
ARCH_SINCE = 5
BIAS_BY_DTYPE_SINCE = 6


class CorrectionsError(CalibError, ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Corrections:
    log_factors: dict  # kernel_class (or its parent_class) -> median log(measured / predicted)
    persistent_bias: float  # log, the few-rows group's (pooled over dtypes: a dtype without its own takes it)
    source: str = ""
    device: str = ""  # the GPU model the recordings were measured on: applied to its profiles only
    pair_bias: float = 0.0  # log, the two-blocks-per-SM L2-served group's (:func:`in_pair_group`)
    software: dict | None = None  # what the recordings ran under (None: a file from before it was recorded)
    compute_capability: str | None = None  # the recordings' GPU's (None: applied to ``device`` alone)
    persistent_bias_by_dtype: dict | None = None  # dtype -> log, the few-rows bias of that dtype's rows

    def few_rows_bias(self, dtype: str) -> float:
        """The few-rows bias of ``dtype``'s rows: its own where fitted, else the pooled one."""
        by = self.persistent_bias_by_dtype or {}
        return by.get(dtype, self.persistent_bias)

    def applies_to(self, q) -> bool:
        """Fitted on one GPU model's recordings, the factors say nothing of another's (or of the
        simulated device, whose truth is the plain model): only a profile of that GPU, under the
        software they were measured with, gets them."""
        return P.measured_on(q, self.device, self.software, "normalization's corrections", self.compute_capability)

    def log_factor(self, d: NormDescriptor, k) -> float:
        """The class's factor; a multi-pass loop band without one takes its kernel's over every band
        (a version-1 or 2 file has only those), a kernel without either the plain model (0)."""
        cls = kernel_class(d, k)
        if cls in self.log_factors:
            return self.log_factors[cls]
        parent = parent_class(cls)
        return self.log_factors.get(parent, 0.0) if parent is not None else 0.0


def _field(obj, name, kinds, where):
    v = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(v, kinds) or isinstance(v, bool):
        raise CorrectionsError(f"{where}: {name!r} must be {kinds}, not {v!r}")
    return v


def _float(v) -> float:
    """``v`` as a float, an int too large for one (a hostile file's 10**400) as inf, which the
    checks then refuse: math.isfinite would raise OverflowError on it."""
    try:
        return float(v)
    except OverflowError:
        return math.inf


def load_corrections(path) -> Corrections:
    """The corrections at ``path``, checked field by field; a bad file is a CorrectionsError naming it."""
    from ..registry import read_text

    p = Path(path)
    text = read_text(p, "normalization corrections", CorrectionsError)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an int of > 4300 digits
        raise CorrectionsError(f"normalization corrections {p} is not JSON ({exc})") from None
    where = f"normalization corrections {p}"
    if not isinstance(doc, dict) or doc.get("format") != CORRECTIONS_FORMAT:
        raise CorrectionsError(f"{where} is not of format {CORRECTIONS_FORMAT!r}")
    version = _field(doc, "version", int, where)
    if not 2 <= version <= CORRECTIONS_VERSION:  # 2 migrates forward: its classes span every loop band
        raise CorrectionsError(f"{where} has version {version}; this calib reads 2 to {CORRECTIONS_VERSION}")
    for rec in _field(doc, "fitted_on", list, where):
        for name in ("recording", "profile"):
            _field(rec, name, str, f"{where}, fitted_on")
    bias = _field(doc, "persistent_bias", (int, float), where)
    pair = _field(doc, "pair_bias", (int, float), where)
    device = _field(doc, "device", str, where)
    software = None
    if version >= SOFTWARE_SINCE:
        software = _field(doc, "software", dict, where)
        for name in P.KERNEL_SOFTWARE:
            if not _field(software, name, str, f"{where}, software"):
                raise CorrectionsError(f"{where}, software: {name!r} must be a non-empty version")
        software = {name: software[name] for name in P.KERNEL_SOFTWARE}
    arch = None
    if version >= ARCH_SINCE:
        arch = _field(doc, "compute_capability", str, where)
        if P.device_arch({"compute_capability": arch}) is None:
            raise CorrectionsError(f"{where}: compute_capability {arch!r} is not a GPU's, as \"9.0\"")
    by_dtype = None
    if version >= BIAS_BY_DTYPE_SINCE:
        by_dtype = {}
        for dt, b in _field(doc, "persistent_bias_by_dtype", dict, where).items():
            if dt not in DTYPES or not isinstance(b, (int, float)) or isinstance(b, bool) \
                    or not 0 <= _float(b) < 1:
                raise CorrectionsError(f"{where}: persistent_bias_by_dtype {dt!r}: {b!r} is not a bias in [0, 1) "
                                       f"of a dtype of {DTYPES}")
            by_dtype[dt] = float(b)
    factors = {}
    for i, c in enumerate(_field(doc, "classes", list, where)):
        w = f"{where}, classes[{i}]"
        strategy, dtype = _field(c, "strategy", str, w), _field(c, "dtype", str, w)
        vec, buf = _field(c, "vec", int, w), _field(c, "buffer", int, w)
        if strategy not in ("persistent", "multipass") or dtype not in DTYPES:
            raise CorrectionsError(f"{w}: no such kernel ({strategy!r}, {dtype!r})")
        loop = c.get("vectors_per_thread_log2") if version >= 3 else None
        if loop is not None and (strategy != "multipass" or not isinstance(loop, int) or isinstance(loop, bool)
                                 or not LOOP_LOG2[0] <= loop <= LOOP_LOG2[1]):
            raise CorrectionsError(f"{w}: vectors_per_thread_log2 {loop!r} is not a multi-pass band "
                                   f"{LOOP_LOG2[0]}..{LOOP_LOG2[1]} (or null)")
        if _field(c, "candidates", int, w) < MIN_CLASS_CANDIDATES:
            raise CorrectionsError(f"{w}: fitted on {c['candidates']} candidates, fewer than {MIN_CLASS_CANDIDATES}")
        f = _float(_field(c, "log_factor", (int, float), w))
        if not math.isfinite(f) or abs(f) > 3:
            raise CorrectionsError(f"{w}: log_factor {f!r} is not a finite correction within e^+-3")
        key = (strategy, dtype, vec, buf, loop)
        if key in factors:
            raise CorrectionsError(f"{w}: {key} appears twice")
        factors[key] = float(f)
    for name, b in (("persistent_bias", bias), ("pair_bias", pair)):
        if not math.isfinite(_float(b)) or not 0 <= b < 1:
            raise CorrectionsError(f"{where}: {name} {b!r} is not in [0, 1)")
    return Corrections(factors, float(bias), str(p), device, float(pair), software, arch, by_dtype)


@functools.lru_cache(maxsize=None)
def _shipped(path: str) -> Corrections | None:
    return load_corrections(path) if Path(path).exists() else None


_active: list = []  # use_corrections() stack: a Corrections object, or None for the plain model


def corrections() -> Corrections | None:
    """The corrections :func:`model_us` applies: the innermost :func:`use_corrections`, else the
    shipped file's (None without it: the plain model)."""
    return _active[-1] if _active else _shipped(str(CORRECTIONS_FILE))


class use_corrections:
    """``with use_corrections(c):`` the model applies ``c`` (None: the plain model), e.g. a fit
    that leaves a recording out."""

    def __init__(self, c: Corrections | None):
        self.c = c

    def __enter__(self):
        _active.append(self.c)
        return self.c

    def __exit__(self, *exc):
        _active.pop()


def model_us(d: NormDescriptor, k, q, hidden: bool = False) -> float:
    """:func:`plain_model_us` times its kernel class's learned correction (:func:`corrections`) and,
    where both apply, the residual forest's (residual.py).
    ``hidden`` (the simulated device's truth) is the plain model: the corrections are the H200's."""
    t = plain_model_us(d, k, q, hidden)
    c = None if hidden else corrections_for(q)
    if c is None or not math.isfinite(t):
        return t
    t *= math.exp(c.log_factor(d, k))
    r = _residual_over(c, q)  # fitted on top of the shipped corrections: where they apply, and it does
    return t * math.exp(residual_log_factor(r, d, k, q, t)) if r is not None else t


def corrections_for(q) -> Corrections | None:
    """:func:`corrections` where they apply to the profile behind ``q`` (its GPU model), else None."""
    c = corrections()
    return c if c is not None and c.applies_to(q) else None


def residual_in_force(q) -> dict | None:
    """The residual forest :func:`model_us` applies for the profile behind ``q``: the one in force
    (residual.py) where it applies and the corrections in force are the shipped file it was fitted on
    top of (its ``corrections_sha256``), else None. Other corrections (a left-out fit, an older file)
    get their own model's choice, the strategy biases included: the forest learned what the shipped
    ones left."""
    return _residual_over(corrections_for(q), q)


def _residual_over(c: Corrections | None, q) -> dict | None:
    """:func:`residual_in_force` given the corrections ``c`` that apply to ``q`` (model_us has them)."""
    if c is None or c is not _shipped(str(CORRECTIONS_FILE)):
        return None
    r = residual_for(q)
    return r if r is not None and r["corrections_sha256"] == shipped_sha256() else None


@functools.lru_cache(maxsize=None)
def _sha256_of(path: str) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def shipped_sha256() -> str:
    """The sha256 of the shipped corrections file's bytes (what a residual forest records it was fitted on)."""
    return _sha256_of(str(CORRECTIONS_FILE))
