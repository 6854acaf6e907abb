"""Embeddings backfill: give every passage of a generation a vector, encoding only new text.

Embedding is the dominant cost of indexing, so the job must survive being killed and must
never encode a passage twice:

- Vectors live in the index root's content-addressed store (:mod:`retrieval.vectors.store`),
  keyed by (model id, passage hash): unchanged passages are linked, only new or changed
  ones reach the encoder, in batches of ``chunk_docs`` documents, each batch one committed
  store segment, so a killed run resumes from its last segment.
- When every passage has a vector, each shard's HNSW index is built (unless the saved one
  used the same passages), the hashes it used are written beside it (the roots of
  :func:`collect_garbage`), and ``vector/CURRENT`` is pointed at it.

:func:`backfill_new_generation` derives a new generation from the serving one (lexical files
hard-linked), backfills and publishes it; a running service switches by ``refresh``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from core.atomic import temp_sibling, write_text
from core.errors import IndexDamaged, ManifestError
from core.settings import EmbedSettings
from retrieval.index import layout
from retrieval.index.arrays import load_array
from retrieval.index.lexical import LexicalShard
from retrieval.index.manifest import IndexManifest, new_generation_id
from retrieval.index.root import IndexRoot
from retrieval.vectors.embed import Embedder
from retrieval.vectors.hnsw import VectorShard
from retrieval.vectors.store import GcReport, Hashes, VectorStore, passage_hashes, save_npy

logger = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]
"""Called with (passages encoded in this run, passages to encode in this run)."""
_PROGRESS_PASSAGES = 256
"""Passages per encode call: progress moves this often, even inside one large segment."""


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """What one backfill run did, summed over shards."""

    model_id: str
    version: str
    docs: int
    """Documents in the index."""
    embedded: int
    """Documents with at least one passage encoded by this run (the rest were linked)."""
    rows: int
    """Passage vectors in the published indexes."""
    seconds: float
    encoded: int = 0
    """Passages encoded by this run."""
    linked: int = 0
    """Passages whose vectors came from the store."""


def open_vector_shard(index_dir: Path, shard: int, *, model_id: str, ef: int | None = None) -> VectorShard:
    """The vector index of ``model_id`` for one shard; raises ManifestError if not built."""
    index = layout.vector_index_dir(layout.version_dir(index_dir, shard, model_id))
    return VectorShard.load(index, ef=ef, model_id=model_id)


@dataclass(slots=True)
class _ShardPlan:
    """One shard's passages: ``rows[i]`` is the document of passage hash ``hashes[i]``."""

    shard: int
    docs: int
    rows: NDArray[np.int64]
    hashes: Hashes
    texts: list[str]
    todo: list[tuple[int, list[int]]] = field(default_factory=list)
    """(doc id, indexes of its passages to encode), in document order."""


def _plan_shard(index_dir: Path, shard: int, embedder: Embedder, store: VectorStore) -> _ShardPlan:
    lexical = LexicalShard(layout.lexical_dir(index_dir, shard))
    rows: list[int] = []
    texts: list[str] = []
    docs = 0
    for doc in sorted(lexical.iter_stored(), key=lambda d: int(d.doc_id)):
        docs += 1
        for passage in embedder.passages(doc.title, doc.body or doc.description):
            rows.append(int(doc.doc_id))
            texts.append(passage)
    hashes = passage_hashes(texts, embedder.max_seq_length)
    plan = _ShardPlan(shard, docs, np.asarray(rows, dtype=np.int64), hashes, texts)
    missing = ~store.contains(hashes)
    by_doc: dict[int, list[int]] = {}
    for i in np.flatnonzero(missing).tolist():
        by_doc.setdefault(rows[i], []).append(i)
    plan.todo = list(by_doc.items())
    return plan


@dataclass(frozen=True, slots=True)
class Pending:
    """Passages the store lacks, each once, grouped by document in document order."""

    groups: list[tuple[list[str], Hashes]]
    """(texts, their hashes) per document that needs encoding; a group may be empty when
    every passage of it was already queued by an earlier document."""
    total: int
    """Passages to encode."""


EncodeFn = Callable[[Pending, VectorStore, int, "ProgressFn | None"], int]
"""Encodes ``Pending`` into the store, one committed segment per chunk of documents;
returns the passages encoded. :func:`encode_locally` here, or an engine's (Ray Data)."""


