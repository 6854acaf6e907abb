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

from core.errors import IndexStateError
from core.settings import SearchSettings
from retrieval.index import layout
from retrieval.index.checksums import Damage, check
from retrieval.index.integrity import describe, generation_files
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_query import FieldBoosts
from retrieval.index.manifest import IndexManifest
from retrieval.index.pins import Pin
from retrieval.index.root import IndexRoot, resolve_index
from retrieval.query.broker import Broker
from retrieval.query.shard_backend import FailedShard, LocalShard, ShardBackend
from retrieval.text.tokenizer import ANALYSIS_VERSION
from retrieval.vectors.hnsw import VectorShard, current_version

POINTER_REREAD_S = 1.0
"""How stale the serving process's view of ``CURRENT`` may be in the one case a ``stat`` cannot tell."""
REOPEN_AFTER_S = 30.0
"""How long a generation that failed to open is not tried again (every search would)."""
OPEN_ERRORS = (IndexStateError, OSError, ValueError, RuntimeError)
"""What opening a generation raises for a missing, unreadable or damaged file."""

logger = logging.getLogger(__name__)


def open_vectors(gen_dir: Path, shard: int) -> VectorShard | None:
    """The shard's current vector index, or None before any embedding backfill (or when it
    is damaged: logged)."""
    return open_vectors_checked(gen_dir, shard)[0]


def _damage_of(exc: Exception, path: Path, shard: int, part: str) -> list[Damage]:
    """What an open refused, each file tagged with its shard and part."""
    found = [d for d in getattr(exc, "damage", ()) if isinstance(d, Damage)]
    if not found:
        return [Damage(path, str(exc), shard, part)]
    return [Damage(d.path, d.problem, shard, part) for d in found]


def open_vectors_checked(gen_dir: Path, shard: int) -> tuple[VectorShard | None, list[Damage]]:
    """The shard's current vector index (None before any backfill), or None and why not."""
    try:
        version = current_version(gen_dir, shard)
    except OSError as exc:
        return None, [Damage(layout.vector_pointer(gen_dir, shard), str(exc), shard, "vectors")]
    if version is None:
        return None, []
    path = layout.vector_index_dir(layout.vector_root(gen_dir, shard) / version)
    try:
        return VectorShard.load(path), []
    except (IndexStateError, OSError, RuntimeError, ValueError) as exc:
        damage = _damage_of(exc, path, shard, "vectors")
    logger.warning("shard %d: vector index unusable, serving lexical only: %s", shard, describe(damage))
    return None, damage


