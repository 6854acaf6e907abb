"""Ranking stages the serving path knows without a trained model: BM25 and the two fusions.

A stage orders the merged candidates of a query and may say why (``explain``). The
LTR and cross-encoder stages live in ``rerank/`` and are handed to the service by the
app, which keeps the dependency arrow pointing one way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.types import DocId, Query, ScoredDoc
from retrieval.index.forward_features import ShardFeatures
from retrieval.index.lexical import StoredDoc
from retrieval.query.hybrid import Candidate, convex, min_max, rrf
from retrieval.query.rm3 import Rm3
from retrieval.query.vector_languages import vectors_read

DocFetcher = Callable[[Sequence[Candidate]], Mapping[DocId, StoredDoc]]
"""Stored documents (text, URL, static values) of candidates, from their shards."""


@dataclass(frozen=True, slots=True)
class RankContext:
    """What a stage may use beyond the candidates' scores."""

    fetch: DocFetcher
    generation: str = ""
    features: ShardFeatures | None = None
    """Features the shards computed for the gathered candidates (learned stages read them)."""


@dataclass(frozen=True, slots=True)
class RankOutput:
    ranked: list[ScoredDoc]
    explain: dict[DocId, dict[str, Any]] = field(default_factory=dict)


class RankStage(Protocol):
    name: str
    needs_vector: bool
    """Whether the stage wants vector candidates (and so a query vector)."""
    with_fields: bool
    """Whether the stage needs per-field BM25 for every candidate."""
    with_doc_vectors: bool
    """Whether it also reads the candidates' document vectors (``dense_prf`` features): a
    remote shard sends ~2 kB of them per candidate, so only a stage that reads them asks."""

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput: ...


class Bm25Stage:
    name = "bm25"
    needs_vector = False
    with_fields = False
    with_doc_vectors = False

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput:
        lexical = sorted(
            (c for c in candidates if c.bm25 is not None),
            key=lambda c: (-(c.bm25 or 0.0), c.lexical_rank or 0),
        )
        return RankOutput([ScoredDoc(c.doc_id, c.bm25 or 0.0) for c in lexical])


class RrfStage:
    name = "hybrid-rrf"
    needs_vector = True
    with_fields = False
    with_doc_vectors = False

    def __init__(self, k: int) -> None:
        self.k = k

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput:
        ranked = rrf(candidates, k=self.k)
        info = {h.doc_id: {"rrf": h.score, "rrf_k": self.k} for h in ranked} if explain else {}
        return RankOutput(ranked, info)


class ConvexStage:
    name = "hybrid"
    needs_vector = True
    with_fields = False
    with_doc_vectors = False

    def __init__(self, weight: float) -> None:
        self.weight = weight

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput:
        weight = self.weight if vectors_read(query) else 0.0
        ranked = convex(candidates, weight=weight)
        if not explain:
            return RankOutput(ranked, {})
        # The two parts the score adds, as the explain page shows them (they sum to it).
        bm25 = min_max({c.doc_id: c.bm25 for c in candidates if c.bm25 is not None})
        cosine = min_max({c.doc_id: c.cosine for c in candidates if c.cosine is not None})
        info: dict[DocId, dict[str, Any]] = {
            h.doc_id: {
                "convex": h.score,
                "cosine_weight": weight,
                "bm25_scaled": bm25.get(h.doc_id, 0.0),
                "cosine_scaled": cosine.get(h.doc_id, 0.0),
            }
            for h in ranked
        }
        return RankOutput(ranked, info)


class DenseStage:
    """The vector ranking alone: candidates from the vector top-k, by cosine (best passage)."""

    name = "dense"
    needs_vector = True
    with_fields = False
    with_doc_vectors = False
    vector_only = True
    """It ranks the first round's vector candidates and nothing else: its list ends there
    (no wider lexical rounds, a total of what it can list)."""

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput:
        dense = sorted(
            (c for c in candidates if c.vector_rank is not None and c.cosine is not None),
            key=lambda c: (-(c.cosine or 0.0), c.shard_id, c.vector_rank or 0),
        )
        return RankOutput([ScoredDoc(c.doc_id, c.cosine or 0.0) for c in dense])


class ExpandedStage:
    """Another stage's ranking, of the query as RM3 expands it (:mod:`retrieval.query.rm3`).

    The stage itself ranks as the one it wraps; :attr:`expansion` tells the search path
    to run a first BM25 search for feedback documents and to gather candidates for the
    expanded query instead."""

    def __init__(self, inner: RankStage, expansion: Rm3) -> None:
        self.inner = inner
        self.expansion = expansion
        self.name = f"{inner.name}-rm3"
        self.needs_vector = inner.needs_vector
        self.with_fields = inner.with_fields
        self.with_doc_vectors = inner.with_doc_vectors

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput:
        return self.inner.rank(query, candidates, explain=explain, context=context)
