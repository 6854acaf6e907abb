"""Hybrid recall: the union of lexical and vector candidates, and two fusion baselines.

Lexical search is precise for rare terms and names; embeddings recall what is phrased
differently. Each shard returns its lexical top-k and its vector top-k; the candidate set
is their union, and each :class:`Candidate` keeps what each list said about it (score and
rank) so a learned ranker can decide later. The analyzer's filters (``site:``, ``lang:``,
``filetype:``, ``-term``) reach vector candidates through the lexical shard's own filter
query, so both lists obey the same rules.

Fusion baselines: :func:`rrf`, reciprocal rank fusion ``sum 1 / (k + rank)`` (Cormack et
al. 2009), needs no score calibration (``k`` is ``search.rrf_k``, read by serving and the
evaluation harness alike); :func:`convex`, ``w * cos' + (1 - w) * bm25'`` with each score
min-max normalized over the candidates that have it (absent = 0), ``w`` chosen on
held-out folds.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from core.types import DocId, Query, ScoredDoc
from retrieval.index.collection_stats import CorpusStats
from retrieval.index.lexical import LexicalShard
from retrieval.vectors.hnsw import VectorShard

logger = logging.getLogger(__name__)

MAX_FILTER_ROUNDS = 4
"""How many times the vector top-k is widened when filters reject most of it."""


@dataclass(slots=True, eq=True)
class Candidate:
    """One document in a shard's hybrid candidate set.

    Not frozen, though nothing changes one after it is made: a hybrid query makes about a
    thousand (two shards' unions, the merge, the fields), and a frozen dataclass's
    ``__init__`` took 2.9 µs against 0.9 µs, about 2 ms of a 17 ms in-process query.

    ``bm25``/``lexical_rank`` are None when the document is not in the lexical top-k,
    ``cosine``/``vector_rank`` when it is not in the vector top-k. Ranks start at 1.
    ``field_bm25`` holds (field, BM25 of the query on that field alone) for every
    candidate, vector-only ones included, when the caller asked for it.
    """

    doc_id: DocId
    shard_id: int
    bm25: float | None
    cosine: float | None
    lexical_rank: int | None
    vector_rank: int | None
    field_bm25: tuple[tuple[str, float], ...] = ()
    lexical_match: bool = False
    """The document matches the lexical query, in the lexical top-k or below it. A vector
    candidate without ``bm25`` may still match (deeper in the lexical list): counted once
    in a ranked list's total, not as lexical match and vector-only document both."""
    doc_vector: NDArray[np.float32] | None = field(default=None, compare=False, repr=False)
    """The document's own vector (:meth:`retrieval.vectors.hnsw.VectorShard.doc_vectors`), sent with
    the fields: learned rankers compare candidates with each other by it."""

    def field_score(self, field: str) -> float:
        return next((score for name, score in self.field_bm25 if name == field), 0.0)


def has_filters(query: Query) -> bool:
    return bool(query.site or query.lang or query.filetype or query.excluded)


def filtered_vector_hits(
    lexical: LexicalShard, vectors: VectorShard, query: Query, vector: NDArray[np.float32], k: int
) -> list[ScoredDoc]:
    """Vector top-``k`` among documents that pass the query's filters.

    Filters can reject most of the nearest neighbours (``site:`` a small host), so the
    ANN search is widened (4x per round) until ``k`` pass or the shard is exhausted.
    """
    if not has_filters(query):
        return vectors.search(vector, k)
    want = k
    hits: list[ScoredDoc] = []
    for _ in range(MAX_FILTER_ROUNDS):
        want = min(max(want * 4, k), vectors.num_docs)
        hits = vectors.search(vector, want)
        allowed = lexical.filter_doc_ids(query, [h.doc_id for h in hits])
        kept = [h for h in hits if h.doc_id in allowed]
        if len(kept) >= k or len(hits) >= vectors.num_docs:
            return kept[:k]
    logger.debug("filters left fewer than %d vector candidates after %d rounds", k, MAX_FILTER_ROUNDS)
    return kept[:k]


def shard_candidates(
    lexical: LexicalShard,
    vectors: VectorShard | None,
    query: Query,
    vector: NDArray[np.float32] | None,
    *,
    k_lexical: int,
    k_vector: int,
    shard_id: int = 0,
    with_fields: bool = False,
    with_doc_vectors: bool = False,
    stats: CorpusStats | None = None,
    totals: list[int] | None = None,
) -> list[Candidate]:
    """The union of one shard's lexical and vector top-k, ordered by doc id.

    ``vectors``/``vector`` may be None (no vector index yet, or an empty query text):
    the result is then the lexical list alone. ``with_fields`` adds
    :class:`CandidateFields` (per-field BM25 and exact cosines).
    """
    lexical_hits: list[ScoredDoc] = []
    lexical_total = 0
    if k_lexical > 0:
        result = lexical.search(query, k=k_lexical, stats=stats)
        lexical_hits = list(result.hits)
        lexical_total = result.total
        if totals is not None:
            totals.append(result.total)
    vector_hits: list[ScoredDoc] = []
    if vectors is not None and vector is not None and k_vector > 0 and not query.is_empty:
        vector_hits = filtered_vector_hits(lexical, vectors, query, vector, k_vector)
    matching: set[DocId] = set()
    if vector_hits and lexical_total > len(lexical_hits):
        # Matches below the lexical top-k exist: which vector-only candidates are among them.
        listed = {h.doc_id for h in lexical_hits}
        outside = sorted({h.doc_id for h in vector_hits} - listed)
        matching = lexical.matching(query, outside, stats=stats)
    candidates = union(lexical_hits, vector_hits, shard_id=shard_id, matching=matching)
    if not with_fields:
        return candidates
    fields = CandidateFields.compute(
        lexical,
        vectors,
        query,
        vector,
        stats,
        [c.doc_id for c in candidates],
        [c.doc_id for c in candidates if c.cosine is None],
        with_doc_vectors=with_doc_vectors,
    )
    return fields.apply(candidates)


@dataclass(frozen=True, slots=True)
class CandidateFields:
    """What a learned ranker needs beyond the two lists, computed by the candidates' shard.

    Per-field BM25 of every candidate, and the exact cosine (best passage) of those
    outside the vector top-k: such a candidate still has a similarity to the query, and
    leaving it missing would tell the model only "not in the list" (``vector_rank``
    still says that). Fusion baselines do not ask for fields, so they keep "absent = not
    retrieved". One shard computes them with its candidates; several shards in a second
    step, for the candidates the broker's cut keeps (``retrieval.query.broker``).
    """

    field_bm25: dict[DocId, tuple[tuple[str, float], ...]]
    cosine: dict[DocId, float]
    doc_vectors: dict[DocId, NDArray[np.float32]] = field(default_factory=dict)
    """Every candidate's document vector (those with vectors), for ``dense_prf`` features."""

    @classmethod
    def compute(
        cls,
        lexical: LexicalShard,
        vectors: VectorShard | None,
        query: Query,
        vector: NDArray[np.float32] | None,
        stats: CorpusStats | None,
        doc_ids: Sequence[DocId],
        needs_cosine: Sequence[DocId],
        *,
        with_doc_vectors: bool,
    ) -> CandidateFields:
        scores = lexical.field_scores(query, doc_ids, stats=stats) if doc_ids else {}
        # Column-wise: this runs for every candidate of every learned-ranker query.
        per_field = [[(name, field.get(d, 0.0)) for d in doc_ids] for name, field in scores.items()]
        rows = list(zip(*per_field, strict=True)) if per_field else [()] * len(doc_ids)
        cosine: dict[DocId, float] = {}
        doc_vectors: dict[DocId, NDArray[np.float32]] = {}
        if vectors is not None and vector is not None:
            if needs_cosine:
                cosine = vectors.similarity(vector, needs_cosine)
            if with_doc_vectors:
                doc_vectors = vectors.doc_vectors(doc_ids)
        return cls(dict(zip(doc_ids, rows, strict=True)), cosine, doc_vectors)

    @classmethod
    def merge(cls, parts: Iterable[CandidateFields]) -> CandidateFields:
        """Several shards' fields as one (a document lives in one shard)."""
        field_bm25: dict[DocId, tuple[tuple[str, float], ...]] = {}
        cosine: dict[DocId, float] = {}
        doc_vectors: dict[DocId, NDArray[np.float32]] = {}
        for part in parts:
            field_bm25.update(part.field_bm25)
            cosine.update(part.cosine)
            doc_vectors.update(part.doc_vectors)
        return cls(field_bm25, cosine, doc_vectors)

    def apply(self, candidates: Iterable[Candidate]) -> list[Candidate]:
        """The candidates with their fields and, where they had none, their exact cosine."""
        return [
            Candidate(
                c.doc_id,
                c.shard_id,
                c.bm25,
                c.cosine if c.cosine is not None else self.cosine.get(c.doc_id),
                c.lexical_rank,
                c.vector_rank,
                self.field_bm25.get(c.doc_id, ()),
                c.lexical_match,
                self.doc_vectors.get(c.doc_id),
            )
            for c in candidates
        ]


def union(
    lexical_hits: Sequence[ScoredDoc],
    vector_hits: Sequence[ScoredDoc],
    *,
    shard_id: int = 0,
    matching: Collection[DocId] = (),
) -> list[Candidate]:
    """Union two ranked lists by doc id, keeping score and 1-based rank from each.

    ``matching``: vector hits known to match the query lexically below the lexical top-k."""
    bm25 = {h.doc_id: (h.score, rank) for rank, h in enumerate(lexical_hits, 1)}
    cosine = {h.doc_id: (h.score, rank) for rank, h in enumerate(vector_hits, 1)}
    out: list[Candidate] = []
    for doc_id in sorted(bm25.keys() | cosine.keys()):
        b = bm25.get(doc_id)
        c = cosine.get(doc_id)
        out.append(
            Candidate(
                doc_id,
                shard_id,
                b[0] if b else None,
                c[0] if c else None,
                b[1] if b else None,
                c[1] if c else None,
                lexical_match=b is not None or doc_id in matching,
            )
        )
    return out


def merge_shards(
    per_shard: Iterable[Sequence[Candidate]], *, k_lexical: int | None = None, k_vector: int | None = None
) -> list[Candidate]:
    """Candidates of several shards as one set, ranks recomputed over the merged lists.

    Documents are partitioned, so no id appears twice; scores of different shards are
    comparable once shards share collection statistics. With ``k_lexical``/``k_vector``
    the set is cut to the global lexical top-k ∪ vector top-k: exactly the candidates
    one index over all documents would give, so N shards rank what one shard would
    (and what the LTR model was trained on).
    """
    merged = [c for candidates in per_shard for c in candidates]
    # Ties keep each shard's own order (Tantivy's and HNSW's), shards by id: every
    # shard list is a prefix of its deeper lists, so the merged ranking is too, and
    # page 2 never repeats page 1 when many documents score the same. Only members of
    # a list are ranked in it (a lexical candidate may carry an exact cosine without
    # having been in the vector top-k).
    by_bm25 = sorted(
        (c for c in merged if c.lexical_rank is not None and c.bm25 is not None),
        key=lambda c: (-(c.bm25 or 0.0), c.shard_id, c.lexical_rank),
    )
    by_cos = sorted(
        (c for c in merged if c.vector_rank is not None and c.cosine is not None),
        key=lambda c: (-(c.cosine or 0.0), c.shard_id, c.vector_rank),
    )
    lexical_rank = {c.doc_id: r for r, c in enumerate(by_bm25, 1)}
    vector_rank = {c.doc_id: r for r, c in enumerate(by_cos, 1)}
    out = []
    for c in merged:
        lr, vr = lexical_rank.get(c.doc_id), vector_rank.get(c.doc_id)
        if k_lexical is not None and lr is not None and lr > k_lexical:
            lr = None
        if k_vector is not None and vr is not None and vr > k_vector:
            vr = None
        if lr is None and vr is None and (k_lexical is not None or k_vector is not None):
            continue
        out.append(
            Candidate(
                c.doc_id,
                c.shard_id,
                c.bm25 if lr is not None else None,
                c.cosine if (vr is not None or lr is not None) else None,
                lr,
                vr,
                c.field_bm25,
                c.lexical_match or c.bm25 is not None,  # cut from the global top-k, still a match
                c.doc_vector,
            )
        )
    return out


def _ranked(scores: dict[DocId, float]) -> list[ScoredDoc]:
    return [ScoredDoc(d, s) for d, s in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def rrf_score(candidate: Candidate, *, k: int) -> float:
    """``sum over lists of 1 / (k + rank)``; a list the candidate is not in adds nothing."""
    score = 0.0
    if candidate.lexical_rank is not None:
        score += 1.0 / (k + candidate.lexical_rank)
    if candidate.vector_rank is not None:
        score += 1.0 / (k + candidate.vector_rank)
    return score


def rrf(candidates: Iterable[Candidate], *, k: int) -> list[ScoredDoc]:
    """Reciprocal rank fusion (:func:`rrf_score`) of the candidates; best first.

    >>> c = [Candidate(DocId(1), 0, 3.0, None, 1, None), Candidate(DocId(2), 0, 1.0, 0.9, 2, 1)]
    >>> [h.doc_id for h in rrf(c, k=60)]
    [2, 1]
    """
    return _ranked({c.doc_id: rrf_score(c, k=k) for c in candidates})


def min_max(values: dict[DocId, float]) -> dict[DocId, float]:
    if not values:
        return {}
    low, high = min(values.values()), max(values.values())
    if high <= low:
        return {d: 1.0 for d in values}
    return {d: (v - low) / (high - low) for d, v in values.items()}


def convex(candidates: Iterable[Candidate], *, weight: float) -> list[ScoredDoc]:
    """``weight * cosine' + (1 - weight) * bm25'``, min-max normalized, absent = 0; best first.

    ``weight`` = 1 is dense only, 0 is BM25 only. A single candidate of a list
    normalizes to 1.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight={weight} is outside [0, 1].")
    items = list(candidates)
    bm25 = min_max({c.doc_id: c.bm25 for c in items if c.bm25 is not None})
    cosine = min_max({c.doc_id: c.cosine for c in items if c.cosine is not None})
    return _ranked(
        {
            c.doc_id: weight * cosine.get(c.doc_id, 0.0) + (1.0 - weight) * bm25.get(c.doc_id, 0.0)
            for c in items
        }
    )