def pending_passages(plans: list[_ShardPlan]) -> Pending:
    """What the store lacks over every shard; a passage shared by documents or shards is queued once."""
    seen: set[int] = set()
    groups: list[tuple[list[str], Hashes]] = []
    total = 0
    for plan in plans:
        for _, indexes in plan.todo:
            fresh = []
            for i in indexes:
                h = int(plan.hashes[i])
                if h not in seen:
                    seen.add(h)
                    fresh.append(i)
            groups.append(([plan.texts[i] for i in fresh], plan.hashes[fresh].astype(np.uint64)))
            total += len(fresh)
    return Pending(groups, total)


def encode_locally(embedder: Embedder) -> EncodeFn:
    """The in-process encoder: ``embedder`` in this process, ``chunk_docs`` documents per segment."""

    def encode(pending: Pending, store: VectorStore, chunk_docs: int, on_progress: ProgressFn | None) -> int:
        total = pending.total
        done = 0
        if on_progress is not None:
            on_progress(0, total)
        for start in range(0, len(pending.groups), chunk_docs):
            batch = pending.groups[start : start + chunk_docs]
            texts = [t for group, _ in batch for t in group]
            if not texts:
                continue
            hashes = np.concatenate([h for _, h in batch])
            parts = []
            for first in range(0, len(texts), _PROGRESS_PASSAGES):
                parts.append(embedder.encode(texts[first : first + _PROGRESS_PASSAGES]))
                done += len(parts[-1])
                if on_progress is not None and done < total:
                    on_progress(done, total)
            store.append(hashes, np.concatenate(parts))
            if on_progress is not None:
                on_progress(done, total)
        return done

    return encode


def _digest(rows: NDArray[np.int64], hashes: Hashes) -> str:
    h = hashlib.blake2b(digest_size=12)
    h.update(np.ascontiguousarray(rows).tobytes())
    h.update(np.ascontiguousarray(hashes).tobytes())
    return h.hexdigest()


def _build_shard_index(
    index_dir: Path, plan: _ShardPlan, store: VectorStore, embedder: Embedder, settings: EmbedSettings
) -> VectorShard:
    """The shard's HNSW from the store's vectors (kept as is when built from the same passages)."""
    version = layout.version_dir(index_dir, plan.shard, embedder.model_id)
    path = layout.vector_index_dir(version)
    digest = _digest(plan.rows, plan.hashes)
    try:
        saved = VectorShard.load(path, ef=settings.hnsw_ef, model_id=embedder.model_id)
        if saved.meta.get("passages") == digest:
            return saved
    except (ManifestError, IndexDamaged):
        pass  # none saved yet, or a damaged one: built again
    shard = VectorShard.from_settings(
        settings, dim=embedder.dim, model_id=embedder.model_id, capacity=max(1, len(plan.rows))
    )
    if len(plan.rows):
        shard.add(plan.rows, store.vectors(plan.hashes))
    shard.meta = {"passages": digest, "precision": embedder.precision}
    version.mkdir(parents=True, exist_ok=True)
    save_npy(layout.passages_file(version), plan.hashes)
    if path.exists():
        shutil.rmtree(path)
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
    encode: EncodeFn | None = None,
) -> BackfillReport:
    """Give every passage of every shard of ``index_dir`` a vector of ``embedder``'s model.

    Vectors come from the store of the index root (``layout.store_root``); only passages
    it lacks are encoded. Example:
    ``backfill_index(Path("data/index/generations/g…"), Embedder.from_settings(s.embed), s.embed)``.
    Safe to kill at any moment and to run again; a second run with nothing new is cheap.
    ``encode`` is where the missing passages are encoded (default: ``embedder`` here;
    ``retrieval.batch.ray_jobs.ray_encoder`` on a Ray cluster); planning and HNSW stay here.
    """
    started = time.perf_counter()
    index_dir = Path(index_dir)
    manifest = IndexManifest.load(index_dir)
    store = VectorStore.for_root(layout.store_root(index_dir), embedder.model_id)
    with store.locked():
        plans = [_plan_shard(index_dir, s, embedder, store) for s in range(manifest.shards)]
        needed = sum(len(p.hashes) for p in plans)
        logger.info(
            "%d documents, %d passages; %d documents need %s",
            sum(p.docs for p in plans),
            needed,
            sum(len(p.todo) for p in plans),
            embedder.model_id,
        )
        pending = pending_passages(plans)
        encoder = encode or encode_locally(embedder)
        encoded = encoder(pending, store, chunk_docs or settings.backfill_chunk_docs, on_progress)
        embedded = len(pending.groups)
        rows = 0
        for plan in plans:
            rows += _build_shard_index(index_dir, plan, store, embedder, settings).num_rows
            if publish:
                pointer = layout.vector_pointer(index_dir, plan.shard)
                write_text(pointer, layout.version_name(embedder.model_id) + "\n")
    return BackfillReport(
        model_id=embedder.model_id,
        version=layout.version_name(embedder.model_id),
        docs=sum(p.docs for p in plans),
        embedded=embedded,
        rows=rows,
        seconds=time.perf_counter() - started,
        encoded=encoded,
        linked=needed - encoded,
    )


