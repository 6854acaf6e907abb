"""Passage vectors by (model id, passage hash), shared by every generation of an index root.

Why content-addressed: a recrawl changes a few pages, and a new generation used to embed
every document again. A passage's vector is found by the hash of the encoded text, so a new
generation links the vectors of unchanged passages and only new ones reach the encoder.

How it stays correct when killed: the store is append-only segments of (uint64 hashes,
float32 vectors) ``.npy`` files, each fsynced and renamed into place (:mod:`core.atomic`),
then named in ``checkpoint.json``, the commit point: files it does not name are a killed
run's leftovers, deleted on the next open, so a hash is committed once or absent. One writer
per model (:func:`exclusive_lock`). Garbage collection writes the kept vectors as a new
segment, commits a checkpoint naming only it, then deletes the old files: a kill leaves the
old or the new set committed.

Paths are named in :mod:`retrieval.index.layout` (``ROOT/vectors/<version>/``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from core.atomic import write_text, write_with
from core.errors import ManifestError
from retrieval.index import layout
from retrieval.index.arrays import load_array

logger = logging.getLogger(__name__)

Hashes = NDArray[np.uint64]


def passage_hash(text: str, max_seq_length: int) -> int:
    """64-bit hash of what the encoder sees: the passage text and where it is cut."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{max_seq_length}\x00{text}".encode())
    return int.from_bytes(h.digest(), "big")


def passage_hashes(texts: Sequence[str], max_seq_length: int) -> Hashes:
    return np.fromiter((passage_hash(t, max_seq_length) for t in texts), dtype=np.uint64, count=len(texts))


