"""Embeddings backfill: give every stored document a vector for the current model.

Embedding is the dominant cost of indexing (tens of documents per second per CPU), so
the job must survive being killed and must never redo finished work:

- Documents are embedded in chunks of ``chunk_docs``. A chunk is written as ``.npy``
  files (fsynced, renamed into place), then named in the checkpoint (also renamed
  into place). The checkpoint is the commit point: files of a chunk it does not name
  are leftovers of a killed run and are deleted on the next start.
- A document needs embedding when no committed chunk holds it with the same content
  key (hash of title, body and passage settings), so edited pages are re-embedded and
  unchanged ones never are.
- When every document has vectors, the HNSW index of the version is brought up to
  date from the chunks it has not absorbed yet (recorded in its manifest), documents
  gone from the lexical index are deleted, and ``vector/CURRENT`` is pointed at it.

Each shard and model has a version directory of chunks, a saved vector index and a
lock (paths in :mod:`retrieval.layout`). A new model gets a new version directory; the
old one is untouched and keeps serving until the new one is complete and ``CURRENT``
moves.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from core.atomic import write_text, write_with
from core.errors import ManifestError
from core.settings import EmbedSettings
from retrieval import layout
from retrieval.embed import Embedder
from retrieval.lexical import LexicalShard
from retrieval.manifest import IndexManifest
from retrieval.vector import VectorShard

logger = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]
"""Called with (documents done in this run, documents to do in this run)."""


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """What one backfill run did, summed over shards."""

    model_id: str
    version: str
    docs: int
    """Documents in the index."""
    embedded: int
    """Documents embedded by this run (the rest were already done)."""
    rows: int
    """Passage vectors in the published indexes."""
    seconds: float


def open_vector_shard(index_dir: Path, shard: int, *, model_id: str, ef: int | None = None) -> VectorShard:
    """The vector index of ``model_id`` for one shard; raises ManifestError if not built."""
    index = layout.vector_index_dir(layout.version_dir(index_dir, shard, model_id))
    return VectorShard.load(index, ef=ef, model_id=model_id)


def content_key(title: str, body: str, embedder: Embedder) -> int:
    """63-bit key of what gets embedded: text plus the settings that shape the passages."""
    h = hashlib.blake2b(digest_size=8)
    params = f"{embedder.passage_words}:{embedder.passage_stride}:{embedder.max_seq_length}"
    for part in (params, title, body):
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "big") & ((1 << 63) - 1)


# -- chunk store -----------------------------------------------------------------------------


def _save_npy(path: Path, array: NDArray[np.generic]) -> None:
    def write(tmp: Path) -> None:
        with tmp.open("wb") as handle:  # a handle: given a path, np.save would append ".npy"
            np.save(handle, array, allow_pickle=False)

    write_with(path, write)


class ChunkStore:
    """Committed vector chunks of one shard and model version."""

    def __init__(self, path: Path, model_id: str) -> None:
        self.path = Path(path)
        self.model_id = model_id
        self.path.mkdir(parents=True, exist_ok=True)
        checkpoint = layout.checkpoint_file(self.path)
        if checkpoint.exists():
            raw = json.loads(checkpoint.read_text())
            if raw.get("model_id") != model_id:
                raise ManifestError(f"{checkpoint} belongs to {raw.get('model_id')}, not {model_id}.")
            self.chunks: list[str] = list(raw["chunks"])
        else:
            self.chunks = []
        self._drop_uncommitted()

    def _drop_uncommitted(self) -> None:
        committed = set(self.chunks)
        for file in self.path.iterdir():
            if file.name == layout.CHECKPOINT:
                continue
            if layout.chunk_of(file.name) not in committed:
                logger.info("removing %s left by an interrupted backfill", file)
                file.unlink()

    def committed_keys(self) -> dict[int, int]:
        """doc id → content key of its latest committed vectors."""
        keys: dict[int, int] = {}
        for name in self.chunks:
            docs = np.load(layout.chunk_file(self.path, name, "docs"), allow_pickle=False)
            keys.update(zip(docs[:, 0].tolist(), docs[:, 1].tolist(), strict=True))
        return keys

    def append(self, docs: NDArray[np.int64], rows: NDArray[np.int64], vectors: NDArray[np.float32]) -> str:
        """Write one chunk and commit it; returns its name."""
        name = layout.chunk_name(1 + max((layout.chunk_number(n) for n in self.chunks), default=0))
        _save_npy(layout.chunk_file(self.path, name, "docs"), docs)
        _save_npy(layout.chunk_file(self.path, name, "rows"), rows)
        _save_npy(layout.chunk_file(self.path, name, "vectors"), vectors)
        self.chunks.append(name)
        checkpoint = {"model_id": self.model_id, "chunks": self.chunks}
        write_text(layout.checkpoint_file(self.path), json.dumps(checkpoint, indent=1))
        return name

    def read(self, name: str) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float32]]:
        """(docs[:, (doc_id, key)], rows, vectors) of one committed chunk."""
        return (
            np.load(layout.chunk_file(self.path, name, "docs"), allow_pickle=False),
            np.load(layout.chunk_file(self.path, name, "rows"), allow_pickle=False),
            np.load(layout.chunk_file(self.path, name, "vectors"), allow_pickle=False),
        )


# -- the job ---------------------------------------------------------------------------------


def _batches(items: list[tuple[int, int, str, str]], size: int) -> Iterator[list[tuple[int, int, str, str]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def backfill_shard(
    index_dir: Path,
    shard: int,
    embedder: Embedder,
    settings: EmbedSettings,
    *,
    chunk_docs: int | None = None,
    on_progress: ProgressFn | None = None,
    publish: bool = True,
) -> tuple[int, int, VectorShard]:
    """Backfill one shard; returns (documents, documents embedded now, vector shard)."""
    lexical = LexicalShard(layout.lexical_dir(index_dir, shard))
    root = layout.version_dir(index_dir, shard, embedder.model_id)
    with exclusive_lock(layout.backfill_lock(root)):
        store = ChunkStore(layout.chunks_dir(root), embedder.model_id)
        stored: dict[int, tuple[int, str, str]] = {}
        for doc in lexical.iter_stored():
            body = doc.body or doc.description
            stored[int(doc.doc_id)] = (content_key(doc.title, body, embedder), doc.title, body)
        done = store.committed_keys()
        todo = sorted(
            (doc_id, key, title, body)
            for doc_id, (key, title, body) in stored.items()
            if done.get(doc_id) != key
        )
        logger.info(
            "shard %d: %d documents, %d already embedded for %s, %d to embed",
            shard,
            len(stored),
            len(stored) - len(todo),
            embedder.model_id,
            len(todo),
        )
        finished = 0
        if on_progress is not None:
            on_progress(0, len(todo))
        for batch in _batches(todo, chunk_docs or settings.backfill_chunk_docs):
            vectors = embedder.embed_documents([(d, title, body) for d, _, title, body in batch])
            docs = np.asarray([(d, key) for d, key, _, _ in batch], dtype=np.int64).reshape(-1, 2)
            store.append(docs, vectors.rows, vectors.vectors)
            finished += len(batch)
            if on_progress is not None:
                on_progress(finished, len(todo))
        vector_shard = _sync_index(layout.vector_index_dir(root), store, stored, embedder, settings)
        if publish:
            write_text(layout.vector_pointer(index_dir, shard), layout.version_name(embedder.model_id) + "\n")
        return len(stored), len(todo), vector_shard


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """One backfill per shard and model at a time (a second job waits): two writers
    appending chunks to one checkpoint would lose each other's work."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.warning("another backfill holds %s; waiting for it", path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sync_index(
    path: Path,
    store: ChunkStore,
    stored: dict[int, tuple[int, str, str]],
    embedder: Embedder,
    settings: EmbedSettings,
) -> VectorShard:
    """Bring the HNSW index up to date with the committed chunks and the lexical index."""
    try:
        shard = VectorShard.load(path, ef=settings.hnsw_ef, model_id=embedder.model_id)
    except ManifestError:
        shard = VectorShard.from_settings(settings, dim=embedder.dim, model_id=embedder.model_id)
        shard.meta = {"chunks": []}
    absorbed = set(shard.meta.get("chunks", []))
    fresh = [name for name in store.chunks if name not in absorbed]
    changed = bool(fresh)
    for name in fresh:
        docs, rows, vectors = store.read(name)
        wanted = {doc_id for doc_id, key in docs.tolist() if doc_id in stored and stored[doc_id][0] == key}
        keep = np.fromiter((r in wanted for r in rows.tolist()), dtype=bool, count=len(rows))
        shard.add(rows[keep], vectors[keep])
    gone = [d for d in shard.doc_ids() if d not in stored]
    if gone:
        shard.delete(gone)
        changed = True
    if changed or not path.exists():
        shard.meta = {"chunks": list(store.chunks), "precision": embedder.precision}
        shard.save(path)
        logger.info("vector index %s: %d documents, %d passages", path, shard.num_docs, shard.num_rows)
    return shard


def backfill_index(
    index_dir: Path,
    embedder: Embedder,
    settings: EmbedSettings,
    *,
    chunk_docs: int | None = None,
    on_progress: ProgressFn | None = None,
    publish: bool = True,
) -> BackfillReport:
    """Embed every document of every shard of ``index_dir`` that lacks a current vector.

    Example: ``backfill_index(Path("data/index"), Embedder.from_settings(s.embed), s.embed)``.
    Safe to kill at any moment and to run again; a second run with nothing new is cheap.
    """
    started = time.perf_counter()
    manifest = IndexManifest.load(index_dir)
    docs = embedded = rows = 0
    for shard in range(manifest.shards):
        n_docs, n_embedded, vector_shard = backfill_shard(
            index_dir,
            shard,
            embedder,
            settings,
            chunk_docs=chunk_docs,
            on_progress=on_progress,
            publish=publish,
        )
        docs += n_docs
        embedded += n_embedded
        rows += vector_shard.num_rows
    return BackfillReport(
        model_id=embedder.model_id,
        version=layout.version_name(embedder.model_id),
        docs=docs,
        embedded=embedded,
        rows=rows,
        seconds=time.perf_counter() - started,
    )
