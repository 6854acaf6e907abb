"""What one shard answers, and the calls the broker makes of it.

:class:`ShardBackend` is one replica of one shard: :class:`LocalShard` in this process,
or :class:`retrieval.remote.shard_http.HttpShard` for a ``trawl shard serve`` process.
A shard answers the document frequencies of the query's terms (collection-wide BM25,
:mod:`retrieval.index.collection_stats`), then its lexical and vector candidates, then
(learned rankers on several shards) annotations of the candidates kept after the cut.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from core.errors import ShardUnavailable
from core.types import DocId, Query
from retrieval.index.collection_stats import CorpusStats
from retrieval.index.forward_features import QueryTerms, ShardFeatures, shard_features
from retrieval.index.lexical import LexicalShard, StoredDoc, is_library_panic
from retrieval.query.hybrid import Candidate, CandidateFields, shard_candidates
from retrieval.vectors.hnsw import VectorShard


@dataclass(frozen=True, slots=True)
class ShardRequest:
    query: Query
    vector: NDArray[np.float32] | None
    k_lexical: int
    k_vector: int
    stats: CorpusStats | None
    with_fields: bool = False
    with_doc_vectors: bool = False
    """With ``with_fields``: the candidates' document vectors too (only ``dense_prf`` reads them)."""


@dataclass(frozen=True, slots=True)
class ShardReply:
    shard_id: int
    candidates: tuple[Candidate, ...]
    lexical_total: int
    has_vectors: bool
    features: ShardFeatures | None = None
    """Per-candidate features from the shard's forward index, when the request wanted fields."""


@dataclass(frozen=True, slots=True)
class AnnotateRequest:
    """The second step of a learned-ranker query on a multi-shard index.

    After the broker cut the merged candidates to the global top-k, each shard adds
    what only it can compute for *its kept* candidates: per-field BM25, the exact
    cosine of those outside its vector top-k (``needs_cosine``), and the forward-index
    features, rather than for every shard's whole list before the cut (DECISIONS 31).
    """

    query: Query
    vector: NDArray[np.float32] | None
    stats: CorpusStats | None
    doc_ids: tuple[DocId, ...]
    needs_cosine: tuple[DocId, ...]
    with_doc_vectors: bool = False


@dataclass(frozen=True, slots=True)
class Annotations:
    fields: CandidateFields
    features: ShardFeatures | None


class ShardBackend(Protocol):
    """One replica of one shard."""

    shard_id: int

    @property
    def num_docs(self) -> int: ...

    @property
    def vector_model(self) -> str | None:
        """The embedding model of this shard's vectors (None: lexical only)."""
        ...

    # ``timeout_s``: what is left of the query's deadline; a remote replica must give up
    # by then (a call held past it would only hold a thread the next query needs).

    def doc_freqs(self, query: Query, *, timeout_s: float | None = None) -> dict[tuple[str, str], int]: ...

    def candidates(self, request: ShardRequest, *, timeout_s: float | None = None) -> ShardReply: ...

    def annotate(self, request: AnnotateRequest, *, timeout_s: float | None = None) -> Annotations: ...

    def fetch(
        self, doc_ids: Sequence[DocId], *, timeout_s: float | None = None
    ) -> dict[DocId, StoredDoc]: ...


