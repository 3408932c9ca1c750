"""The normalization family's problem and its candidates: the descriptor (op, rows, columns, dtype),
the knobs a launch must name, and the search space (persistent or multi-pass, threads per row,
vector width, persistent buffer)."""

from __future__ import annotations

import dataclasses
import math

from ..knobs import COUNT, COUNT0, FamilyDescriptor, Knobs, block_problem, vector_problem


KIND = "normalization"
FAMILY = "heuristics.normalization"
OPS = ("softmax", "layernorm")
DTYPES = ("float32", "float16")
THREADS = (32, 64, 128, 256, 512, 1024)
MULTIPASS_THREADS = (128, 256, 512, 1024)
BUFFERS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# What a launch of this family must name (knobs.check_knobs): an override or a user's choice
# is checked against it.
KNOB_VALUES = {"strategy": ("persistent", "multipass"), "threads": COUNT, "vec": COUNT, "buffer": COUNT0}


def launch_problem(d, k) -> str | None:
    """Why launch ``k`` cannot run on ``d`` (families.launch), None if it can. A persistent row that
    does not fit its registers is the model's to price (infinite), not refused here."""
    return (vector_problem(d, k["vec"]) or block_problem(k["threads"], "threads") or _warp_problem(k)
            or _row_problem(d, k) or (_buffer_problem(d, k) if k["strategy"] == "persistent" else None))


WARP_THREADS = 32


def _warp_problem(k) -> str | None:
    """Both kernels reduce a row through full-mask warp shuffles (block_reduce): a block that is not a
    whole number of warps leaves its last warp's shuffles undefined, so its sums are not the row's."""
    if k["threads"] % WARP_THREADS:
        return f"threads {k['threads']} is not a whole number of {WARP_THREADS}-thread warps (the row's reduction)"
    return None


def _row_problem(d, k) -> str | None:
    """The kernels load a row as ``cols / vec`` whole vectors: a vector that does not divide the row
    leaves its last elements out of every sum."""
    if d.cols % k["vec"]:
        return f"vec {k['vec']} does not divide the row's {d.cols} columns"
    return None


def _buffer_problem(d, k) -> str | None:
    """The persistent kernel is compiled for the buffers of :data:`BUFFERS` that are whole vectors, and
    reads ``buffer`` elements per thread: a smaller one leaves the rest of the row unread (a buffer of 1
    for a 100000-column row had been predicted at 796 us, as if it ran)."""
    buf, vec, threads = k["buffer"], k["vec"], k["threads"]
    if buf not in BUFFERS or buf % vec:
        return (f"buffer {buf} is not compiled; the persistent kernel takes "
                f"{', '.join(str(b) for b in BUFFERS if b % vec == 0)} elements per thread at vec {vec}")
    if buf * threads < d.cols:
        return f"buffer {buf} x threads {threads} holds {buf * threads} of the row's {d.cols} columns"
    return None


WIDTHS = (4, 8, 16)
UNROLL = 4  # vectors per thread the multi-pass loops unroll (the source's #pragma unroll)
EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class NormDescriptor(FamilyDescriptor):
    KIND = KIND
    op: str
    rows: int
    cols: int
    dtype: str = "float32"

    def __post_init__(self):
        self._check_fields({"op": OPS, "dtype": DTYPES}, counts=("rows", "cols"))

    @property
    def bytes_moved(self) -> int:
        return 2 * self.rows * self.cols * self.itemsize_bytes


descriptor = NormDescriptor.parse


def vecs(d) -> list[int]:
    return [w // d.itemsize_bytes for w in WIDTHS if d.cols % (w // d.itemsize_bytes) == 0]


def widest_vec(d) -> int:
    v = vecs(d)
    return v[-1] if v else 1


def buffer_for(per_thread: int, vec: int) -> int | None:
    for b in BUFFERS:
        if b >= per_thread and b % vec == 0:
            return b
    return None


def space(d: NormDescriptor) -> list[Knobs]:
    out = []
    for v in vecs(d) or [1]:
        for t in THREADS:
            b = buffer_for(math.ceil(d.cols / t), v)
            if b is not None and (t == 32 or math.ceil(d.cols / (t // 2)) > v):  # no thread without work
                out.append(Knobs(strategy="persistent", threads=t, vec=v, buffer=b))
        for t in MULTIPASS_THREADS:
            out.append(Knobs(strategy="multipass", threads=t, vec=v, buffer=0))
    return out
