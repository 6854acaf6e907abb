"""Open generations: everything one published index version serves, and the switch between them.

A :class:`Generation` is a broker over the shards of one generation directory (their
Tantivy and HNSW indexes) plus its manifest. :class:`GenerationSet` keeps the serving
one and the few before it open (cursors pinned to an older generation keep working
after a publish), and picks up a new ``CURRENT`` only after warming it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

from core.errors import IndexStateError, ManifestError
from core.settings import SearchSettings
from retrieval import layout
from retrieval.broker import Broker, LocalShard, ShardBackend
from retrieval.lexical import FieldBoosts, LexicalShard
from retrieval.manifest import IndexManifest, IndexRoot, resolve_index
from retrieval.vector import VectorShard, current_version

POINTER_REREAD_S = 1.0
"""How stale the serving process's view of ``CURRENT`` may be in the one case a ``stat`` cannot tell."""

logger = logging.getLogger(__name__)


def open_vectors(gen_dir: Path, shard: int) -> VectorShard | None:
    """The shard's current vector index, or None before any embedding backfill."""
    version = current_version(gen_dir, shard)
    if version is None:
        return None
    try:
        return VectorShard.load(layout.vector_index_dir(layout.vector_root(gen_dir, shard) / version))
    except (ManifestError, OSError, RuntimeError) as exc:
        logger.warning("shard %d: vector index unusable, serving lexical only: %s", shard, exc)
        return None


class Generation:
    """One generation, opened: its manifest, its broker, and the embedding model its vectors need."""

    def __init__(self, path: Path, manifest: IndexManifest, broker: Broker, vector_model: str | None) -> None:
        self.path = path
        self.manifest = manifest
        self.broker = broker
        self.vector_model = vector_model

    @property
    def id(self) -> str:
        return self.manifest.generation

    @property
    def num_docs(self) -> int:
        return self.broker.num_docs

    @property
    def has_vectors(self) -> bool:
        return self.vector_model is not None

    @classmethod
    def open(
        cls,
        path: Path,
        settings: SearchSettings,
        *,
        remote: Sequence[Sequence[ShardBackend]] | None = None,
    ) -> Self:
        """Open a generation directory in-process, or attach a broker to remote shards."""
        manifest = IndexManifest.load(path)
        boosts = FieldBoosts.from_settings(settings)
        shards: list[list[ShardBackend]]
        if remote is not None:
            shards = [list(r) for r in remote]
            if len(shards) != manifest.shards:
                raise IndexStateError(
                    f"{len(shards)} shard addresses given but generation {manifest.generation} has "
                    f"{manifest.shards} shards."
                )
        else:
            shards = []
            for i in range(manifest.shards):
                lexical = LexicalShard(layout.lexical_dir(path, i), boosts=boosts)
                vectors = open_vectors(path, i) if settings.use_vectors else None
                shards.append([LocalShard(i, lexical, vectors)])
        models = {replica.vector_model for replicas in shards for replica in replicas}
        vector_model = models.pop() if len(models) == 1 else None
        if vector_model is None and len(models) > 1:
            logger.warning("generation %s: shards disagree on vectors (%s); lexical only", path, models)
        broker = Broker(shards, deadline_s=settings.deadline_s, hedge=settings.hedge)
        return cls(path, manifest, broker, vector_model)

    def close(self) -> None:
        self.broker.close()


