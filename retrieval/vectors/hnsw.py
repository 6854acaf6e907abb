"""hnswlib vector shard: passage vectors in, document-level cosine top-k out.

One shard holds the passage vectors of one document partition, for one embedding
model. Labels inside hnswlib are row numbers (0, 1, 2, …); the id map
maps each to its document (``-1`` once deleted), so a long document may own several
rows and scores as its best passage. Vectors are normalized, so the ``ip`` space is
cosine.

A saved shard is a directory of a manifest, the HNSW file and the id map, one per
shard and model version beside the lexical index (paths in :mod:`retrieval.index.layout`),
so a new model backfills into a new directory while the old one keeps serving.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import hnswlib
import numpy as np
from numpy.typing import NDArray

from core.atomic import staging_dir
from core.errors import ConfigError, IndexDamaged, ManifestError
from core.settings import EmbedSettings
from core.types import DocId, ScoredDoc
from retrieval.index import layout
from retrieval.index.arrays import load_array
from retrieval.index.checksums import check, from_json, record, to_json
from retrieval.index.integrity import describe

logger = logging.getLogger(__name__)

FORMAT = "trawl-vector"
FORMAT_VERSION = 1
_DELETED = -1


def current_version(index_dir: Path, shard: int) -> str | None:
    """The version named by the shard's ``vector/CURRENT``, or None before the first backfill."""
    pointer = layout.vector_pointer(index_dir, shard)
    return pointer.read_text().strip() if pointer.exists() else None


