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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from core.errors import IndexStateError, ManifestError
from core.settings import SearchSettings
from retrieval.index import layout
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_query import FieldBoosts
from retrieval.index.manifest import IndexManifest
from retrieval.index.root import IndexRoot, resolve_index
from retrieval.query.broker import Broker
from retrieval.query.shard_backend import LocalShard, ShardBackend
from retrieval.vectors.hnsw import VectorShard, current_version

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


def pinned_to(backend: ShardBackend, generation: str) -> ShardBackend:
    """``backend`` asking for ``generation`` in every call, where it can (a shard process
    serves several; an in-process shard is one generation's already)."""
    pin = getattr(backend, "pinned", None)
    return pin(generation) if callable(pin) else backend


class Generation:
    """One generation, opened: its manifest, its broker, and the embedding model its vectors need.

    ``view`` names this opening of it: the generation id, plus the mark of the last
    in-place update it was opened at (:func:`view_key`). An update reopens the
    generation under the same id but a new view, and a cursor pins the view, so it keeps
    paging through the list it started on (an id alone would switch lists under it).
    """

    def __init__(self, path: Path, manifest: IndexManifest, broker: Broker, vector_model: str | None) -> None:
        self.path = path
        self.manifest = manifest
        self.broker = broker
        self.vector_model = vector_model
        self.view = manifest.generation
        self.users = 0
        """Searches running on it now (:meth:`GenerationSet.using`): it is closed only at zero."""
        self.retired = False
        """Dropped from the set: closed as soon as the last search on it ends."""
        self._closed = False

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
            shards = [[pinned_to(replica, manifest.generation) for replica in r] for r in remote]
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
        if not self._closed:
            self._closed = True
            self.broker.close()


def view_key(generation: str, mark: str | None) -> str:
    """The name of one opening of ``generation``: its id before any in-place update."""
    return generation if not mark else f"{generation}~{mark}"


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
        first, stamp = self._open_labelled(resolve_index(self.index))
        self._open[first.view] = first
        self._current = first
        self._stamps: dict[str, tuple[int, int] | None] = {first.view: stamp}
        """Per open view, the in-place update stamp it was opened at (or before)."""

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

    def _open_labelled(self, path: Path) -> tuple[Generation, tuple[int, int] | None]:
        """Open ``path`` with its view named after the update mark read *before* opening
        (and the stamp it was opened at): an update committed meanwhile changes the stamp,
        so the next refresh opens it again under a new view; two openings never share one."""
        stamp = read_update_stamp(path)
        mark = read_update_mark(path)
        generation = self._opener(path)
        generation.view = view_key(generation.id, mark)
        return generation, stamp

    def get(self, view: str) -> Generation | None:
        """The open generation with this view (what a cursor names): never another view of
        it, whose ranked list may differ."""
        return self._open.get(view)

    def latest(self, generation: str) -> Generation | None:
        """The newest open view of the generation with this id."""
        return next((g for g in reversed(self._open.values()) if g.id == generation), None)

    @contextmanager
    def using(self, key: str | None = None) -> Iterator[Generation | None]:
        """The serving generation (or the one ``key`` names; None when it is no longer
        open), kept open until the block ends.

        A publish or an update drops older generations from the set while searches may
        still run on them: a dropped one is closed when its last search ends, never under
        one (its broker's thread pools would refuse the next fan-out: an HTTP 500)."""
        with self._lock:
            generation = self._current if key is None else self.get(key)
            if generation is not None:
                generation.users += 1
        try:
            yield generation
        finally:
            if generation is not None:
                with self._lock:
                    generation.users -= 1
                    close = generation.retired and generation.users == 0
                if close:
                    generation.close()

    def _trim(self, *, superseded: Generation | None = None) -> list[Generation]:
        """Drop the oldest views beyond ``keep`` (under the lock), and every view of
        ``superseded``'s generation older than ``superseded`` itself; those no search uses
        are returned to be closed outside it.

        One view before the latest of a generation stays open: each view holds its own
        copy of the shards' HNSW indexes (loaded, not mapped), and a continuous crawl
        updates every few seconds, so ``keep`` views of it would hold ``keep`` copies.
        """
        drop = [
            key
            for key, g in self._open.items()
            if superseded is not None
            and g.id == superseded.id
            and g is not superseded
            and g is not self._current
        ]
        while len(self._open) - len(drop) > max(self._keep, 1):
            key = next(k for k in self._open if k not in drop and self._open[k] is not self._current)
            drop.append(key)
        unused: list[Generation] = []
        for key in drop:
            old = self._open.pop(key)
            self._stamps.pop(key, None)
            old.retired = True
            if old.users == 0:
                unused.append(old)
        return unused

    def _reload_if_updated(self) -> None:
        """Reopen the serving generation when the incremental indexer committed to it.

        The reopened generation is a new view beside the old one, which stays open (within
        ``keep``, and until the next update) for cursors made on it and closes once unused.
        Listeners hear of it as of a publish.
        """
        current = self._current
        stamp = read_update_stamp(current.path)
        if stamp == self._stamps.get(current.view):
            return
        reopened, stamp = self._open_labelled(current.path)
        with self._lock:
            if self._current is not current or reopened.view in self._open:
                superseded = True
            else:
                superseded = False
                self._open[reopened.view] = reopened
                self._current = reopened
                self._stamps[reopened.view] = stamp
                unused = self._trim(superseded=current)
        if superseded:
            reopened.close()  # another request reopened it first
            return
        for old in unused:
            old.close()
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
            generation = self.latest(wanted)
            if generation is None:
                generation, stamp = self._open_labelled(IndexRoot(self.index).path_of(wanted))
                if self._warm is not None:
                    self._warm(generation)
                self._open[generation.view] = generation
                self._stamps[generation.view] = stamp
            self._open.move_to_end(generation.view)
            self._current = generation
            self._pointer = pointer
            unused = self._trim()
            logger.info("now serving generation %s", wanted)
        for old in unused:
            old.close()
        for listener in self.listeners:
            listener(generation)
        return True

    def close(self) -> None:
        for generation in self._open.values():
            generation.close()


def read_update_mark(path: Path) -> str | None:
    """What the last in-place update wrote into the generation's stamp (None before any):
    the same in every process that serves these files, so it names a view."""
    try:
        return layout.update_stamp(path).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def read_update_stamp(path: Path) -> tuple[int, int] | None:
    """The generation's in-place update stamp (None before any update): a reader that saw
    another one than it opened at must reopen its shards."""
    try:
        stat = layout.update_stamp(path).stat()
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size)