class LocalShard:
    """A shard opened in this process: its Tantivy index and, when built, its HNSW index.

    A shard whose files turn out damaged while it serves is taken out (:meth:`fail`: every
    call raises :class:`ShardUnavailable`, which the broker reports as a missing shard) or
    loses its vectors (:meth:`drop_vectors`: lexical only), never serving from them again.
    """

    def __init__(self, shard_id: int, lexical: LexicalShard, vector: VectorShard | None = None) -> None:
        self.shard_id = shard_id
        self.lexical = lexical
        self.vector = vector
        self.failed: str | None = None
        """Why this shard no longer answers (None: it does)."""

    @property
    def num_docs(self) -> int:
        return self.lexical.num_docs

    @property
    def vector_model(self) -> str | None:
        return self.vector.model_id if self.vector is not None else None

    def fail(self, reason: str) -> None:
        self.failed = reason

    def drop_vectors(self) -> None:
        self.vector = None

    @contextmanager
    def _serving(self) -> Iterator[None]:
        """Refuse calls once failed; a Tantivy panic (a garbled segment read mid-search)
        fails the shard instead of escaping as a ``BaseException`` past every handler."""
        if self.failed is not None:
            raise ShardUnavailable(f"Shard {self.shard_id} is not served: {self.failed}")
        try:
            yield
        except Exception:
            raise
        except BaseException as exc:
            if not is_library_panic(exc):
                raise
            self.fail(f"its index failed while reading ({exc}); check it with `trawl index verify`")
            raise ShardUnavailable(f"Shard {self.shard_id} is not served: {self.failed}") from None

    # timeout_s is accepted and ignored: an in-process call cannot hang on a network.

    def doc_freqs(self, query: Query, *, timeout_s: float | None = None) -> dict[tuple[str, str], int]:
        with self._serving():
            return self.lexical.doc_freqs(query)

    def candidates(self, request: ShardRequest, *, timeout_s: float | None = None) -> ShardReply:
        with self._serving():
            return self._candidates(request)

    def facet_counts(self, query: Query, field: str) -> dict[str, int]:
        with self._serving():
            return self.lexical.facet_counts(query, field)

    def _candidates(self, request: ShardRequest) -> ShardReply:
        total_holder: list[int] = []
        vector = self.vector  # once: a check may drop it meanwhile
        candidates = shard_candidates(
            self.lexical,
            vector,
            request.query,
            request.vector,
            k_lexical=request.k_lexical,
            k_vector=request.k_vector if vector is not None else 0,
            shard_id=self.shard_id,
            with_fields=request.with_fields,
            with_doc_vectors=request.with_doc_vectors,
            stats=request.stats,
            totals=total_holder,
        )
        forward = self.lexical.forward
        features = None
        if request.with_fields and forward is not None:
            # Learned stages ask for fields; their text features are computed here, where
            # the documents live, so shard processes compute them in parallel. A candidate
            # updated in place since the forward index was written (see
            # ``LexicalShardWriter.commit_update``) gives None: the stored-text path.
            features = shard_features(forward, QueryTerms.of(request.query), [c.doc_id for c in candidates])
        return ShardReply(
            self.shard_id,
            tuple(candidates),
            total_holder[0] if total_holder else 0,
            vector is not None,
            features,
        )

    def annotate(self, request: AnnotateRequest, *, timeout_s: float | None = None) -> Annotations:
        with self._serving():
            return self._annotate(request)

    def _annotate(self, request: AnnotateRequest) -> Annotations:
        fields = CandidateFields.compute(
            self.lexical,
            self.vector,
            request.query,
            request.vector,
            request.stats,
            request.doc_ids,
            request.needs_cosine,
            with_doc_vectors=request.with_doc_vectors,
        )
        forward = self.lexical.forward
        features = None
        if forward is not None:
            features = shard_features(forward, QueryTerms.of(request.query), request.doc_ids)
        return Annotations(fields, features)

    def fetch(self, doc_ids: Sequence[DocId], *, timeout_s: float | None = None) -> dict[DocId, StoredDoc]:
        with self._serving():
            return self.lexical.stored_many(doc_ids)

    def doc_id_for_url(self, url: str) -> DocId | None:
        with self._serving():
            return self.lexical.doc_id_for_url(url)


class FailedShard:
    """A shard that could not be opened (a damaged or unreadable file): it answers nothing,
    so the broker reports it missing and the other shards still serve."""

    def __init__(self, shard_id: int, reason: str) -> None:
        self.shard_id = shard_id
        self.failed = reason

    @property
    def num_docs(self) -> int:
        return 0

    @property
    def vector_model(self) -> str | None:
        return None

    def _refuse(self) -> ShardUnavailable:
        return ShardUnavailable(f"Shard {self.shard_id} is not served: {self.failed}")

    def doc_freqs(self, query: Query, *, timeout_s: float | None = None) -> dict[tuple[str, str], int]:
        raise self._refuse()

    def candidates(self, request: ShardRequest, *, timeout_s: float | None = None) -> ShardReply:
        raise self._refuse()

    def annotate(self, request: AnnotateRequest, *, timeout_s: float | None = None) -> Annotations:
        raise self._refuse()

    def fetch(self, doc_ids: Sequence[DocId], *, timeout_s: float | None = None) -> dict[DocId, StoredDoc]:
        raise self._refuse()