class VectorShard:
    """An HNSW index of passage vectors with a row → document map.

    Not safe for concurrent writes; concurrent ``search`` calls are fine except that
    ``set_ef`` is index-wide (a larger k raises ef for everyone, which only costs time).
    """

    def __init__(
        self,
        *,
        dim: int,
        model_id: str,
        m: int = 16,
        ef_construction: int = 200,
        ef: int = 100,
        capacity: int = 1024,
        _index: hnswlib.Index | None = None,
        _labels: NDArray[np.int64] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.dim = dim
        self.model_id = model_id
        self.m = m
        self.ef_construction = ef_construction
        self.ef = ef
        self.meta: dict[str, Any] = dict(meta or {})
        """Free-form provenance saved in the manifest (the backfill records its chunks here)."""
        if _index is None:
            _index = hnswlib.Index(space="ip", dim=dim)
            _index.init_index(max_elements=max(1, capacity), ef_construction=ef_construction, M=m)
        self._index = _index
        self._index.set_ef(ef)
        self._index.set_num_threads(1)
        self._labels: NDArray[np.int64] = _labels if _labels is not None else np.zeros(0, dtype=np.int64)
        self._doc_rows: dict[int, list[int]] = {}
        for row, doc in enumerate(self._labels.tolist()):
            if doc != _DELETED:
                self._doc_rows.setdefault(doc, []).append(row)
        self._exact: tuple[NDArray[np.float32], NDArray[np.intp], NDArray[np.int64]] | None = None
        self._exact_lock = threading.Lock()
        self._by_doc: tuple[NDArray[np.float32], NDArray[np.intp], NDArray[np.int64]] | None = None
        self._doc_means: tuple[NDArray[np.float32], NDArray[np.float32]] | None = None
        """(the exact matrix they were made from, one unit mean vector per document)."""

    @classmethod
    def from_settings(cls, s: EmbedSettings, *, dim: int, model_id: str, capacity: int = 1024) -> Self:
        return cls(
            dim=dim,
            model_id=model_id,
            m=s.hnsw_m,
            ef_construction=s.hnsw_ef_construction,
            ef=s.hnsw_ef,
            capacity=capacity,
        )

    # -- size ----------------------------------------------------------------------------

    @property
    def num_docs(self) -> int:
        return len(self._doc_rows)

    @property
    def num_rows(self) -> int:
        """Live passage vectors (deleted ones excluded)."""
        return int(np.count_nonzero(self._labels != _DELETED))

    def doc_ids(self) -> set[DocId]:
        return {DocId(d) for d in self._doc_rows}

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, int) and doc_id in self._doc_rows

    # -- writes --------------------------------------------------------------------------

    def add(self, rows: Sequence[int] | NDArray[np.int64], vectors: NDArray[np.float32]) -> None:
        """Add passage vectors; ``rows[i]`` is the document of ``vectors[i]``.

        A document already present is replaced (its old rows are deleted first), so
        re-embedding a changed page never leaves two versions of it.
        """
        doc_rows = np.asarray(rows, dtype=np.int64)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ConfigError(f"Vectors have shape {vectors.shape}; this shard holds dim {self.dim}.")
        if len(doc_rows) != len(vectors):
            raise ConfigError(f"{len(doc_rows)} document ids for {len(vectors)} vectors.")
        if len(vectors) == 0:
            return
        if np.any(doc_rows < 0):
            raise ConfigError("Document ids must be non-negative (63-bit hashes).")
        self.delete(sorted({int(d) for d in doc_rows.tolist()} & self._doc_rows.keys()))
        start = len(self._labels)
        needed = start + len(vectors)
        if needed > self._index.get_max_elements():
            self._index.resize_index(max(needed, 2 * self._index.get_max_elements()))
        labels = np.arange(start, needed, dtype=np.int64)
        self._index.add_items(vectors, labels)
        self._labels = np.concatenate([self._labels, doc_rows])
        for label, doc in zip(labels.tolist(), doc_rows.tolist(), strict=True):
            self._doc_rows.setdefault(doc, []).append(label)
        self._exact = None

    def delete(self, doc_ids: Iterable[int]) -> int:
        """Remove documents (``mark_deleted`` on each of their rows); returns how many."""
        removed = 0
        for doc in doc_ids:
            for label in self._doc_rows.pop(int(doc), []):
                self._index.mark_deleted(label)
                self._labels[label] = _DELETED
            removed += 1
        if removed:
            self._exact = None
        return removed

    # -- search --------------------------------------------------------------------------

    def search(self, vector: NDArray[np.float32], k: int) -> list[ScoredDoc]:
        """Approximate top-``k`` documents by cosine (best passage per document)."""
        live = self.num_rows
        if k <= 0 or live == 0:
            return []
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        k_rows = min(live, max(2 * k, k + 16))
        while True:
            labels, distances = self._knn(query, k_rows)
            docs = self._labels[labels]
            scores = 1.0 - distances.astype(np.float64)
            keep = docs != _DELETED
            docs, scores = docs[keep], scores[keep]
            # Best first, ties by doc id; a document's first row in that order is its best passage.
            order = np.lexsort((docs, -scores))
            _, first = np.unique(docs[order], return_index=True)
            best = order[np.sort(first)]
            if len(best) >= k or k_rows >= live:
                break
            k_rows = min(live, 2 * k_rows)
        return [
            ScoredDoc(DocId(doc), score)
            for doc, score in zip(docs[best[:k]].tolist(), scores[best[:k]].tolist(), strict=True)
        ]

    def _knn(self, query: NDArray[np.float32], k_rows: int) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        ef = max(self.ef, k_rows)
        for _ in range(4):
            self._index.set_ef(ef)
            try:
                labels, distances = self._index.knn_query(query, k=k_rows)
                return labels[0], distances[0]
            except RuntimeError:
                # hnswlib cannot fill k results (many deleted rows): widen the search.
                ef *= 2
            finally:
                self._index.set_ef(self.ef)
        labels, distances = self._index.knn_query(query, k=max(1, k_rows // 2))
        return labels[0], distances[0]

    def _exact_matrix(self) -> tuple[NDArray[np.float32], NDArray[np.intp], NDArray[np.int64]]:
        """(live passage vectors, the document index of each, the sorted document ids).

        Built once, under a lock: reading every vector back from hnswlib takes ~2 s for
        50K passages, and concurrent first queries would otherwise each build a copy.
        """
        exact = self._exact
        if exact is not None:
            return exact
        with self._exact_lock:
            if self._exact is None:
                live = np.flatnonzero(self._labels != _DELETED)
                matrix = np.asarray(self._index.get_items(live, return_type="numpy"), dtype=np.float32)
                docs, group = np.unique(self._labels[live], return_inverse=True)
                self._exact = (matrix.reshape(len(live), self.dim), group.astype(np.intp).ravel(), docs)
                self._by_doc = None
            return self._exact

    def warm(self) -> None:
        """Build the exact matrix now (before a generation serves), not in a user's query."""
        self._exact_matrix()

    def _rows_by_doc(
        self,
    ) -> tuple[NDArray[np.float32], NDArray[np.intp], NDArray[np.int64], NDArray[np.int64]]:
        """The exact matrix with its rows grouped by document: (matrix, row order, docs, group starts)."""
        matrix, group, docs = self._exact_matrix()
        by_doc = self._by_doc
        if by_doc is None or by_doc[0] is not matrix:
            order = np.argsort(group, kind="stable")
            starts = np.searchsorted(group[order], np.arange(len(docs) + 1)).astype(np.int64)
            by_doc = self._by_doc = (matrix, order, starts)
        return matrix, by_doc[1], docs, by_doc[2]

    def search_exact(self, vector: NDArray[np.float32], k: int) -> list[ScoredDoc]:
        """Exact top-``k`` by brute force: the reference for ``ann_recall``."""
        matrix, group, docs = self._exact_matrix()
        if k <= 0 or len(docs) == 0:
            return []
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        best = np.full(len(docs), -np.inf, dtype=np.float32)
        np.maximum.at(best, group, scores)
        k = min(k, len(docs))
        top = np.argpartition(-best, k - 1)[:k]
        ranked = sorted(((float(best[i]), int(docs[i])) for i in top), key=lambda t: (-t[0], t[1]))
        return [ScoredDoc(DocId(doc), score) for score, doc in ranked]

    def similarity(self, vector: NDArray[np.float32], doc_ids: Sequence[DocId]) -> dict[DocId, float]:
        """Exact cosine (best passage) of the given documents; absent ones are left out.

        Lets the ranker see the cosine of lexical candidates that missed the vector top-k.
        One gather of the documents' rows from the cached exact matrix, one product, one
        segmented max: reading vectors back from hnswlib per query cost more than the
        whole lexical search.
        """
        if not doc_ids:
            return {}
        matrix, order, docs, starts = self._rows_by_doc()
        if len(docs) == 0:
            return {}
        wanted = np.asarray([int(d) for d in doc_ids], dtype=np.int64)
        at = np.minimum(np.searchsorted(docs, wanted), len(docs) - 1)
        found = docs[at] == wanted
        at, wanted = at[found], wanted[found]
        lengths = starts[at + 1] - starts[at]
        rows = order[np.repeat(starts[at] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())]
        # A row-wise product and sum rather than a matrix-vector product: BLAS sums a row
        # in an order that depends on how many rows it is given, so a document's cosine
        # would change in its last bits with the other candidates asked about (one
        # shard or two, before or after the broker's cut).
        sims = (matrix[rows] * np.asarray(vector, dtype=np.float32)).sum(axis=1)
        best = np.maximum.reduceat(sims, np.cumsum(lengths) - lengths) if len(sims) else sims
        return {DocId(d): s for d, s in zip(wanted.tolist(), best.astype(np.float64).tolist(), strict=True)}

    def doc_vectors(self, doc_ids: Sequence[DocId]) -> dict[DocId, NDArray[np.float32]]:
        """Each document's vector: the unit-length mean of its passage vectors; absent ones left out.

        What the learned ranker compares candidates with each other by
        (``rerank.features``' ``dense_prf_top<n>``): a long page's passages each match
        the query in one place, and their mean says what the page is about as a whole.
        Computed for every document once per exact matrix (a few milliseconds for
        50K passages) and then read by row, so a document's vector never depends on
        which other documents a request names.
        """
        if not doc_ids:
            return {}
        matrix, order, docs, starts = self._rows_by_doc()
        if len(docs) == 0:
            return {}
        means = self._doc_means
        if means is None or means[0] is not matrix:
            sums = np.add.reduceat(matrix[order], starts[:-1], axis=0)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            norms[norms == 0.0] = 1.0
            means = self._doc_means = (matrix, (sums / norms).astype(np.float32))
        wanted = np.asarray([int(d) for d in doc_ids], dtype=np.int64)
        at = np.minimum(np.searchsorted(docs, wanted), len(docs) - 1)
        found = docs[at] == wanted
        vectors = means[1]
        return {DocId(int(d)): vectors[i] for d, i in zip(wanted[found], at[found], strict=True)}

    # -- persistence ---------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write to ``path`` atomically (a staged directory renamed in)."""
        with staging_dir(Path(path)) as tmp:
            self._index.save_index(str(layout.hnsw_file(tmp)))
            np.save(layout.labels_file(tmp), self._labels, allow_pickle=False)
            files = [layout.hnsw_file(tmp).name, layout.labels_file(tmp).name]
            manifest = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "model_id": self.model_id,
                "dim": self.dim,
                "space": "ip",
                "docs": self.num_docs,
                "rows": self.num_rows,
                "labels": len(self._labels),
                "max_elements": int(self._index.get_max_elements()),
                "params": {"m": self.m, "ef_construction": self.ef_construction, "ef": self.ef},
                "saved_at": time.time(),
                "meta": self.meta,
                "files": to_json(record(tmp, files)),
            }
            layout.manifest_file(tmp).write_text(json.dumps(manifest, indent=2))

    @classmethod
    def load(cls, path: Path, *, ef: int | None = None, model_id: str | None = None) -> Self:
        """Open a saved shard; ``model_id`` (if given) must match the one that built it."""
        path = Path(path)
        manifest_path = layout.manifest_file(path)
        if not manifest_path.exists():
            raise ManifestError(
                f"{path} is not a Trawl vector index (no {manifest_path.name}); "
                "run `trawl embed --index DIR`."
            )
        try:
            raw = json.loads(manifest_path.read_text())
            if raw.get("format") != FORMAT or raw.get("format_version") != FORMAT_VERSION:
                raise ManifestError(f"{manifest_path} has an unknown format; run `trawl embed` again.")
            dim, stored_model = int(raw["dim"]), str(raw["model_id"])
            params = raw["params"]
            sums = from_json(raw.get("files"))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{manifest_path} is not a valid vector manifest: {exc}") from exc
        # Every byte, before hnswlib reads any: it trusts the file, and garbage in it ends in
        # "Label not found" at best and a segfault at worst (an index saved before
        # checksums has no record and loads as it is).
        if damage := check(path, sums, content=True, part="vectors"):
            raise IndexDamaged(f"The vector index at {path} is damaged: {describe(damage)}", tuple(damage))
        if model_id is not None and model_id != stored_model:
            raise ManifestError(
                f"{path} holds vectors of {stored_model}, not {model_id}; "
                "run `trawl embed` to backfill the current model."
            )
        try:
            labels = load_array(layout.labels_file(path)).astype(np.int64)
            index = hnswlib.Index(space="ip", dim=dim)
            index.load_index(str(layout.hnsw_file(path)), max_elements=int(raw["max_elements"]))
        except (OSError, ValueError, RuntimeError) as exc:
            raise IndexDamaged(f"The vector index at {path} cannot be loaded: {exc}") from exc
        for label in np.flatnonzero(labels == _DELETED).tolist():
            try:
                index.mark_deleted(label)
            except RuntimeError:
                pass  # already marked in the saved index
        return cls(
            dim=dim,
            model_id=stored_model,
            m=int(params["m"]),
            ef_construction=int(params["ef_construction"]),
            ef=int(ef if ef is not None else params["ef"]),
            _index=index,
            _labels=labels,
            meta=dict(raw.get("meta") or {}),
        )
