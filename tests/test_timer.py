"""calib.ops.timer on a simulated stream: a virtual host clock and a GPU that runs each queued op
no earlier than the host issued it, so host-bound timing, the hold and the L2 flush can be seen
without a GPU."""

from __future__ import annotations

import types

import numpy as np
import pytest

from calib.ops import timer as T
from calib.timing import StoppingRule


class FakeGPU:
    """One stream. ``host`` is the virtual host clock (s); ``gpu`` the time the GPU is busy until."""

    def __init__(self, l2_bytes=50 << 20):
        self.host, self.gpu, self.queue = 0.0, 0.0, []
        self.log = []  # (kind, gpu start, gpu end)
        self.l2_bytes = l2_bytes
        gpu = self

        class Event:
            def __init__(self):
                self.t = None

            def record(self, stream=None):
                gpu.enqueue("event", 0.0, self)

            def synchronize(self):
                gpu.drain()

        class Stream:
            ptr = 0

            def synchronize(self):
                gpu.drain()

        class Device:
            id = 0
            attributes = {"L2CacheSize": l2_bytes}

        class RawKernel:
            def __init__(self, src, name):
                assert "globaltimer" in src and name == "calib_hold"

            def __call__(self, grid, block, args):
                gpu.host += 3e-6
                gpu.enqueue("hold", int(args[0]) * 1e-9)

        def memset(ptr, value, nbytes, stream):
            gpu.host += 2e-6
            gpu.enqueue("flush", nbytes / 3e12)

        stream = Stream()
        self.cp = types.SimpleNamespace(
            uint8=np.uint8, empty=lambda n, dtype=None: types.SimpleNamespace(data=types.SimpleNamespace(ptr=1)),
            RawKernel=RawKernel,
            cuda=types.SimpleNamespace(Device=Device, Event=Event, get_current_stream=lambda: stream,
                                       get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
                                       runtime=types.SimpleNamespace(memsetAsync=memset)))

    def enqueue(self, kind, seconds, event=None):
        self.queue.append((kind, seconds, event, self.host))

    def drain(self):
        for kind, seconds, event, issued in self.queue:
            start = max(self.gpu, issued)
            self.gpu = start + seconds
            if event is not None:
                event.t = self.gpu
            self.log.append((kind, start, self.gpu))
        self.queue.clear()
        self.host = max(self.host, self.gpu)

    def kernel(self, host_s, gpu_s):
        """A thunk that costs the host ``host_s`` and then queues ``gpu_s`` of GPU work."""
        def thunk():
            self.host += host_s
            self.enqueue("kernel", gpu_s)
        return thunk


@pytest.fixture
def fake_gpu(monkeypatch):
    gpu = FakeGPU()
    monkeypatch.setattr(T, "_cp", lambda: gpu.cp)
    monkeypatch.setattr(T, "_clock", lambda: gpu.host)
    monkeypatch.setattr(T, "_spun_up", set())
    monkeypatch.setattr(T, "_state", {})
    return gpu


RULE = StoppingRule(min_samples=10, max_samples=30, batch=10, rel_precision=0.005, budget_s=0.05)


def test_events_per_call_time_the_host_when_it_is_slower_than_the_gpu(fake_gpu):
    m = T.cuda_timer(fake_gpu.kernel(50e-6, 10e-6), rule=RULE)
    assert m.median_us == pytest.approx(50, rel=0.05)  # the flaw the hold removes


def test_the_hold_lets_the_host_run_ahead_so_samples_time_the_gpu(fake_gpu):
    m = T.cuda_timer(fake_gpu.kernel(50e-6, 10e-6), rule=RULE, hold=True)
    assert m.median_us == pytest.approx(10, rel=1e-6)
    assert m.protocol["hold"] is True and m.protocol["host_bound_batches"] == 0
    assert not any(w.startswith("host-bound") for w in m.warnings)
    holds = [e for e in fake_gpu.log if e[0] == "hold"]
    assert len(holds) == m.n // RULE.batch  # one hold per batch, none retried


def test_a_host_that_slows_down_after_the_estimate_gets_a_longer_hold(fake_gpu, monkeypatch):
    sized = []
    estimate = T.host_seconds_per_call
    monkeypatch.setattr(T, "host_seconds_per_call", lambda *a, **k: (estimate(*a, **k), sized.append(1))[0])

    def thunk():  # fast while the hold is sized, 16x slower afterwards
        fake_gpu.host += 80e-6 if sized else 5e-6
        fake_gpu.enqueue("kernel", 10e-6)

    m = T.cuda_timer(thunk, rule=RULE, hold=True)
    assert m.protocol["hold_retries"] >= 1 and m.protocol["host_bound_batches"] == 0
    assert m.median_us == pytest.approx(10, rel=1e-6)


def test_a_thunk_that_waits_for_the_gpu_is_reported_host_bound(fake_gpu):
    def syncing():  # e.g. a candidate that reads a result back: the host can never run ahead
        fake_gpu.host += 5e-6
        fake_gpu.enqueue("kernel", 10e-6)
        fake_gpu.drain()

    m = T.cuda_timer(syncing, rule=RULE, hold=True)
    assert m.protocol["host_bound_batches"] >= 1 and m.protocol["hold_retries"] == T.HOLD_RETRIES
    assert any(w.startswith("host-bound") for w in m.warnings)


def test_flush_precedes_every_sample_and_stays_outside_its_events(fake_gpu):
    m = T.cuda_timer(fake_gpu.kernel(5e-6, 10e-6), rule=RULE, hold=True, flush_l2=True)
    assert m.median_us == pytest.approx(10, rel=1e-6)  # the 35 us memset is not in the sample
    kinds = [k for k, *_ in fake_gpu.log]
    last_hold = len(kinds) - 1 - kinds[::-1].index("hold")
    after = [k for k in kinds[last_hold + 1:] if k != "event"]
    assert after == ["flush", "kernel"] * RULE.batch
    assert T._state[0]["flush_bytes"] == 2 * fake_gpu.l2_bytes


@pytest.mark.gpu
def test_on_a_gpu_the_hold_removes_the_host_from_a_chain_of_small_calls():
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("needs a CUDA GPU and CuPy; none here")
    x = cp.random.random_sample(4096, dtype=cp.float32)

    def chain():  # eight launches of a few microseconds of host time each, under a microsecond of GPU work
        y = x
        for _ in range(8):
            y = y * 1.0001
        return y

    free = T.cuda_timer(chain, rule=RULE)
    held = T.cuda_timer(chain, rule=RULE, hold=True, flush_l2=True)
    assert held.protocol["host_bound_batches"] == 0, held.protocol
    assert held.median_us < free.median_us, (held, free)
