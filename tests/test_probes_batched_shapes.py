"""bench/probes.py splitk-batched-kernels' default list (CPU only): the fp32 (shape, split) pairs of
the committed split-K evaluations whose split ran within 1.3x of the problem's best."""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
import probes  # noqa: E402
from h200_recordings import R, read_json, recordings  # noqa: E402


def test_batched_shapes_are_the_recorded_fp32_splits_near_the_best():
    shapes = probes.batched_shapes()
    assert len(shapes) == len({tuple(s) for s in shapes}) > 500
    assert all(split in (2, 4, 8, 16, 32) and k % split == 0 for _, _, k, split in shapes)
    # the misses' winning splits are asked: A/B's 16x720x3584 split 8, M's 16x6144x6656 split 8, I's split 32
    assert {(16, 720, 3584, 8), (16, 6144, 6656, 8), (64, 544, 42496, 32)} <= {tuple(s) for s in shapes}
    # every pair is an fp32 problem of A-P whose split ran within 1.3x of its best, and no fp16 one
    near = set()
    for rec, _ in recordings("matmul_splitk").values():
        for r in read_json(R / rec)["rows"]:
            d = r["descriptor"]
            for key, us in r["times_us"].items():
                s = int(key.split("=")[1])
                if d["dtype"] == "float32" and s > 1 and us is not None and us <= 1.3 * r["best_us"]:
                    near.add((d["m"], d["n"], d["k"], s))
    assert {tuple(s) for s in shapes} == near
    assert (64, 544, 42496, 2) not in near  # split 2 ran 842 us, 6.4x split 32's 132


def test_a_tighter_bound_asks_fewer():
    assert len(probes.batched_shapes(1.05)) < len(probes.batched_shapes())


def test_all_asks_every_recorded_fp32_split():
    """cublaslt-batched --all: every split > 1 that ran of every fp32 problem of A-P (2416 pairs, what the
    committed --all probe asked on the H200), the 571 near the best among them, so a replay's oracle has
    every split of a problem; later recordings add theirs."""
    a_to_p = "ABCDEFGHIJKLMNOP"
    every = {tuple(s) for s in probes.batched_shapes(math.inf, names=a_to_p)}
    assert len(every) == 2416 and {tuple(s) for s in probes.batched_shapes(names=a_to_p)} < every
    assert every < {tuple(s) for s in probes.batched_shapes(math.inf)}  # Q and R (seeds 13, 14) add theirs
    assert {(64, 544, 42496, 16), (48, 2240, 6144, 4)} <= every  # I's and C's misses of a partial oracle


class _RecordingLib:
    """Stands in for libcublasLt: every entry point returns CUBLAS_STATUS_SUCCESS and is recorded."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, [getattr(a, "_obj", a) for a in args]))
            return 0
        return call


def test_the_batched_descriptors_are_cupys_strided_batched_call():
    """op N/N, m' = n, n' = m, k' = K/split (cupy/_core/_routines_linalg.pyx matmul: (A B)^T = B^T A^T),
    each layout with the batch count and its matrix size as stride, for 16x720x3584 split 8."""
    from calib.heuristics import cublaslt as CL

    lt = object.__new__(CL.Lt)
    lt.lib = _RecordingLib()
    lt.batched_descriptors(16, 720, 448, 8)
    value = lambda v: getattr(v, "value", v)  # noqa: E731
    ops = [value(args[2]) for name, args in lt.lib.calls if name == "cublasLtMatmulDescSetAttribute"]
    layouts = [tuple(args[2:]) for name, args in lt.lib.calls if name == "cublasLtMatrixLayoutCreate"]
    batch = [(value(args[1]), value(args[2])) for name, args in lt.lib.calls
             if name == "cublasLtMatrixLayoutSetAttribute"]
    assert ops == [CL.OP_N, CL.OP_N]
    assert layouts == [(720, 448, 720), (448, 16, 448), (720, 16, 720)]
    assert batch == [(5, 8), (6, 720 * 448), (5, 8), (6, 448 * 16), (5, 8), (6, 720 * 16)]
