"""Passage vectors of an incremental step: embed what is new, then add and mark deleted in HNSW.

A generation with vectors keeps serving hybrid search while it is updated in place, so
a step that changes documents in a shard's lexical index must change the same
documents in that shard's HNSW index before the update stamp is written. The passages
of new and changed documents are looked up in the index root's content-addressed store
(``retrieval.vectors.store``), only the missing ones are encoded, and the shard's
``VectorShard`` replaces those documents (``add``) and drops removed ones
(``mark_deleted``); it is then saved atomically in place. Replaying a step after a
crash adds the same vectors again under the same documents (``add`` replaces a
document's rows), so nothing is held twice.

Deleted rows stay in the HNSW file until compaction rebuilds it from the store; the
shard's ``passages.npy`` (the store's GC roots) only grows between compactions, so
collection never drops a vector a live row still uses.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from core.errors import IndexDamaged
from core.types import DocId, Document
from retrieval.index import layout
from retrieval.index.arrays import load_array
from retrieval.vectors.hnsw import VectorShard, current_version
from retrieval.vectors.store import VectorStore, passage_hashes, save_npy

if TYPE_CHECKING:
    from retrieval.vectors.embed import Embedder

logger = logging.getLogger(__name__)

__all__ = ["EmbedderFor", "VectorStep", "update_shard_vectors", "vector_model"]

EmbedderFor = Callable[[str], "Embedder | None"]
"""An embedder whose ``model_id`` is the given one, or None when none can run here."""


@dataclass(frozen=True, slots=True)
class VectorStep:
    shards: int
    """Shards whose vector index was updated."""
    encoded: int
    """Passages encoded (the rest were found in the store)."""
    added: int
    """Passage vectors added."""


def vector_model(gen_dir: Path, shard: int = 0) -> str | None:
    """The embedding model of a shard's current vector index, or None without vectors."""
    version = current_version(gen_dir, shard)
    if version is None:
        return None
    manifest = layout.manifest_file(layout.vector_index_dir(layout.vector_root(gen_dir, shard) / version))
    try:
        return str(json.loads(manifest.read_text())["model_id"])
    except (OSError, ValueError, KeyError):
        return None


def update_shard_vectors(
    gen_dir: Path,
    shard: int,
    docs: Iterable[Document],
    deletes: Iterable[DocId],
    embedder_for: EmbedderFor,
) -> VectorStep:
    """Bring one shard's current vector index in line with a step's documents and removals."""
    docs, deletes = list(docs), list(deletes)
    version = current_version(gen_dir, shard)
    if version is None or not (docs or deletes):
        return VectorStep(0, 0, 0)
    version_path = layout.vector_root(gen_dir, shard) / version
    index_path = layout.vector_index_dir(version_path)
    try:
        vectors = VectorShard.load(index_path)
    except IndexDamaged as exc:  # never built upon; compaction builds it again from the store
        logger.error("shard %d: vectors not updated, their index is damaged: %s", shard, exc)
        return VectorStep(0, 0, 0)
    embedder = embedder_for(vectors.model_id)
    if embedder is None:
        logger.warning("shard %d: no embedder for %s; its vectors lag behind", shard, vectors.model_id)
        return VectorStep(0, 0, 0)
    rows: list[int] = []
    texts: list[str] = []
    touched: set[int] = {int(d) for d in deletes}
    for doc in docs:
        touched.add(int(doc.doc_id))
        for passage in embedder.passages(doc.title, doc.body or doc.description):
            rows.append(int(doc.doc_id))
            texts.append(passage)
    hashes = passage_hashes(texts, embedder.max_seq_length)
    store = VectorStore.for_root(layout.store_root(gen_dir), embedder.model_id)
    encoded = 0
    with store.locked():
        absent = np.flatnonzero(~store.contains(hashes))
        missing, first = np.unique(hashes[absent], return_index=True)
        if len(missing):
            store.append(missing, embedder.encode([texts[i] for i in absent[first].tolist()]))
            encoded = len(missing)
        found = store.vectors(hashes) if len(hashes) else np.zeros((0, vectors.dim), dtype=np.float32)
    vectors.delete(sorted(touched & {int(d) for d in vectors.doc_ids()}))
    vectors.add(np.asarray(rows, dtype=np.int64), found)
    vectors.meta = {**vectors.meta, "passages": "incremental"}  # a later backfill rebuilds it
    passages = layout.passages_file(version_path)
    held = load_array(passages) if passages.exists() else np.zeros(0, dtype=np.uint64)
    save_npy(passages, np.union1d(held.astype(np.uint64), hashes))
    vectors.save(index_path)
    return VectorStep(1, encoded, len(rows))
