"""A serving process's background check of the files it serves, at low priority.

Opening a generation checks sizes only (a ``stat`` per file), but a file garbled in place
keeps its size, and Tantivy and numpy map their files, so the process would read the
garbage. This daemon thread hashes every recorded file of the serving generation after it
opens, and again every ``verify_interval_s`` (reading only files whose ``stat`` changed:
:class:`retrieval.index.checksums.ContentMemo`), and takes the parts of shards with a
damaged file out of service (:meth:`retrieval.index.generation.Generation.take_out`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from retrieval.index.checksums import ContentMemo, Damage
from retrieval.index.generation import Generation, GenerationSet
from retrieval.index.integrity import check_generation, is_checksummed

logger = logging.getLogger(__name__)

NICE = 19
"""The checking thread's scheduling priority (Linux sets it per thread): requests go first."""
PAUSE_S = 0.001
"""A pause per megabyte read, so a check of a large generation never hogs the disk."""


def _lower_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (AttributeError, OSError):
        pass  # not Linux, or not allowed: the pauses still give way


class FileWatch:
    """Checks the content of the serving generation's files in a daemon thread."""

    def __init__(
        self,
        generations: GenerationSet,
        *,
        interval_s: float,
        on_damage: Callable[[Generation, list[Damage]], None] | None = None,
    ) -> None:
        """``interval_s``: seconds between checks (0: only after a generation opens)."""
        self.generations = generations
        self.interval_s = interval_s
        self.on_damage = on_damage
        self.checks = 0
        """Checks completed (of whichever generation served when each ended)."""
        self._memo = ContentMemo()
        self._lock = threading.Lock()
        self._done = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        generations.listeners.append(lambda _generation: self._wake.set())

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trawl-file-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def wake(self) -> None:
        """Check now rather than at the next interval."""
        self._wake.set()

    def wait_checks(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` checks have completed; False when ``timeout_s`` passed first."""
        with self._done:
            return self._done.wait_for(lambda: self.checks >= count, timeout=timeout_s)

    def check_now(self, *, pause: Callable[[], None] | None = None) -> list[Damage]:
        """Check the serving generation's files now; returns the damage found new (and takes
        its parts out). A check overtaken by a publish or an update is dropped: the
        generation that serves now is checked next."""
        with self._lock:
            generation = self.generations.current
            if is_checksummed(generation.path):
                damage = check_generation(generation.path, content=True, memo=self._memo, pause=pause)
            else:
                damage = []
            if self.generations.current is not generation:
                self._wake.set()
                return []
            on_damage = self.on_damage
            new = generation.take_out(
                damage, then=None if on_damage is None else lambda found: on_damage(generation, found)
            )
        with self._done:
            self.checks += 1
            self._done.notify_all()
        return new

    def _run(self) -> None:
        _lower_priority()
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.check_now(pause=lambda: time.sleep(PAUSE_S))
            except Exception:  # noqa: BLE001 - the watch must outlive one failed check
                logger.exception("checking the served files failed; trying again later")
            self._wake.wait(self.interval_s if self.interval_s > 0 else None)
