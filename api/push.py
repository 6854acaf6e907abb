"""Documents pushed through the API: written durably to a data directory the index follows.

A push is answered only once its documents (or deletions) are in a docstore segment on
disk, so a SIGKILL after the answer loses nothing. Concurrent pushes commit together: the
first to take the write lock writes every push queued by then as one segment (group
commit), so a burst of single-document requests does not leave a segment per document.

The serving index follows the directory in place (``retrieval.index.incremental.follow``,
the loop ``trawl run`` uses): new segments are applied within ``api.push_poll_s`` plus one
step (vectors too, when the generation has them), and compacted like crawled ones. Pushed
documents live in the directory's ``w-push`` worker folder, so a crawl may share it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.crawldir import CrawlDir, worker_folder
from core.deletions import DeletionLog, Removal
from core.docstore import DocStore
from core.settings import Settings
from core.types import Document
from retrieval.index.incremental import IncrementalIndexer, follow

logger = logging.getLogger(__name__)

__all__ = ["PushWriter"]

PUSH_WORKER = worker_folder("push")
"""The worker folder pushed documents and deletions are written in (``docs/w-push/``, …)."""


@dataclass(slots=True)
class _Push:
    documents: list[Document]
    removals: list[Removal]
    done: bool = False
    error: BaseException | None = None
    segments: list[str] = field(default_factory=list)


class PushWriter:
    """Pushed documents and deletions into ``data_dir``, and the index at ``index_root`` following it."""

    def __init__(self, data_dir: Path, index_root: Path, settings: Settings) -> None:
        layout = CrawlDir(data_dir)
        layout.root.mkdir(parents=True, exist_ok=True)
        self.data_dir = layout.root
        self._docs = DocStore(layout.docs, worker=PUSH_WORKER, row_segments=True)
        self._deletions = DeletionLog(layout.deletions, worker=PUSH_WORKER)
        self._queue: list[_Push] = []
        self._queue_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._last_time = 0.0
        self._settings = settings
        self._indexer = IncrementalIndexer(
            layout.root,
            index_root,
            embed=settings.embed,
            keep_generations=settings.index.keep_generations,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def now(self) -> float:
        """A timestamp later than every earlier one: a put after a delete of the same id
        (or the reverse) in one clock tick still orders after it."""
        with self._queue_lock:
            self._last_time = max(time.time(), self._last_time + 1e-6)
            return self._last_time

    def write(self, documents: list[Document], removals: list[Removal]) -> list[str]:
        """Store these durably (with any other pushes waiting) and return the segments written."""
        push = _Push(documents, removals)
        with self._queue_lock:
            self._queue.append(push)
        with self._write_lock:
            if not push.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
        if push.error is not None:
            raise push.error
        return push.segments

    def _commit(self, batch: list[_Push]) -> None:
        docs = [d for p in batch for d in p.documents]
        removals = [r for p in batch for r in p.removals]
        segments: list[str] = []
        try:
            # Removals first: a batch that deletes and re-puts an id keeps the put (it is later).
            if removals:
                segments.append(self._deletions.record(removals))
            if docs:
                segments.append(self._docs.append(docs))
        except BaseException as exc:  # every waiting push learns it failed
            for push in batch:
                push.error = exc
        for push in batch:
            push.segments = segments
            push.done = True

    def start(self) -> None:
        """Follow the directory: apply new segments to the serving generation, compact on schedule."""
        api = self._settings.api

        def run() -> None:
            try:
                follow(
                    self._indexer,
                    self._stop,
                    poll_s=api.push_poll_s,
                    compact_every_s=api.push_compact_every_s,
                )
            except Exception:  # the API keeps serving; pushes stay on disk for the next start
                logger.exception("the push index follower stopped; pushed documents wait for a restart")

        self._thread = threading.Thread(target=run, name="trawl-push-indexer", daemon=True)
        self._thread.start()

    def backlog(self) -> int:
        """Documents pushed but not yet applied to the serving generation."""
        return self._indexer.backlog()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
