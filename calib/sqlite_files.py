"""SQLite files as calib names and opens them: their URLs, and folders nobody may write.

A path is written into a ``sqlite:///`` URL with ``%``, ``?`` and ``#`` percent-encoded, and read
back as SQLAlchemy reads it, so that the cache's fast path (sqlite3, no SQLAlchemy) opens the same
file as the Store.

In a folder nobody may write (a read-only mount, a shared archive) a WAL database cannot be
opened as usual: a reader must create ``-shm`` beside it, so the open fails with "unable to open
database file" though the data is intact. Such a file can still be read as immutable, unless its
``-wal`` holds writes not yet in the database: an immutable read would not see them. Both the
tuning database's readers and the autotune cache's fast path ask here.
"""

from __future__ import annotations

import os
from urllib.parse import quote, unquote


def in_read_only_folder(path: str) -> bool:
    """Whether the folder of the database itself (through links: SQLite keeps ``-wal`` and ``-shm``
    beside the file a link names, not beside the link) may not be written."""
    return not os.access(os.path.dirname(os.path.realpath(path)), os.W_OK)


def wal_pending(path: str) -> bool:
    """Whether a ``-wal`` beside the database holds writes (an empty one, left after a
    checkpoint, holds none)."""
    try:
        return os.path.getsize(os.path.realpath(path) + "-wal") > 0
    except OSError:
        return False


def immutable_uri(path: str) -> str:
    """The ``file:`` URI (for ``sqlite3.connect(..., uri=True)``) that reads ``path`` as immutable."""
    return f"file:{quote(os.path.realpath(path))}?mode=ro&immutable=1"


def url_of(path) -> str:
    """The SQLAlchemy URL of the SQLite file at ``path``: ``%``, ``?`` and ``#`` percent-encoded, as
    SQLAlchemy decodes them (a home folder named ``q?home`` had put the database at ``q``)."""
    text = str(path)
    return "sqlite:///" + text.replace("%", "%25").replace("?", "%3F").replace("#", "%23")


def path_of(url: str) -> str | None:
    """The file a ``sqlite:///`` URL names, read as SQLAlchemy reads it (the query cut off, the
    percent-encoding decoded); None for another database, memory or a ``file:`` URI."""
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if url.startswith(prefix):
            path = unquote(url[len(prefix):].split("?", 1)[0])
            return None if not path or path == ":memory:" or path.startswith("file:") else path
    return None
