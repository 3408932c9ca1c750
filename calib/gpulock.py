"""One measurement at a time on each GPU.

``calib run`` overlaps notebooks: while one measures, the next starts its kernel and imports, and
the one before fits and plots. Measurements must still not overlap, or each would time the other.
A notebook takes its GPU's lock when its first sweep starts and gives it back when it has finished
measuring (:meth:`calib.calibration.Calibration.release_gpu`) or when its process ends. The lock is
an OS file lock, so a notebook that crashes or is killed never leaves the GPU locked, and two
``calib run`` processes on one machine take turns on a shared GPU instead of corrupting each other.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


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
        self._lock = FileLock(str(self.path), thread_local=False)  # a notebook is one holder, whatever its threads
        self._echo = echo or (lambda text: print(text, file=sys.stderr))

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self):
        from filelock import Timeout

        if self.held:
            return
        try:
            self._lock.acquire(timeout=1.0)
        except Timeout:
            self._echo(f"waiting for the GPU: another calib measurement holds {self.path}")
            self._lock.acquire(timeout=-1)

    def release(self):
        if self.held:
            self._lock.release(force=True)
