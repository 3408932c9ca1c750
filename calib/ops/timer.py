"""Device time of a CuPy thunk, measured so that two processes agree on it.

Why not simply events around each call: a candidate made of several CuPy calls (a pad, a copy, a
matrix product) costs the host tens of microseconds per call, and for small problems the GPU
finishes sooner, so the events measure the host; and a working set that fits in L2 is timed
warm, at a hit rate that depends on where the memory pool placed its buffers. On an H200 two
tunes of ResNet-50's layers disagreed on 3 of 46 winners, each 25-47% apart in its own tune's
timings and in opposite directions (2026-12-01): both effects change from one tune to the next.

So, with ``hold=True``, every batch of samples is queued behind a kernel that spins on the GPU's
global timer for longer than the host takes to enqueue the batch: the samples then run back to
back on the GPU, whatever the host's speed. The host's enqueue time is measured; a batch whose
enqueue outlasted the hold is taken again with a hold twice as long (at most ``HOLD_RETRIES`` times per
call, then kept and reported as host-bound in the protocol, which :class:`calib.timing.Measurement`
turns into a warning). With ``flush_l2=True``, a memset of twice the L2 size precedes every
sample, outside its events: each call starts from a cold L2, as a layer does whose inputs another
layer's traffic has evicted.

A held batch is not uniform. On an H100 the last ten or so kernels before the queue drains ran
0.5-0.7 us shorter than those with more work queued behind them (2026-12-08,
bench/queue_position_probe.py). So a one-kernel thunk in a batch of 10 is timed at the shorter level;
one of several kernels (CUB's two-kernel sum, a GEMM and its split-K reduction) is timed partly at the
longer level. The batch stays as it is, since every recording and model so far was timed this way.
"""

from __future__ import annotations

from time import perf_counter as _clock

from .._lazy import lazy

np = lazy("numpy")

# An idle H200 sits at 345 MHz and takes tens of milliseconds to reach its boost clock: the first
# candidate a process times would look slow, and two tunes disagreed on 5 of 46 layers (up to 72%
# apart) when only two calls warmed each candidate up (2026-12-01). So the first timing in a process
# keeps the GPU busy for SPIN_UP_S, and every candidate runs for at least WARMUP_S before its samples.
SPIN_UP_S = 0.3
WARMUP_S = 0.01
HOLD_MIN_S = 0.0005
HOLD_RETRIES = 3
_spun_up: set = set()
_state: dict = {}  # per device: the hold kernel and the flush buffer

HOLD_SOURCE = r"""
extern "C" __global__ void calib_hold(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


def _cp():
    from .._optional import require

    return require("cupy", "timing on a GPU")


def _device_state(cp) -> dict:
    dev = cp.cuda.Device().id
    st = _state.get(dev)
    if st is None:
        l2_bytes = int(cp.cuda.Device().attributes.get("L2CacheSize", 0)) or 64 << 20
        st = _state[dev] = {"hold": cp.RawKernel(HOLD_SOURCE, "calib_hold"), "flush_bytes": max(2 * l2_bytes, 8 << 20),
                            "flush": None}
    if st["flush"] is None:
        st["flush"] = cp.empty(st["flush_bytes"], dtype=cp.uint8)
    return st


def release():
    """Drop the flush buffers (twice the L2 each), so that a process that is done timing does not
    keep them; the next timing with ``flush_l2`` allocates again."""
    for st in _state.values():
        st["flush"] = None


def _run_for(thunk, seconds: float, at_least: int, cp) -> int:
    """Call ``thunk`` until ``seconds`` of wall time (GPU work included) and ``at_least`` calls."""
    calls, t0 = 0, _clock()
    while calls < at_least or _clock() - t0 < seconds:
        thunk()
        calls += 1
        if calls % 4 == 0:
            cp.cuda.get_current_stream().synchronize()
    cp.cuda.get_current_stream().synchronize()
    return calls


def host_seconds_per_call(thunk, cp, calls: int = 3) -> float:
    """The host's time to enqueue one call (the GPU idle first, so no launch waits on a full queue)."""
    cp.cuda.get_current_stream().synchronize()
    best = float("inf")
    for _ in range(calls):
        t0 = _clock()
        thunk()
        best = min(best, _clock() - t0)
        cp.cuda.get_current_stream().synchronize()
    return best


def cuda_timer(thunk, *, rule=None, warmup: int = 2, warmup_s: float = WARMUP_S, hold: bool = False,
               flush_l2: bool = False):
    """Event-timed samples of ``thunk()`` on the current stream until the rule is met, after a
    warm-up of at least ``warmup`` calls and ``warmup_s`` seconds (and the process's spin-up);
    ``hold`` and ``flush_l2`` as the module says."""
    from ..timing import Measurement, StoppingRule

    cp = _cp()
    rule = rule or StoppingRule(min_samples=10, max_samples=30, batch=10, rel_precision=0.005, budget_s=0.05)
    device = cp.cuda.Device().id
    spin = 0.0 if device in _spun_up else SPIN_UP_S
    _spun_up.add(device)
    _run_for(thunk, max(spin, warmup_s), warmup, cp)
    stream = cp.cuda.get_current_stream()
    st = _device_state(cp) if (hold or flush_l2) else None
    flush = (lambda: cp.cuda.runtime.memsetAsync(st["flush"].data.ptr, 0, st["flush_bytes"], stream.ptr)) \
        if flush_l2 else None
    hold_s = 0.0
    if hold:
        per_sample_s = host_seconds_per_call(thunk, cp) + (host_seconds_per_call(flush, cp) if flush else 0.0)
        hold_s = max(HOLD_MIN_S, 2.0 * rule.batch * per_sample_s)
    samples, reason, host_bound, retries = [], None, 0, 0
    while reason is None:
        while True:
            events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(rule.batch)]
            if hold:
                st["hold"]((1,), (1,), (np.uint64(int(hold_s * 1e9)),))
            t0 = _clock()
            for a, b in events:
                if flush:
                    flush()
                a.record(stream)
                thunk()
                b.record(stream)
            enqueue_s = _clock() - t0
            events[-1][1].synchronize()
            if not hold or enqueue_s < hold_s or retries == HOLD_RETRIES:
                break
            retries += 1
            hold_s *= 2  # the host outran the hold: these samples may have timed the host
        if hold and enqueue_s >= hold_s:
            host_bound += 1
        samples.extend(cp.cuda.get_elapsed_time(a, b) * 1e3 for a, b in events)
        reason = rule.stop_reason(np.asarray(samples))
    protocol = {"timer": "cuda events per call", "warmup": warmup, "warmup_s": warmup_s, "spin_up_s": SPIN_UP_S,
                "rule": rule.to_dict(), "hold": hold, "flush_l2": flush_l2}
    if hold:
        protocol.update(hold_s=hold_s, hold_retries=retries, host_bound_batches=host_bound)
    return Measurement(np.asarray(samples), stop_reason=reason, protocol=protocol)