def open_shard(
    gen_dir: Path, shard: int, settings: SearchSettings, boosts: FieldBoosts
) -> tuple[LocalShard | FailedShard, list[Damage]]:
    """One shard in this process, and the damage its open found: a shard with a damaged
    lexical file is not served (:class:`FailedShard`), one with a damaged vector file
    serves lexical only. Sizes are checked here; hnswlib's file is hashed before loading."""
    path = layout.lexical_dir(gen_dir, shard)
    try:
        lexical = LexicalShard(path, boosts=boosts)
    except (IndexStateError, OSError, ValueError) as exc:
        damage = _damage_of(exc, path, shard, "lexical")
        logger.error("shard %d is not served: %s", shard, describe(damage))
        return FailedShard(shard, describe(damage)), damage
    if not settings.use_vectors:
        return LocalShard(shard, lexical), []
    vectors, damage = open_vectors_checked(gen_dir, shard)
    return LocalShard(shard, lexical, vectors), damage


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

    def __init__(
        self,
        path: Path,
        manifest: IndexManifest,
        broker: Broker,
        vector_model: str | None,
        damage: Sequence[Damage] = (),
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.broker = broker
        self.vector_model = vector_model
        self.damage: list[Damage] = list(damage)
        """Damaged files found in it (at open or by a later check): their shards' parts are out."""
        self._damage_lock = threading.Lock()
        self.view = manifest.generation
        self.users = 0
        """Searches running on it now (:meth:`GenerationSet.using`): it is closed only at zero."""
        self.retired = False
        """Dropped from the set: closed as soon as the last search on it ends."""
        self._closed = False
        self.pin = Pin(None)
        """Keeps ``trawl index gc`` off the files while this is open (cursors name it)."""

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
        pin = Pin.hold(path)
        try:
            generation = cls._open(path, settings, remote)
        except BaseException:
            pin.release()
            raise
        generation.pin = pin
        return generation

    @classmethod
    def _open(
        cls, path: Path, settings: SearchSettings, remote: Sequence[Sequence[ShardBackend]] | None
    ) -> Self:
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
        damage = check(path, generation_files(manifest), content=False)  # its vocabulary: sizes
        if remote is None:
            shards = []
            for i in range(manifest.shards):
                backend, found = open_shard(path, i, settings, boosts)
                shards.append([backend])
                damage += found
        # A shard whose vectors (or whole self) are out for damage has no say: the others
        # still serve theirs, and answers name it in missing (vector) shards.
        excused = {d.shard for d in damage}
        models = {r.vector_model for i, replicas in enumerate(shards) if i not in excused for r in replicas}
        vector_model = models.pop() if len(models) == 1 else None
        if vector_model is None and len(models) > 1:
            logger.warning("generation %s: shards disagree on vectors (%s); lexical only", path, models)
        broker = Broker(
            shards,
            deadline_s=settings.deadline_s,
            hedge=settings.hedge,
            trip_after=settings.circuit_trip_after,
            probe_every_s=settings.circuit_probe_every_s,
        )
        return cls(path, manifest, broker, vector_model, damage)

    def take_out(
        self, found: Sequence[Damage], *, then: Callable[[list[Damage]], None] | None = None
    ) -> list[Damage]:
        """Stop serving the parts of shards with damaged files (the vectors of a bad vector
        file, the whole shard for any other); returns the damage not known before.

        ``then`` (clearing the response cache) runs before the damage shows in
        :meth:`problems`: once ``/healthz`` says "degraded", no answer comes from the damaged
        part or from a cached answer that used it."""
        with self._damage_lock:
            known = {d.path for d in self.damage}
            new: list[Damage] = []
            for d in found:
                if d.path not in known:
                    known.add(d.path)
                    new.append(d)
            for d in new:
                logger.error("generation %s: %s", self.id, d)
                self._take_out_part(d)
            if new and then is not None:
                then(new)
            self.damage.extend(new)
        return new

    def _take_out_part(self, d: Damage) -> None:
        if d.shard is None or d.shard >= len(self.broker.shards):
            return
        for replica in self.broker.shards[d.shard]:
            if d.part == "vectors" and callable(drop := getattr(replica, "drop_vectors", None)):
                drop()
            elif d.part != "vectors" and callable(fail := getattr(replica, "fail", None)):
                fail(str(d))

    def problems(self) -> list[str]:
        """What this generation does not serve and why (``/healthz`` says "degraded")."""
        with self._damage_lock:  # a part being taken out shows once, with its file
            damage = list(self.damage)
            failed = [
                (r.shard_id, getattr(r, "failed", None)) for replicas in self.broker.shards for r in replicas
            ]
        out = [str(d) for d in damage]
        named = {d.shard for d in damage if d.part != "vectors"}
        out += [
            f"shard {shard}: {why}" for shard, why in failed if isinstance(why, str) and shard not in named
        ]
        if self.manifest.analysis != ANALYSIS_VERSION:
            out.append(
                f"generation {self.manifest.generation} was analysed by another Trawl (text analysis "
                f"version {self.manifest.analysis}, this one {ANALYSIS_VERSION}): some queries do not match "
                "it as they should (Chinese, Japanese and Korean ones, words such as 'shell' and 'id'); "
                "rebuild it with `trawl index`"
            )
        return out + self.broker.circuits.problems()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.broker.close()
            self.pin.release()


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
        self.failures: dict[str, str] = {}
        """Per generation id, why it could not be opened (the one before it goes on serving)."""
        self._failed_at: dict[object, float] = {}

    def problems(self) -> list[str]:
        """What is not served and why: damage in the serving generation, generations that failed to open."""
        return [*self._current.problems(), *self.failures.values()]

    def _refused(self, key: object) -> bool:
        """Whether this publish or update failed to open a moment ago (not tried again yet)."""
        at = self._failed_at.get(key)
        return at is not None and time.monotonic() - at < REOPEN_AFTER_S

    def _failed(self, key: object, generation: str, exc: BaseException) -> None:
        logger.error(
            "generation %s could not be opened, still serving %s: %s", generation, self._current.id, exc
        )
        self._failed_at[key] = time.monotonic()
        self.failures[generation] = (
            f"generation {generation} could not be opened ({exc}); still serving {self._current.id}"
        )

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
        if stamp == self._stamps.get(current.view) or self._refused((current.view, stamp)):
            return
        try:
            reopened, stamp = self._open_labelled(current.path)
        except OPEN_ERRORS as exc:  # a file damaged past opening: the view open now goes on
            self._failed((current.view, stamp), current.id, exc)
            return
        self.failures.pop(current.id, None)
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
                self.failures = {g: why for g, why in self.failures.items() if g == wanted}
                return False
            generation = self.latest(wanted)
            if generation is None:
                if self._refused(pointer):
                    return False
                try:
                    generation, stamp = self._open_labelled(IndexRoot(self.index).path_of(wanted))
                except OPEN_ERRORS as exc:  # no 500 for every search: the current one goes on
                    self._failed(pointer, wanted, exc)
                    return False
                try:
                    if self._warm is not None:
                        self._warm(generation)
                except Exception as exc:  # noqa: BLE001 - a generation that fails its warm-up is not served
                    logger.exception("warming generation %s failed", wanted)
                    generation.close()
                    self._failed(pointer, wanted, exc)
                    return False
                self._open[generation.view] = generation
                self._stamps[generation.view] = stamp
            self._open.move_to_end(generation.view)
            self._current = generation
            self._pointer = pointer
            self.failures.clear()  # what failed before is no longer what should serve
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
