"""A full disk recognised in every form it reaches Python in, and said in words.

ENOSPC (or EDQUOT, a quota) arrives as an ``OSError``, often wrapped by whoever caught it
first: the WARC sink's own ``OSError``, a crawl batch's, SQLite's "database or disk is
full" (which the rollback after it may mask as "cannot rollback"), or only as text from
Rust (Tantivy: "No space left on device (os error 28)"); PostgreSQL's own disk answers
SQLSTATE 53100. ``is_disk_full`` walks an exception's causes for any of them, so a
command can stop and say "disk full" with the path instead of a traceback.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import DiskFull

__all__ = ["database_disk_full", "disk_full_at", "free_bytes", "is_disk_full", "raising_disk_full"]

_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_TEXTS = ("no space left on device", "os error 28", "disk quota exceeded", "database or disk is full")
_IO_FAILURE_TEXTS = ("io::error", "ioerror", "os error")
"""What Tantivy says when its writer thread died on an I/O error whose cause it dropped."""
LOW_SPACE_BYTES = 64 * 2**20
"""Below this, an I/O failure that names no cause is taken for a full disk."""
_POSTGRES_DISK_FULL = "53100"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _says_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in _ERRNOS:
        return True
    if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return True
    text = str(exc).lower()
    return any(t in text for t in _TEXTS)


def is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` or anything it was raised from says the disk (or a quota) is full."""
    return any(_says_full(e) or database_disk_full(e) for e in _chain(exc))


def database_disk_full(exc: BaseException) -> bool:
    """True when PostgreSQL said its own disk is full (SQLSTATE 53100)."""
    return any(getattr(e, "sqlstate", None) == _POSTGRES_DISK_FULL for e in _chain(exc))


def free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem holding ``path`` (its nearest existing ancestor); None if unknown."""
    for candidate in (Path(path), *Path(path).parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def disk_full_at(path: Path, *, advice: str | None = None) -> DiskFull:
    """The ``DiskFull`` error for ``path``, with the space left there now."""
    if advice is None:
        return DiskFull(str(path), free_bytes(path))
    return DiskFull(str(path), free_bytes(path), advice=advice)


@contextmanager
def raising_disk_full(path: Path, *, advice: str | None = None) -> Iterator[None]:
    """Turn a failure for lack of space under ``path`` into ``DiskFull`` naming it.

    Also an I/O failure that names no cause (Tantivy's "index writer was killed
    (io::Error most likely)") while ``path``'s filesystem has under ``LOW_SPACE_BYTES``
    left: looked at here, before the caller's clean-up frees what the failed write took.
    """
    try:
        yield
    except DiskFull:
        raise
    except Exception as exc:
        if is_disk_full(exc):
            raise disk_full_at(path, advice=advice) from exc
        io_failure = any(t in str(e).lower() for e in _chain(exc) for t in _IO_FAILURE_TEXTS)
        free = free_bytes(path)
        if io_failure and free is not None and free < LOW_SPACE_BYTES:
            raise disk_full_at(path, advice=advice) from exc
        raise
