"""Replacing a file whole: a reader sees the old file or the new one, never half of one.

One mechanism for the files calib writes beside a user's own (a winners TSV, an exported cache, an
evaluation's --out pair). A target that is a pipe (``/dev/stdout``) or FIFO is written as a stream,
and a link is followed to the file it names. The profile has its own writer (calib.profile), which
also locks and merges. Standard library only, so any command may use it without loading a database
driver.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from pathlib import Path


def mode_for(path: Path) -> int:
    """The mode a rewritten file keeps (its old one: a private 0600 file stays private), or a new
    file's: 0666 less the umask, as ``open`` would give it."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def temporary_beside(path: Path, data: bytes) -> str:
    """``data`` in a new temporary file in the target's folder (a rename is atomic only within one
    file system), fsynced, with the mode the target will have; its name. Removed again on failure."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode_for(path))
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


_FD_LINK = re.compile(r"/(?:proc/(?P<owner>self|thread-self|\d+)/fd|dev/fd)/(?P<fd>\d+)")
_STD = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def open_descriptor(path) -> int | None:
    """The number of this process's open file that ``path`` names (``/dev/stdout``, ``/dev/fd/1``,
    ``/proc/self/fd/1``, or a link to one of them), else None. Such a path is the shell's
    redirection: written through the descriptor, at its offset, it appends where ``>>`` asked;
    renamed over (its link followed to a regular file) it had replaced the file the shell was
    appending to, and reopened with "w" it would have emptied it."""
    p = os.path.abspath(os.path.expanduser(str(path)))
    for _ in range(40):  # a link chain longer than the kernel follows is no descriptor
        if p in _STD:
            return _STD[p]
        m = _FD_LINK.fullmatch(p)
        if m:  # another process's descriptor is not ours to write through
            return int(m["fd"]) if m["owner"] in (None, "self", "thread-self", str(os.getpid())) else None
        if not os.path.islink(p):
            return None
        try:
            p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
        except OSError:
            return None
    return None


def is_stream(path) -> bool:
    """Whether ``path`` is written in place rather than replaced: one of this process's open files
    (:func:`open_descriptor`), or something, followed through links as ``open`` would, other than
    a file or a folder (a pipe, a FIFO, a terminal, /dev/null). A rename over it would replace the
    link or device node with a file."""
    if open_descriptor(path) is not None:
        return True
    try:
        mode = os.stat(Path(path).expanduser()).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def report_stream(path):
    """Where a command says what it wrote to ``path``: stderr when ``path`` is itself a stream
    (``calib cache export /dev/stdout | ...`` must carry the export alone), else stdout."""
    return sys.stderr if is_stream(path) else sys.stdout


def target(path) -> Path:
    """The file a write to ``path`` replaces: through its links to an existing file (a rename over
    such a link replaced the link with a copy, leaving the file it pointed to as it was). A
    dangling link is replaced, not followed: it could name any place, and nothing is there to keep."""
    path = Path(path).expanduser()
    real = Path(os.path.realpath(path))
    return real if real.is_file() else path


def write_stream(path, data: bytes, error: type):
    """``data`` written in place to a stream: through the descriptor for one of this process's
    open files (after what Python has buffered for it), else opened for writing."""
    fd = open_descriptor(path)
    try:
        if fd is None:
            with open(Path(path).expanduser(), "wb") as fh:
                fh.write(data)
            return
        for f in (sys.stdout, sys.stderr):
            if f is not None and _fileno(f) == fd:
                f.flush()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise error(f"cannot write {path}: {exc.strerror or exc}") from None


def _fileno(f) -> int | None:
    try:
        return f.fileno()
    except (OSError, ValueError, AttributeError):
        return None


def replace(path, data: bytes, error: type, *, streams: bool = True):
    """``data`` under ``path``: a temporary file renamed over it, and the folder fsynced after, so a
    crash cannot leave a short file under the target's name; a stream (:func:`is_stream`) is
    written in place where the caller takes ``streams`` (a file a user names: ``-o /dev/stdout``),
    and refused where it does not (a run folder's own files: a FIFO under a notebook's or frame's
    name had the notebook wait on a reader forever). ``error`` (a CalibError) says in one line why
    not, and whether the target is unchanged."""
    if is_stream(path):
        if not streams:
            raise error(f"cannot write {path}: it is not a regular file (a pipe, a device or a descriptor); "
                        f"it is left as it is")
        write_stream(path, data, error)
        return
    if os.path.isdir(Path(path).expanduser()):  # through a link: the rename would have replaced the link
        raise error(f"cannot write {path}: it is a folder")
    path = target(path)
    tmp = None
    try:
        tmp = temporary_beside(path, data)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        kept = "it is unchanged" if path.exists() else "nothing was written"
        raise error(f"cannot write {path}: {exc.strerror or exc} ({kept})") from None
    finally:
        if tmp is not None:
            _unlink(tmp)
    sync_folder(path.parent)


def sync_folder(folder: Path):
    try:
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass  # the rename is done; a folder that cannot be fsynced (some network file systems) is no error


def _unlink(tmp: str):
    try:
        os.unlink(tmp)
    except OSError:
        pass
