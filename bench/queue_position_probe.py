"""Does a sample's place in its batch change its time?

``calib.ops.timer.cuda_timer(hold=True)`` queues a batch of 10 samples behind a spinning kernel, so that
they run back to back whatever the host's speed. The learned predictor's recordings show a pattern in
those batches (H200 seeds 124, 136 and H100 seeds 176, 177, 2026-12-07): ``cupy.sum`` (CUB, two kernels
a call) ran its first five samples of every batch about 0.7 us slower than its last five; the composed
softmax (five kernels a call) its first eight slower than its last two; ``cupy.multiply`` (one kernel)
was flat. As if the last ~10 kernels of a queue ran faster than the ones with more queued behind them.

This probe times a few thunks (one, two and more kernels a call; split-K's GEMM + reduction among
them) in batches of 10, 20 and 40 samples, each batch behind the hold, and, as a variant, with 16 empty
kernels queued after the batch's last event (so that every sample has work queued behind it). It prints
the median per position in the batch and writes them to ``$OUT/queue-probe.json``.
``python bench/queue_position_probe.py`` on a GPU (device_run.sh step ``queue-probe``)."""

from __future__ import annotations

import json
import os
import sys

import cupy as cp
import numpy as np

from calib.heuristics.splitk.gpu import GpuCase
from calib.heuristics.splitk.problem import SplitKDescriptor
from calib.ops import timer as T

REPEATS = 15
BATCHES = (10, 20, 40)
TAIL_KERNELS = 16


def thunks():
    rs = cp.random.RandomState(0)

    def vec(nbytes):
        return rs.random_sample(max(1, int(nbytes // 4)), dtype=cp.float32)

    a, b, y = vec(0.5e6 / 3), vec(0.5e6 / 3), vec(0.5e6 / 3)
    sums = {f"cupy.sum {mb} MB": vec(mb * 1e6) for mb in (0.48, 0.93, 2.54, 20.5)}
    x = rs.random_sample((64, 4096), dtype=cp.float32)
    sm = cp.cuda.Device().attributes["MultiProcessorCount"]
    case = GpuCase(SplitKDescriptor(16, 2048, 4096, "float32"), sm)
    out = {"cupy.multiply 0.5 MB": lambda: cp.multiply(a, b, out=y)}
    out.update({k: (lambda v=v: v.sum()) for k, v in sums.items()})
    out["softmax 64x4096 (5 kernels)"] = lambda: (lambda e: e / e.sum(axis=1, keepdims=True))(
        cp.exp(x - x.max(axis=1, keepdims=True)))
    out["split-K fp32 16x2048x4096 split 1"] = lambda: case.run({"split": 1})
    out["split-K fp32 16x2048x4096 split 8"] = lambda: case.run({"split": 8})
    return out


def positions(thunk, batch: int, tail: bool) -> list:
    """Per position in the batch, the median time (us) over REPEATS batches."""
    st = T._device_state(cp)
    stream = cp.cuda.get_current_stream()
    hold_s = max(2e-3, 4.0 * batch * T.host_seconds_per_call(thunk, cp))
    rows = []
    for _ in range(REPEATS):
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(batch)]
        st["hold"]((1,), (1,), (np.uint64(int(hold_s * 1e9)),))
        for e0, e1 in events:
            e0.record(stream)
            thunk()
            e1.record(stream)
        if tail:
            for _ in range(TAIL_KERNELS):
                st["hold"]((1,), (1,), (np.uint64(0),))
        stream.synchronize()
        rows.append([cp.cuda.get_elapsed_time(e0, e1) * 1e3 for e0, e1 in events])
    return [float(v) for v in np.median(np.asarray(rows), axis=0)]


def main() -> int:
    res = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "repeats": REPEATS,
           "tail_kernels": TAIL_KERNELS, "cases": {}}
    for name, thunk in thunks().items():
        T._run_for(thunk, T.SPIN_UP_S, 10, cp)  # warm: clocks up, kernels compiled, pool filled
        for batch in BATCHES:
            for tail in (False, True):
                med = positions(thunk, batch, tail)
                key = f"{name} | batch {batch}{' + tail' if tail else ''}"
                res["cases"][key] = med
                print(f"{key:60s} first {np.median(med[:5]):7.3f}  last5 {np.median(med[-5:]):7.3f}  "
                      f"all {' '.join(f'{v:.2f}' for v in med[:20])}", flush=True)
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "queue-probe.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
