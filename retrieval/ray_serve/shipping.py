"""A shard of a generation carried to a node's own disk through Ray, each file once per node.

Why through Ray and not a shared filesystem: nothing else is common to every node of a
Ray cluster, and a replica must open its shard from a local disk (Tantivy and hnswlib
memory-map their files). :class:`IndexSource` runs as one actor on the machine that holds
the index root (where ``trawl index`` publishes); it lists a shard's files with their
content hashes and hands them out in pieces. :class:`NodeStore`, one folder per machine
shared by its replicas, keeps every file received under its hash (``blobs/``) and builds
each generation's shard from hard links to them, so a file the next generation keeps (a
vector index the backfill left alone, forward arrays) travels once per node, not once per
generation; a view is removed only when no replica holds its lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ManifestError
from retrieval.index import layout
from retrieval.index.checksums import digest_file
from retrieval.index.generation import read_update_stamp
from retrieval.index.manifest import IndexManifest, read_pointer
from retrieval.index.root import IndexRoot

logger = logging.getLogger(__name__)

__all__ = ["IndexSource", "NodeStore", "ShardFile", "node_data_dir"]

PIECE_BYTES = 8 << 20
"""One read of the source: large enough that a 1 GB shard is ~128 calls, small enough for
Ray's object store on a small node."""
LINK_MIN_BYTES = 1 << 20
"""Files at least this large are hard-linked from the node's blobs (read-only for every
reader here); smaller ones, and every SQLite file, are copied: they cost nothing to copy
and a reader may write beside them."""
NODE_DATA_ENV = "TRAWL_NODE_DATA"


def node_data_dir(configured: str) -> Path:
    """This node's folder for shipped shards: ``TRAWL_NODE_DATA`` in the environment the node's
    ``ray start`` ran with, else the configured folder (``~`` expanded on the node itself).
    Not keyed by Ray's node id, which changes at every ``ray start``: a restarted node finds
    the files it already had."""
    return Path(os.environ.get(NODE_DATA_ENV) or configured).expanduser()


@dataclass(frozen=True, slots=True)
class ShardFile:
    path: str
    """Relative to the generation directory."""
    size: int
    digest: str


@dataclass(frozen=True, slots=True)
class ShardListing:
    generation: str
    stamp: tuple[int, int] | None
    """The generation's in-place update stamp when listed: a replica re-ships at a new one."""
    files: tuple[ShardFile, ...]

    @property
    def view(self) -> str:
        """A folder name for this state of the generation."""
        if self.stamp is None:
            return self.generation
        return f"{self.generation}.{self.stamp[0]:x}{self.stamp[1]:x}"


class IndexSource:
    """The index root's side (a Ray actor on its machine): what serves, and the files of a shard."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self._digests: dict[tuple[str, int, int, int], str] = {}
        self._lock = threading.Lock()
        self._plan: dict[str, Any] = {}

    def remember_plan(self, plan: dict[str, Any]) -> None:
        """The Serve config the shards run under (``trawl shard scale`` changes one count in it)."""
        self._plan = plan

    def plan(self) -> dict[str, Any]:
        return self._plan

    def _path(self, generation: str) -> Path:
        if layout.is_index(self.root):  # a bare index directory: its one generation
            return self.root
        return IndexRoot(self.root).path_of(generation)

    def published(self) -> tuple[str, tuple[int, int] | None]:
        """The serving generation and its update stamp."""
        if layout.is_index(self.root):
            generation = IndexManifest.load(self.root).generation
        else:
            current = read_pointer(layout.current_pointer(self.root))
            if current is None:
                raise ManifestError(f"{self.root} has no published generation.")
            generation = current
        return generation, read_update_stamp(self._path(generation))

    def listing(self, generation: str, shard: int) -> ShardListing:
        """The generation's own files (manifest, vocabulary, update records) and the shard's."""
        path = self._path(generation)
        stamp = read_update_stamp(path)
        names = [p for p in sorted(path.iterdir()) if p.is_file()]
        shard_dir = layout.shard_dir(path, shard)
        if not shard_dir.is_dir():
            raise ManifestError(f"Generation {generation} has no shard {shard}.")
        names += [p for p in sorted(shard_dir.rglob("*")) if p.is_file() and p.name != "lock"]
        files = tuple(ShardFile(str(p.relative_to(path)), p.stat().st_size, self._digest(p)) for p in names)
        return ShardListing(generation, stamp, files)

    def _digest(self, path: Path) -> str:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
        with self._lock:
            known = self._digests.get(key)
        if known is None:
            known = digest_file(path)
            with self._lock:
                self._digests[key] = known
        return known

    def read(self, generation: str, relative: str, offset: int, length: int) -> bytes:
        path = (self._path(generation) / relative).resolve()
        if not path.is_relative_to(self._path(generation).resolve()):
            raise ManifestError(f"{relative!r} is not a file of generation {generation}.")
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)


Reader = Callable[[str, str, int, int], bytes]
"""``(generation, relative path, offset, length) -> bytes``: the source's :meth:`IndexSource.read`."""