# -- a new generation with vectors ------------------------------------------------------------


def derive_generation(root: IndexRoot, source: str) -> tuple[str, Path]:
    """Stage a copy of generation ``source`` under a hidden name, lexical files hard-linked
    (Tantivy segments are immutable) and without vectors; returns (new id, staged path)."""
    generation = new_generation_id()
    src = root.path_of(source)
    staged = temp_sibling(layout.generation_dir(root.root, generation))  # names this pid: see IndexRoot.sweep

    def vectors(_directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n == layout.vector_root(src, 0).name]

    shutil.copytree(src, staged, copy_function=os.link, ignore=vectors)
    old = IndexManifest.load(src)
    extra = {k: v for k, v in old.raw.items() if k not in {"format", "format_version", "built_at"}}
    extra.update({"generation": generation, "derived_from": source})
    IndexManifest.write(
        staged,
        shards=old.shards,
        docs=old.docs,
        source=old.source,
        extra={k: v for k, v in extra.items() if k not in {"shards", "docs", "source"}},
    )
    return generation, staged


def backfill_new_generation(
    root: Path,
    embedder: Embedder,
    settings: EmbedSettings,
    *,
    source: str | None = None,
    chunk_docs: int | None = None,
    on_progress: ProgressFn | None = None,
    publish: bool = True,
    encode: EncodeFn | None = None,
) -> tuple[str, BackfillReport]:
    """Derive a generation from ``source`` (default: the serving one), backfill it, and
    publish it; returns (its id, the report). Old generations are left as they were."""
    index_root = IndexRoot(root)
    source = source or index_root.current()
    if source is None:
        raise ManifestError(f"{root} has no published generation to add vectors to; run `trawl index`.")
    generation, staged = derive_generation(index_root, source)
    try:
        report = backfill_index(
            staged, embedder, settings, chunk_docs=chunk_docs, on_progress=on_progress, encode=encode
        )
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    staged.rename(layout.generation_dir(index_root.root, generation))
    if publish:
        index_root.publish(generation)
    return generation, report


# -- garbage collection ------------------------------------------------------------------------


def _retained_indexes(root: Path) -> list[Path]:
    if layout.is_index(root):
        return [root]
    return [info.path for info in IndexRoot(root).list()]


def collect_garbage(root: Path) -> list[GcReport]:
    """Drop stored vectors that no retained generation of ``root`` uses, per model.

    A generation uses the passages its shards' vector indexes were built from
    (``passages.npy``); every complete generation under ``root`` is retained.
    """
    stores = layout.vector_stores_dir(root)
    if not stores.exists():
        return []
    indexes = _retained_indexes(Path(root))
    reports = []
    for path in sorted(p for p in stores.iterdir() if p.is_dir()):
        checkpoint = layout.checkpoint_file(path)
        if not checkpoint.exists():
            continue
        model_id = str(json.loads(checkpoint.read_text())["model_id"])
        used: list[Hashes] = []
        for index_dir in indexes:
            for shard in range(IndexManifest.load(index_dir).shards):
                file = layout.passages_file(layout.version_dir(index_dir, shard, model_id))
                if file.exists():
                    used.append(load_array(file))
        keep = np.unique(np.concatenate(used)) if used else np.zeros(0, dtype=np.uint64)
        store = VectorStore(path, model_id)
        with store.locked():
            report = store.retain(keep)
        logger.info("vector store %s: kept %d, dropped %d", path, report.kept, report.dropped)
        reports.append(report)
    return reports
