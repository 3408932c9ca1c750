"""Processes that end with the ``calib run`` that started them.

A notebook runs in a process of its own (``python -m calib.runner --one``) whose Jupyter kernel is in
a session of its own. Killed, ``calib run`` used to leave 3-5 of them measuring beside its rerun,
holding the GPU lock and stalling it. So:

- ``calib run`` starts each notebook process in a process group of its own (the terminal's Ctrl-C
  reaches calib run alone) and, on SIGTERM or SIGINT, ends every process below it, kernels included,
  before it exits (:func:`ending_children_on_signals`);
- a notebook process ends when its parent dies, SIGKILL included (:func:`die_with_parent`): on Linux
  the kernel tells it at once (``PR_SET_PDEATHSIG``), elsewhere a thread sees its parent change;
  its kernel then sees its own parent die (ipykernel polls for it) and is ended by it as well.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from .errors import CalibError

# The pid of the process that started this one and whose death must end it.
PARENT_PID_ENV = "CALIB_PARENT_PID"
_PR_SET_PDEATHSIG = 1
WATCH_EVERY_S = 0.5


def hand_down(env: dict) -> dict:
    """Mark ``env`` (a child's environment) so that the child dies with this process."""
    env[PARENT_PID_ENV] = str(os.getpid())
    return env


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process on this machine (a zombie is dead: it measures nothing)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def die_with_parent(on_death=None):
    """End this process when the one named by ``CALIB_PARENT_PID`` dies. ``on_death`` runs first
    (it ends this process's own children). Nothing happens without the variable."""
    try:
        expected = int(os.environ.get(PARENT_PID_ENV, ""))
    except ValueError:
        return
    _set_pdeathsig(signal.SIGTERM)  # SIGTERM, so that the handler below ends the children first

    def end(*_):
        if on_death:
            on_death()
        os._exit(128 + signal.SIGTERM)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, end)
    if os.getppid() != expected:  # died before the line above could tell
        end()

    def watch():
        while os.getppid() == expected:
            time.sleep(WATCH_EVERY_S)
        end()

    threading.Thread(target=watch, name="calib-lifeline", daemon=True).start()


def _set_pdeathsig(signum: int):
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the watching thread still notices
        pass


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (this process by default), however deep, whatever its
    session: read from /proc, so empty where there is none (the process groups still end)."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[-1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(children.get(root, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def end_tree(groups=(), *, grace_s: float = 3.0):
    """SIGTERM every process below this one and every process group in ``groups``; SIGKILL what
    is still alive after ``grace_s``."""
    targets = set(descendants())
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            _quiet(os.killpg, pgid, signum)
        for pid in targets:
            _quiet(os.kill, pid, signum)
        deadline = time.monotonic() + grace_s
        while signum == signal.SIGTERM and time.monotonic() < deadline:
            targets = {p for p in targets | set(descendants()) if pid_alive(p)}
            if not targets:
                return
            time.sleep(0.05)


def _quiet(kill, pid: int, signum: int):
    try:
        kill(pid, signum)
    except OSError:
        pass


# The process groups of the children in flight (run_child): what a signal to this process ends.
_GROUPS: set[int] = set()
# Set once a signal is being handled: a child not yet started is not started any more.
_stopping = threading.Event()


class Interrupted(CalibError):
    """This process was stopped by SIGTERM or SIGINT, its children ended; ``exit_status`` is the
    shell's 128 + the signal's number."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_status = 128 + signum


def run_child(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    """``subprocess.run`` with captured text output, in a process group of its own that dies with
    this process (``die_with_parent`` on its side) and that a signal to this process ends."""
    if _stopping.is_set():
        return subprocess.CompletedProcess(argv, 128 + signal.SIGTERM, "", "not started: calib was stopped")
    proc = subprocess.Popen(argv, env=hand_down(dict(env)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    _GROUPS.add(proc.pid)
    try:
        stdout, stderr = proc.communicate()
    finally:
        _GROUPS.discard(proc.pid)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


@contextmanager
def guard(*, then: str = ""):
    """Within (in the main thread): SIGTERM and SIGINT end every process
    below this one, kernels in sessions of their own included, and then raise :class:`Interrupted`
    (``then`` ends its message: what was kept, how to go on). The handler raises KeyboardInterrupt
    first, so that no ``except Exception`` on the way (papermill's, a retry's) takes it for a
    failure of the work."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []

    def handler(signum, _frame):
        for s in old:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(s, signal.SIG_IGN)
        received.append(signum)
        _stopping.set()
        end_tree(set(_GROUPS))
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {signal.SIGTERM: None, signal.SIGINT: None}
    for s in old:
        old[s] = signal.signal(s, handler)
    try:
        yield
    except KeyboardInterrupt:
        _stopping.set()
        end_tree(set(_GROUPS))  # a child started while the signal was handled
        signum = received[0] if received else signal.SIGINT
        raise Interrupted(f"stopped by {signal.Signals(signum).name}: every process it had started was ended"
                          + (f"; {then}" if then else ""), signum) from None
    finally:
        for s, h in old.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)
        _stopping.clear()