def save_npy(path: Path, array: NDArray[np.generic]) -> None:
    """Write one ``.npy`` durably and atomically."""

    def write(tmp: Path) -> None:
        with tmp.open("wb") as handle:  # a handle: given a path, np.save would append ".npy"
            np.save(handle, array, allow_pickle=False)

    write_with(path, write)


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """One writer at a time (a second waits): two writers appending to one checkpoint
    would lose each other's work."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.warning("another writer holds %s; waiting for it", path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True, slots=True)
class GcReport:
    model_id: str
    kept: int
    dropped: int


class VectorStore:
    """Committed passage vectors of one model; open it under :meth:`locked` to write."""

    def __init__(self, path: Path, model_id: str) -> None:
        self.path = Path(path)
        self.model_id = model_id
        self.path.mkdir(parents=True, exist_ok=True)
        self.segments: list[str] = []
        self._hashes: Hashes = np.zeros(0, dtype=np.uint64)
        self._vectors: list[NDArray[np.float32]] = []
        self._order: NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        self._reload()

    @classmethod
    def for_root(cls, root: Path, model_id: str) -> VectorStore:
        return cls(layout.vector_store_dir(root, model_id), model_id)

    @contextmanager
    def locked(self) -> Iterator[VectorStore]:
        """Hold the writer lock; the store is re-read under it (another writer may have committed)."""
        with exclusive_lock(layout.store_lock(self.path)):
            self._reload()
            self._drop_uncommitted()
            yield self

    # -- reading ----------------------------------------------------------------------

    def _reload(self) -> None:
        checkpoint = layout.checkpoint_file(self.path)
        if checkpoint.exists():
            raw = json.loads(checkpoint.read_text())
            if raw.get("model_id") != self.model_id:
                raise ManifestError(f"{checkpoint} belongs to {raw.get('model_id')}, not {self.model_id}.")
            self.segments = list(raw["segments"])
        else:
            self.segments = []
        hashes = [self._load(name, "hashes") for name in self.segments]
        self._vectors = [self._load(name, "vectors").astype(np.float32, copy=False) for name in self.segments]
        self._hashes = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
        self._order = np.argsort(self._hashes, kind="stable")

    def _load(self, name: str, part: str) -> NDArray[Any]:
        return load_array(layout.segment_file(self.path, name, part), mmap_mode="r")

    def _drop_uncommitted(self) -> None:
        committed = set(self.segments)
        for file in self.path.iterdir():
            if file.name in (layout.CHECKPOINT, layout.store_lock(self.path).name):
                continue
            if file.name.split(".", 1)[0] not in committed:
                logger.info("removing %s left by an interrupted backfill", file)
                file.unlink()

    def __len__(self) -> int:
        return len(self._hashes)

    def hashes(self) -> Hashes:
        """Every committed hash (one per vector), in commit order."""
        return self._hashes.copy()

    def positions(self, hashes: Hashes) -> NDArray[np.intp]:
        """Row of each hash in the store, -1 where it is absent."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        if len(self._hashes) == 0 or len(hashes) == 0:
            return np.full(len(hashes), -1, dtype=np.intp)
        sorted_hashes = self._hashes[self._order]
        at = np.searchsorted(sorted_hashes, hashes)
        at_clipped = np.minimum(at, len(sorted_hashes) - 1)
        found = sorted_hashes[at_clipped] == hashes
        return np.where(found, self._order[at_clipped], -1).astype(np.intp)

    def contains(self, hashes: Hashes) -> NDArray[np.bool_]:
        return self.positions(hashes) >= 0

    def vectors(self, hashes: Hashes) -> NDArray[np.float32]:
        """Vectors of ``hashes`` (every one must be committed), in the order given."""
        positions = self.positions(hashes)
        if (positions < 0).any():
            raise ManifestError(f"{int((positions < 0).sum())} passages have no vector in {self.path}.")
        out = np.empty((len(positions), self.dim), dtype=np.float32)
        offsets = np.cumsum([0] + [len(v) for v in self._vectors])
        segment = np.searchsorted(offsets, positions, side="right") - 1
        for s in np.unique(segment).tolist():
            pick = segment == s
            out[pick] = self._vectors[s][positions[pick] - offsets[s]]
        return out

    @property
    def dim(self) -> int:
        return int(self._vectors[0].shape[1]) if self._vectors else 0

    # -- writing (under locked()) -----------------------------------------------------

    def _commit(self, segments: list[str]) -> None:
        checkpoint = {"model_id": self.model_id, "segments": segments}
        write_text(layout.checkpoint_file(self.path), json.dumps(checkpoint, indent=1))

    def _next_name(self) -> str:
        return layout.segment_name(1 + max((layout.segment_number(n) for n in self.segments), default=0))

    def append(self, hashes: Hashes, vectors: NDArray[np.float32]) -> str:
        """Write one segment of hashes not yet stored and commit it; returns its name."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        if len(hashes) != len(vectors):
            raise ValueError(f"{len(hashes)} hashes for {len(vectors)} vectors")
        if len(np.unique(hashes)) != len(hashes) or self.contains(hashes).any():
            raise ValueError("a segment may only hold hashes that are new to the store")
        name = self._next_name()
        save_npy(layout.segment_file(self.path, name, "hashes"), hashes)
        save_npy(layout.segment_file(self.path, name, "vectors"), np.asarray(vectors, dtype=np.float32))
        self._commit([*self.segments, name])
        self._reload()
        return name

    def retain(self, keep: Hashes) -> GcReport:
        """Drop every vector whose hash is not in ``keep`` (segments rewritten atomically)."""
        wanted = np.isin(self._hashes, np.asarray(keep, dtype=np.uint64))
        dropped = int((~wanted).sum())
        if dropped == 0:
            return GcReport(self.model_id, len(self._hashes), 0)
        old = list(self.segments)
        new: list[str] = []
        if wanted.any():
            name = self._next_name()
            hashes = self._hashes[wanted]
            save_npy(layout.segment_file(self.path, name, "hashes"), hashes)
            save_npy(layout.segment_file(self.path, name, "vectors"), self.vectors(hashes))
            new.append(name)
        self._commit(new)
        self._vectors = []  # release the maps of the files about to go
        self._reload()
        for name in old:
            for part in ("hashes", "vectors"):
                layout.segment_file(self.path, name, part).unlink(missing_ok=True)
        return GcReport(self.model_id, len(self._hashes), dropped)