class NodeStore:
    """One node's shipped shards: ``blobs/<hash>`` and ``views/<generation view>/shard-…``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.blobs = self.folder / "blobs"
        self.views = self.folder / "views"
        self.received_bytes = 0
        """Bytes fetched from the source by this process (a test reads it)."""

    def view_dir(self, listing: ShardListing, shard: int) -> Path:
        return self.views / f"{listing.view}-s{shard}"

    def materialize(self, listing: ShardListing, shard: int, read: Reader) -> Path:
        """The generation directory holding ``listing``'s files, fetching the ones this node lacks."""
        target = self.view_dir(listing, shard)
        if layout.is_index(target):
            return target
        self.blobs.mkdir(parents=True, exist_ok=True)
        staging = self.views / f".{target.name}.{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        try:
            # The manifest last: a view is complete once its manifest exists (layout.is_index).
            ordered = sorted(listing.files, key=lambda f: f.path == layout.MANIFEST)
            for item in ordered:
                blob = self._blob(listing.generation, item, read)
                out = staging / item.path
                out.parent.mkdir(parents=True, exist_ok=True)
                if item.size >= LINK_MIN_BYTES and not item.path.endswith(".sqlite"):
                    os.link(blob, out)
                else:
                    shutil.copyfile(blob, out)
            try:
                staging.rename(target)
            except OSError:
                if not layout.is_index(target):  # another replica on this node won the race
                    raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return target

    def _blob(self, generation: str, item: ShardFile, read: Reader) -> Path:
        blob = self.blobs / item.digest
        if blob.exists() and blob.stat().st_size == item.size:
            return blob
        partial = self.blobs / f".{item.digest}.{uuid.uuid4().hex[:8]}"
        h = hashlib.blake2b(digest_size=32)
        try:
            with open(partial, "wb") as out:
                offset = 0
                while offset < item.size:
                    piece = read(generation, item.path, offset, min(PIECE_BYTES, item.size - offset))
                    if not piece:
                        raise ManifestError(
                            f"{item.path} of {generation} ended at {offset} of {item.size} bytes."
                        )
                    out.write(piece)
                    h.update(piece)
                    offset += len(piece)
            if h.hexdigest() != item.digest:
                raise ManifestError(f"{item.path} of {generation} changed while it was shipped; try again.")
            os.replace(partial, blob)
        finally:
            partial.unlink(missing_ok=True)
        self.received_bytes += item.size
        return blob

    def hold(self, view: Path) -> int:
        """A shared lock on ``view``, taken before it is made and kept while a replica serves
        from it (the returned descriptor; :meth:`release` it): replicas of every shard on this
        machine share the folder, and :meth:`forget` removes only views no process holds."""
        view.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self._pin(view), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                if os.fstat(fd).st_ino == self._pin(view).stat().st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)  # a forget removed that pin while this waited: take the new one

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)

    def _pin(self, view: Path) -> Path:
        return view.with_name(view.name + ".pin")

    def forget(self, *, blob_age_s: float = 600.0) -> None:
        """Remove the views no replica holds, and blobs no view links to any more (but not
        one fetched lately: a replica may be about to link it)."""
        if self.views.is_dir():
            for view in self.views.iterdir():
                if view.name.startswith(".") or view.suffix == ".pin":
                    continue
                fd = os.open(self._pin(view), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue  # served by a replica on this machine
                try:
                    shutil.rmtree(view, ignore_errors=True)
                    self._pin(view).unlink(missing_ok=True)
                finally:
                    os.close(fd)
        if self.blobs.is_dir():
            old = time.time() - blob_age_s
            for blob in self.blobs.iterdir():
                try:
                    stat = blob.stat()
                    if stat.st_nlink == 1 and stat.st_size >= LINK_MIN_BYTES and stat.st_mtime < old:
                        blob.unlink()
                except FileNotFoundError:
                    continue