class GenerationSet:
    """The serving generation plus a few older ones, switched when ``CURRENT`` changes."""

    def __init__(
        self,
        index: Path,
        opener: Callable[[Path], Generation],
        *,
        keep: int = 3,
        warm: Callable[[Generation], None] | None = None,
    ) -> None:
        self.index = Path(index)
        self._opener = opener
        self._keep = keep
        self._warm = warm
        self._lock = threading.Lock()
        self._open: OrderedDict[str, Generation] = OrderedDict()
        self._pointer: tuple[float, str] | None = None
        self._pointer_path = str(layout.current_pointer(self.index))
        self._pointer_seen: tuple[tuple[int, int, int], tuple[float, str], float] | None = None
        self.listeners: list[Callable[[Generation], None]] = []
        # Pointer and stamp are read before opening: a publish or an update committed while
        # the shards open then differs from what was read, so the next refresh picks it up.
        self._pointer = self._read_pointer()
        path = resolve_index(self.index)
        stamp = read_update_stamp(path)
        first = opener(path)
        self._open[first.id] = first
        self._current = first
        self._stamps: dict[str, tuple[int, int] | None] = {first.id: stamp}
        """Per open generation, the in-place update stamp it was opened at (or before)."""

    @property
    def current(self) -> Generation:
        return self._current

    def _read_pointer(self) -> tuple[float, str] | None:
        """``(mtime, text)`` of ``CURRENT``, read again only when its stat changed.

        Every search asks; one ``stat`` instead of stat + open + read + close keeps the
        check off the profile under load. A publish renames a new file into place, so
        the inode, mtime or size differ, except when the file system reuses the inode
        within one coarse timestamp tick: the text is read again at least every
        ``POINTER_REREAD_S`` all the same.
        """
        try:
            stat = os.stat(self._pointer_path)
        except FileNotFoundError:
            return None
        key = (stat.st_mtime_ns, stat.st_ino, stat.st_size)
        seen = self._pointer_seen
        now = time.monotonic()
        if seen is not None and seen[0] == key and now - seen[2] < POINTER_REREAD_S:
            return seen[1]
        try:
            with open(self._pointer_path, encoding="utf-8") as handle:
                pointer = (stat.st_mtime, handle.read().strip())
        except FileNotFoundError:
            return None
        self._pointer_seen = (key, pointer, now)
        return pointer

    def get(self, generation: str) -> Generation | None:
        return self._open.get(generation)

    def _reload_if_updated(self) -> None:
        """Reopen the serving generation when the incremental indexer committed to it.

        A fresh ``Generation`` replaces the open one, so a search already running keeps
        the searchers (and document addresses) it started with. Listeners hear of it as
        of a publish.
        """
        current = self._current
        stamp = read_update_stamp(current.path)
        if stamp == self._stamps.get(current.id):
            return
        reopened = self._opener(current.path)
        with self._lock:
            if self._current is not current:
                return
            self._open[current.id] = reopened
            self._current = reopened
            self._stamps[current.id] = stamp
        for listener in self.listeners:
            listener(reopened)  # e.g. the response cache: its answers are stale now

    def refresh(self) -> bool:
        """Switch to the published generation if it changed; True when it did."""
        self._reload_if_updated()
        pointer = self._read_pointer()
        if pointer is None or pointer == self._pointer:
            return False
        with self._lock:
            if pointer == self._pointer:
                return False
            wanted = pointer[1]
            if wanted == self._current.id:
                self._pointer = pointer
                return False
            generation = self._open.get(wanted)
            if generation is None:
                path = IndexRoot(self.index).path_of(wanted)
                stamp = read_update_stamp(path)
                generation = self._opener(path)
                if self._warm is not None:
                    self._warm(generation)
                self._open[wanted] = generation
                self._stamps[wanted] = stamp
            self._open.move_to_end(wanted)
            self._current = generation
            self._pointer = pointer
            while len(self._open) > self._keep:
                _, old = self._open.popitem(last=False)
                if old is not self._current:
                    old.close()
            logger.info("now serving generation %s", wanted)
        for listener in self.listeners:
            listener(generation)
        return True

    def close(self) -> None:
        for generation in self._open.values():
            generation.close()


def read_update_stamp(path: Path) -> tuple[int, int] | None:
    """The generation's in-place update stamp (None before any update): a reader that saw
    another one than it opened at must reopen its shards."""
    try:
        stat = layout.update_stamp(path).stat()
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size)
