"""Problem descriptors that tuning farms share: convolutions and GEMMs.

A descriptor is identified by its contents (canonical JSON and its hash), never by a pointer or an
object id, so the same problem is the same config row in every process on every machine. Separate
input, filter and output data types allow mixed precision, as the rocMLIR tuning tables grew to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .errors import CalibError

DTYPES = ("f32", "f16", "bf16", "tf32", "i8", "f8e4m3", "f8e5m2", "i32", "f64")
DIRECTIONS = ("fwd", "bwd", "wrw")


class ConfigError(CalibError, ValueError):
    pass


def _check(cls_name: str, values: dict, dtype_fields, positive, nonnegative=()):
    for f in dtype_fields:
        if values[f] not in DTYPES:
            raise ConfigError(f"{cls_name}.{f}={values[f]!r}: choose one of {', '.join(DTYPES)}")
    for f in positive:
        if not isinstance(values[f], int) or isinstance(values[f], bool) or values[f] < 1:
            raise ConfigError(f"{cls_name}.{f}={values[f]!r}: must be a positive integer")
    for f in nonnegative:
        if not isinstance(values[f], int) or isinstance(values[f], bool) or values[f] < 0:
            raise ConfigError(f"{cls_name}.{f}={values[f]!r}: must be a non-negative integer")


@dataclass(frozen=True)
class ConvConfig:
    in_channels: int
    out_channels: int
    in_h: int
    in_w: int
    fil_h: int
    fil_w: int
    batch: int = 1
    direction: str = "fwd"
    in_dtype: str = "f32"
    fil_dtype: str = "f32"
    out_dtype: str = "f32"
    in_layout: str = "NCHW"
    fil_layout: str = "KCYX"
    out_layout: str = "NKHW"
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    experiment = "conv"

    def __post_init__(self):
        v = asdict(self)
        _check("ConvConfig", v, ("in_dtype", "fil_dtype", "out_dtype"),
               ("in_channels", "out_channels", "in_h", "in_w", "fil_h", "fil_w", "batch", "stride_h", "stride_w",
                "dilation_h", "dilation_w", "groups"), ("pad_h", "pad_w"))
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"ConvConfig.direction={self.direction!r}: choose one of {', '.join(DIRECTIONS)}")
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ConfigError(f"ConvConfig: channels ({self.in_channels}, {self.out_channels}) are not divisible "
                              f"by groups={self.groups}")

    def descriptor(self) -> dict:
        return {"experiment": self.experiment, **asdict(self)}


@dataclass(frozen=True)
class GemmConfig:
    m: int
    n: int
    k: int
    batch: int = 1
    a_layout: str = "N"
    b_layout: str = "N"
    a_dtype: str = "f32"
    b_dtype: str = "f32"
    out_dtype: str = "f32"
    experiment = "gemm"

    def __post_init__(self):
        _check("GemmConfig", asdict(self), ("a_dtype", "b_dtype", "out_dtype"), ("m", "n", "k", "batch"))
        for f in ("a_layout", "b_layout"):
            if getattr(self, f) not in ("N", "T"):
                raise ConfigError(f"GemmConfig.{f}={getattr(self, f)!r}: 'N' or 'T'")

    def descriptor(self) -> dict:
        return {"experiment": self.experiment, **asdict(self)}


KINDS = {"conv": ConvConfig, "gemm": GemmConfig}


def from_descriptor(descriptor: dict):
    """The typed config of a descriptor, or None for kinds without kind-specific columns."""
    cls = KINDS.get(descriptor.get("experiment"))
    if cls is None:
        return None
    names = {f.name for f in fields(cls)}
    unknown = set(descriptor) - names - {"experiment"}
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
    return cls(**{k: v for k, v in descriptor.items() if k in names})
