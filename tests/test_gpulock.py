"""Measurements take turns on a GPU: the lock that `calib run`'s overlapping notebooks share."""

import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from calib.errors import CalibError
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


def test_the_lock_file_is_shared_by_every_user_whatever_the_umask(request, monkeypatch):
    """Issue 10, item 10: created 0644, the first user's lock file locked every other user out."""
    shared = Path(tempfile.mkdtemp(prefix="calib-locks-", dir="/tmp"))  # pytest's tmp_path is 0700
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    shared.chmod(0o1777)  # like /tmp
    monkeypatch.setenv("CALIB_LOCK_DIR", str(shared))
    old = os.umask(0o077)  # the strictest common umask
    try:
        lock = GpuLock(0)
        lock.acquire()
        lock.release()
    finally:
        os.umask(old)
    assert os.stat(lock_path(0)).st_mode & 0o777 == 0o666
    if os.geteuid() == 0 and shutil.which("runuser"):  # a real second user opens it for writing
        out = subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", f"exec 3<>'{lock_path(0)}' && echo opened"],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "opened", out.stderr


def test_a_lock_file_this_user_cannot_open_is_a_clear_error(tmp_path, monkeypatch):
    """Root opens any file, so the other user's 0644 file is simulated: os.open says EACCES."""
    monkeypatch.setenv("CALIB_LOCK_DIR", str(tmp_path))
    path = lock_path(0)
    path.write_text("")
    path.chmod(0o644)
    real_open = os.open

    def refusing_open(file, flags, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    outcome = []

    def take():
        try:
            GpuLock(0, echo=lambda _: None).acquire()
            outcome.append("acquired")
        except BaseException as exc:  # noqa: BLE001 - whatever escapes is the finding
            outcome.append(exc)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(10)
    assert outcome, "waited on a lock file it cannot open"
    assert isinstance(outcome[0], CalibError), repr(outcome[0])
    message = str(outcome[0])
    assert str(path) in message and "mode 0644" in message and "chmod 666" in message and "CALIB_LOCK_DIR" in message


def test_the_gpu_queue_lets_the_longest_tail_go_first_and_passes_a_dead_waiter(tmp_path):
    """calib run's notebooks take the GPU longest tail first (fit and plot after measuring):
    the run then ends soonest. A waiter ahead holds the others back until it has the lock (and
    leaves the queue); one whose process died holds nobody back."""
    import json
    import subprocess
    import sys
    import threading
    import time

    from calib.gpulock import GpuQueue

    dram = GpuQueue(tmp_path, "memory_bandwidth", 6.3)
    occupancy = GpuQueue(tmp_path, "occupancy", 3.0)
    compute = GpuQueue(tmp_path, "compute_throughput", 4.0)
    dram.path.write_text(json.dumps({"tail_s": 6.3, "pid": __import__("os").getpid()}))  # queued, alive
    order = []

    def take(q):
        q.wait(timeout_s=30)
        order.append(q.name)
        q.leave()

    waiters = [threading.Thread(target=take, args=(q,)) for q in (occupancy, compute)]
    for w in waiters:
        w.start()
    time.sleep(0.3)
    assert order == [] and occupancy.ahead() == ["compute_throughput", "memory_bandwidth"]
    dram.leave()  # it got the lock
    for w in waiters:
        w.join(timeout=10)
    assert order == ["compute_throughput", "occupancy"]
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "matmul_throughput.queued").write_text(json.dumps({"tail_s": 9.0, "pid": int(gone.stdout)}))
    (tmp_path / "half_written.queued").write_text("{")
    assert occupancy.ahead() == []  # a dead waiter and an unreadable entry hold nobody back


def test_a_waiter_does_its_steps_only_while_enough_live_waiters_are_ahead_and_goes_as_soon_as_none_is(tmp_path):
    """The steps (a notebook's fit and plot imports) run while at least MEANWHILE_AHEAD waiters
    are ahead, so the GPU never waits for them; with fewer ahead it only waits, and once none is
    ahead it goes, steps left undone."""
    import json
    import os
    import threading
    import time

    from calib.gpulock import GpuQueue

    ahead = [f"waiter{i}" for i in range(GpuQueue.MEANWHILE_AHEAD)]
    for i, name in enumerate(ahead):  # longer tails than this one's: all go first
        (tmp_path / f"{name}.queued").write_text(json.dumps({"tail_s": 9.0 - i, "pid": os.getpid()}))
    me = GpuQueue(tmp_path, "occupancy", 3.0)
    done, ahead_seen = [], []

    def step(name):
        def run():
            ahead_seen.append(len(me.ahead()))
            done.append(name)
            if name == "first":
                (tmp_path / f"{ahead[0]}.queued").unlink()  # took the lock: one fewer ahead
        return run

    waiter = threading.Thread(target=me.wait, kwargs={"timeout_s": 30,
                                                      "meanwhile": [step("first"), step("second")]})
    waiter.start()
    deadline = time.monotonic() + 10  # a loaded machine may start the thread late: wait for the first step
    while not done and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # then give a wrong second step the time to run
    assert done == ["first"] and ahead_seen == [len(ahead)] and waiter.is_alive()  # too few: it waits, steps aside
    for name in ahead[1:]:
        (tmp_path / f"{name}.queued").unlink()
    waiter.join(timeout=10)
    assert not waiter.is_alive() and done == ["first"]


_QUEUE_UNDER_A_SIZE_LIMIT = """
import resource, signal, sys, time
from calib.gpulock import GpuQueue
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (8, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
start = time.monotonic()
GpuQueue(sys.argv[1], "occupancy", 3.0).wait(timeout_s=60)
print(round(time.monotonic() - start, 3))
"""


def test_a_queue_entry_that_cannot_be_written_costs_the_order_not_the_notebook_and_names_the_file(tmp_path):
    """A notebook's place in calib run's GPU queue (``GpuQueue.wait``) is a file in the run folder;
    on a full disk its write ended the notebook with a bare OSError naming no file, before it
    measured, and left the half-written ``.part`` behind. The order is an optimization (the lock
    keeps measurements apart): the notebook now goes on to the lock, after one line naming the file."""
    import json

    (tmp_path / "memory_bandwidth.queued").write_text(json.dumps({"tail_s": 6.3, "pid": os.getpid()}))  # ahead
    proc = subprocess.run([sys.executable, "-c", _QUEUE_UNDER_A_SIZE_LIMIT, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[-1]) < 30  # not queued behind the waiter ahead: no wait for its turn
    assert proc.stderr.strip() == (f"calib: cannot queue for the GPU in {tmp_path / 'occupancy.queued'}: File too "
                                   "large; taking the GPU lock without queueing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory_bandwidth.queued"]  # no .part left
