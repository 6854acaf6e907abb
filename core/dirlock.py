"""One writer per directory: an exclusive ``flock`` on a lock file that names its holder.

Why ``flock`` (the standard library's ``fcntl``, as the docstore and vector store already
use): the kernel drops the lock when its holder dies, SIGKILL included, so a dead
writer's lock is taken over by the next one with nothing to clean up by hand, and a live
writer's lock is never taken. ``filelock`` (installed) truncates the file on every try,
which would erase the holder's name that a refusal reports. The file's text (pid, host,
command, since) is only for that message; the lock file itself is never deleted (a new
inode beside a held one would let two writers in).

The lock is re-entrant within a thread (a build that publishes takes it twice) and
exclusive between threads and processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

from core.errors import DirectoryBusy

__all__ = ["DirLock", "Owner"]

logger = logging.getLogger(__name__)

_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds (or last held) a lock, as its file says."""

    pid: int
    host: str
    command: str
    since: float

    @classmethod
    def me(cls) -> Owner:
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "python"
        return cls(os.getpid(), socket.gethostname(), command[:300], time.time())

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        try:
            raw = json.loads(text)
            return cls(int(raw["pid"]), str(raw["host"]), str(raw["command"]), float(raw["since"]))
        except (ValueError, KeyError, TypeError):
            return None  # empty (released cleanly) or half written

    def describe(self) -> str:
        since = time.strftime("%H:%M:%S UTC", time.gmtime(self.since))
        return f"pid {self.pid} on host {self.host} (`{self.command}`, since {since})"


@dataclass(slots=True)
class _Held:
    """This process's hold on one lock file: which thread, how deep, the open file."""

    mutex: threading.RLock
    handle: IO[str] | None = None
    depth: int = 0


_HELD: dict[str, _Held] = {}
_REGISTRY = threading.Lock()


class DirLock:
    """The writer lock of one directory, kept in ``path``; ``what`` names the directory in messages.

    Example::

        with DirLock(root / "lock", what=f"index root {root}").held(wait_s=10):
            ...  # the only writer
    """

    def __init__(self, path: Path, *, what: str) -> None:
        self.path = Path(path)
        self.what = what

    def holder(self) -> Owner | None:
        """The owner the lock file names (the live holder, or a dead one's leftover)."""
        try:
            return Owner.parse(self.path.read_text(encoding="utf-8"))
        except OSError:
            return None

    @contextlib.contextmanager
    def held(self, *, wait_s: float | None = 0.0) -> Iterator[Self]:
        """Hold the lock for a block, waiting up to ``wait_s`` to get it (None: for ever)."""
        self.acquire(wait_s=wait_s)
        try:
            yield self
        finally:
            self.release()

    def acquire(self, *, wait_s: float | None = 0.0) -> None:
        """Take the lock, waiting up to ``wait_s`` seconds (None: for ever); raises
        :class:`DirectoryBusy` naming the holder when it stays taken."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        key = os.path.realpath(self.path)
        with _REGISTRY:
            entry = _HELD.setdefault(key, _Held(threading.RLock()))
        if not entry.mutex.acquire(timeout=-1 if deadline is None else max(wait_s or 0.0, 0.0)):
            raise self._busy()
        try:
            if entry.depth == 0:
                entry.handle = self._lock_file(deadline)
            entry.depth += 1
        except BaseException:
            entry.mutex.release()
            raise

    def release(self) -> None:
        entry = _HELD[os.path.realpath(self.path)]
        entry.depth -= 1
        if entry.depth == 0 and entry.handle is not None:
            handle, entry.handle = entry.handle, None
            try:
                handle.seek(0)
                handle.truncate()  # released cleanly: no owner to report or take over from
                handle.flush()
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
        entry.mutex.release()

    def _lock_file(self, deadline: float | None) -> IO[str]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        handle = os.fdopen(fd, "r+", encoding="utf-8")  # held until release
        try:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise self._busy() from None
                    time.sleep(_POLL_S)
            handle.seek(0)
            left = Owner.parse(handle.read())
            if left is not None:
                logger.warning(
                    "%s: taking over the lock left by %s, which is gone", self.what, left.describe()
                )
            handle.seek(0)
            handle.truncate()
            handle.write(_owner_json(Owner.me()))
            handle.flush()
        except BaseException:
            handle.close()
            raise
        return handle

    def _busy(self) -> DirectoryBusy:
        owner = self.holder()
        who = owner.describe() if owner is not None else "another process (it has not named itself yet)"
        return DirectoryBusy(
            f"{self.what} is in use by {who}: one writer at a time. Wait for that command to "
            f"finish (or stop it), then run this again. Lock file: {self.path}"
        )


def _owner_json(owner: Owner) -> str:
    return json.dumps({"pid": owner.pid, "host": owner.host, "command": owner.command, "since": owner.since})
