"""One measurement at a time on each GPU.

``calib run`` overlaps notebooks: while one measures, the next starts its kernel and imports, and
the one before fits and plots. Measurements must still not overlap, or each would time the other.
A notebook takes its GPU's lock when its first sweep starts and gives it back when it has finished
measuring (:meth:`calib.calibration.Calibration.release_gpu`) or when its process ends. The lock is
an OS file lock, so a notebook that crashes or is killed never leaves the GPU locked, and two
``calib run`` processes on one machine take turns on a shared GPU instead of corrupting each other.

The lock file is shared by every user of the machine (it lives in the temporary folder), so it is
created readable and writable by all: a file left 0644 by the first user would lock every other
user out of that GPU with a PermissionError.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from .errors import CalibError

LOCK_MODE = 0o666


class GpuLockError(CalibError, PermissionError):
    """The GPU's lock file exists but this user cannot open it (or it cannot be created)."""


def lock_path(device: int) -> Path:
    """One lock file per physical GPU: CUDA_VISIBLE_DEVICES renumbers devices, so the key is the
    host-side id where it is known."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    key = visible[device] if device < len(visible) else str(device)
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in key)
    return Path(os.environ.get("CALIB_LOCK_DIR") or tempfile.gettempdir()) / f"calib-gpu-{safe}.lock"


class GpuLock:
    def __init__(self, device: int, *, echo=None):
        from filelock import FileLock

        self.path = lock_path(device)
        # a notebook is one holder, whatever its threads
        self._lock = FileLock(str(self.path), thread_local=False, mode=LOCK_MODE)
        self._echo = echo or (lambda text: print(text, file=sys.stderr))

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self):
        from filelock import Timeout

        if self.held:
            return
        _ensure_shared_file(self.path)
        try:
            try:
                self._lock.acquire(timeout=1.0)
            except Timeout:
                self._echo(f"waiting for the GPU: another calib measurement holds {self.path}")
                self._lock.acquire(timeout=-1)
        except OSError as exc:
            raise _lock_error(self.path, exc) from None

    def release(self):
        if self.held:
            self._lock.release(force=True)


def _ensure_shared_file(path: Path):
    """Create the lock file 0666 whatever the umask (os.open's mode is filtered by it; fchmod is
    not), and make sure this user can open an existing one, before the lock library does: its
    error would be a bare PermissionError, or a wait."""
    try:
        try:  # an existing file is opened without O_CREAT, which fs.protected_regular may refuse
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, LOCK_MODE)
    except OSError as exc:
        raise _lock_error(path, exc) from None
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and st.st_mode & 0o777 != LOCK_MODE:
            os.fchmod(fd, LOCK_MODE)  # ours: share it (also repairs a 0644 file from an older calib)
    except OSError:
        pass  # the lock still works for this user; another user's error will say what to do
    finally:
        os.close(fd)


def _lock_error(path: Path, exc: OSError) -> GpuLockError:
    try:
        st = os.stat(path)
        try:
            import pwd

            owner = pwd.getpwuid(st.st_uid).pw_name
        except (ImportError, KeyError):
            owner = f"uid {st.st_uid}"
        whose = f" (owned by {owner}, mode {st.st_mode & 0o777:04o})"
    except OSError:
        whose = ""
    return GpuLockError(f"cannot open the GPU lock file {path}{whose}: {exc.strerror or exc}; ask its owner to "
                        f"'chmod 666 {path}' (or remove it while no calib runs), or set CALIB_LOCK_DIR to a "
                        "folder every user of this machine can write")


class GpuQueue:
    """The order in which the notebooks of one ``calib run`` take their GPU's lock: longest tail first.

    An OS lock serves its waiters in no particular order, and in three quick suites on an H200
    (2026-12-01) the DRAM notebook, which fits and plots for 6.3 s after measuring, often measured
    last: the run then ended 6 s after the GPU went idle. With one GPU and each notebook's fit
    overlapping the next one's measurement, the run ends soonest when the notebooks with the longest
    tails (``TAIL_S`` of their calibration) measure first (Jackson's rule for one machine with
    delivery times). A waiting notebook writes ``<name>.queued`` (its tail and pid) in the run's
    signal folder and tries the lock once no live waiter is ahead of it; a waiter that died is passed.
    """

    POLL_S = 0.02

    def __init__(self, folder, name: str, tail_s: float):
        self.folder, self.name, self.tail_s = Path(folder), str(name), float(tail_s)
        self.path = self.folder / f"{self.name}.queued"

    def _key(self, tail_s: float, name: str):
        return (-tail_s, name)  # smaller goes first: the longest tail, then by name

    def ahead(self) -> list[str]:
        """The live waiters that go before this one."""
        import json

        mine, out = self._key(self.tail_s, self.name), []
        for path in self.folder.glob("*.queued"):
            other = path.name[: -len(".queued")]
            if other == self.name:
                continue
            try:
                entry = json.loads(path.read_text())
                tail_s, pid = float(entry["tail_s"]), int(entry["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # gone meanwhile, or being written: the next poll sees it
            if _alive(pid) and self._key(tail_s, other) < mine:
                out.append(other)
        return sorted(out)

    # A step of `meanwhile` starts only while at least this many live waiters are ahead: each of them
    # holds the GPU before this one does, 0.30-4.9 s from its first point to its last in the H200
    # quick suite of 2026-12-01 (quick #2, the jobs' timestamps; three in a row at least 1.4 s), so
    # a step shorter than three measurements (an import: at most 1 s there) keeps no GPU waiting.
    MEANWHILE_AHEAD = 3

    def wait(self, timeout_s: float = 600.0, *, meanwhile=()) -> None:
        """Queue, then return when no live waiter is ahead (or after ``timeout_s``). ``meanwhile``:
        callables (short steps of work this notebook will do after measuring anyway), each run here
        in turn while ``MEANWHILE_AHEAD`` or more live waiters are still ahead of this one."""
        import json
        import time

        part = self.path.with_name(self.path.name + ".part")  # whole or absent for the others' glob
        try:  # not fsynced: a live process's signal, meaningless after a crash
            part.write_text(json.dumps({"tail_s": self.tail_s, "pid": os.getpid()}))
            os.replace(part, self.path)
        except OSError as exc:
            # the order is an optimization, the lock is what keeps measurements apart: a full disk or
            # a read-only run folder costs the order, not the notebook (a bare OSError, naming no
            # file, had ended it before it measured, and left the half-written .part behind)
            try:
                part.unlink()
            except OSError:
                pass
            print(f"calib: cannot queue for the GPU in {self.path}: {exc.strerror or exc}; taking the GPU lock "
                  "without queueing", file=sys.stderr)
            return
        steps = list(meanwhile)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ahead = self.ahead()
            if not ahead:
                return
            if steps and len(ahead) >= self.MEANWHILE_AHEAD:
                steps.pop(0)()
            else:
                time.sleep(self.POLL_S)

    def leave(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
