"""Write-then-rename, the one way Trawl replaces a file or a directory on disk.

Why one helper: readers (a serving process, a resumed crawl, a backfill) must see either
the old content or the new one, never half a file, and a crash at any point must leave
one of the two. That takes four steps in order — write a temporary sibling, fsync it,
``os.replace`` it over the target, fsync the parent directory so the rename itself is
durable — and each hand-written copy of the idiom used to skip a different step.

- :func:`write_bytes` / :func:`write_text` for small files (manifests, pointers, JSON);
- :func:`write_with` for files a library writes (Parquet, LightGBM, numpy) given a path;
- :func:`replace_dir` for a directory built beside its target (an index, a model).

Temporary names start with ``.`` and contain ``.tmp``, so directory listings that skip
hidden files never pick up a half-written one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "fsync_dir",
    "replace_dir",
    "staging_dir",
    "temp_sibling",
    "write_bytes",
    "write_text",
    "write_with",
]


def temp_sibling(path: Path) -> Path:
    """A hidden, unique temporary name in ``path``'s directory (same filesystem: rename is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def fsync_dir(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def write_with(path: Path, writer: Callable[[Path], object], *, durable: bool = True) -> Path:
    """Let ``writer`` write a temporary sibling of ``path``, then move it into place.

    ``writer`` gets the temporary path (pass it to ``write_parquet``, ``save_model``, …).
    ``durable=False`` skips both fsyncs, for caches that are cheap to rebuild.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        writer(tmp)
        if durable:
            _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)
    return path


def write_bytes(path: Path, data: bytes, *, durable: bool = True) -> Path:
    """Replace ``path`` with ``data`` atomically."""
    return write_with(path, lambda tmp: tmp.write_bytes(data), durable=durable)


def write_text(path: Path, text: str, *, durable: bool = True) -> Path:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    return write_bytes(path, text.encode("utf-8"), durable=durable)


def replace_dir(staged: Path, target: Path) -> None:
    """Move the finished directory ``staged`` to ``target``, replacing any old one.

    POSIX cannot rename a directory over a non-empty one, so an existing target is
    first renamed aside and removed after the swap: a reader sees the old tree, then
    the new one (a crash between the two renames leaves the old tree beside the
    target, named ``.<name>.old-*``, and no target; callers that cannot tolerate that
    gap publish through a pointer file instead — see ``retrieval.index.manifest``).
    """
    staged, target = Path(staged), Path(target)
    if target.exists():
        old = target.with_name(f".{target.name}.old-{time.time_ns()}")
        target.rename(old)
        staged.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staged.rename(target)
    fsync_dir(target.parent)


@contextlib.contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """Build a directory beside ``target``; on success it replaces ``target``, on error it is removed.

    Example::

        with staging_dir(out) as tmp:
            (tmp / "model.txt").write_text(...)
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(target)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, target)
