"""Measurements take turns on a GPU: the lock that `calib run`'s overlapping notebooks share."""

import os
import signal
import subprocess
import sys
import threading
import time

from calib.gpulock import GpuLock, lock_path

HOLDER = """
import sys, time
from calib.gpulock import GpuLock
lock = GpuLock(0)
lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_measurement_waits_and_gets_the_gpu_when_the_holder_dies(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIB_LOCK_DIR", str(tmp_path))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "CALIB_LOCK_DIR": str(tmp_path)})
    try:
        assert holder.stdout.readline().strip() == "held"
        waits = []
        lock = GpuLock(0, echo=waits.append)
        got = threading.Event()
        thread = threading.Thread(target=lambda: (lock.acquire(), got.set()), daemon=True)
        thread.start()
        assert not got.wait(1.5), "took the GPU while another process measured on it"
        assert waits and str(tmp_path) in waits[0]  # says what it waits for
        holder.send_signal(signal.SIGKILL)  # a crashed notebook must not leave the GPU locked
        assert got.wait(10), "the lock of a killed process was not released"
        assert lock.held
        lock.release()
        assert not lock.held
    finally:
        holder.kill()
        holder.wait()


def test_each_physical_gpu_has_its_own_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIB_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert lock_path(0).name == "calib-gpu-3.lock" and lock_path(1).name == "calib-gpu-1.lock"
    a, b = GpuLock(0), GpuLock(1)
    a.acquire()
    start = time.perf_counter()
    b.acquire()  # another GPU: no waiting
    assert time.perf_counter() - start < 0.5 and a.held and b.held
    a.acquire()  # taking it again in the same notebook is a no-op
    a.release(), b.release()
