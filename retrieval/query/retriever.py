"""A generation's ranked list for one query: candidates through the broker, ordered by a stage.

The list is deterministic, so pages never overlap or skip (DECISIONS 6):

* ``bm25``: the lexical ranking itself, to any depth;
* fused rankers: first the stage's ordering of the union of the lexical and vector
  top ``candidate_k`` (tier 0), then lexical-only tiers of growing depth, each
  ordered by the same stage over the documents not yet listed.

An RM3 stage first gathers feedback documents and ranks the expanded query instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from core.types import DocId, Query, ScoredDoc
from retrieval.index.generation import Generation
from retrieval.index.lexical import StoredDoc
from retrieval.query.broker import Gathered
from retrieval.query.hybrid import Candidate
from retrieval.query.ranking import RankContext, RankStage
from retrieval.query.request import RequestBudget
from retrieval.query.rm3 import Rm3

MAX_TIERS = 8


@dataclass
class RankedList:
    """The first ``len(ranked)`` entries of a generation's ranked list for one query."""

    ranked: list[ScoredDoc]
    candidates: dict[DocId, Candidate]
    explain: dict[DocId, dict[str, Any]]
    total: int
    exhausted: bool
    gathered: list[Gathered] = field(default_factory=list)
    stored: dict[DocId, StoredDoc] = field(default_factory=dict)
    """Documents a stage already fetched (LTR reads their text): the page reuses them."""
    approximate: bool = False
    """The query was expanded from feedback documents that a late shard, or incomplete
    statistics, may have changed: the answer is served but not cached."""


def fetch_stored(
    generation: Generation,
    candidates: Sequence[Candidate],
    cache: dict[DocId, StoredDoc],
    budget: RequestBudget,
) -> dict[DocId, StoredDoc]:
    """Stored documents of ``candidates`` from their shards, each fetched once per request."""
    by_shard: dict[int, list[DocId]] = {}
    for c in candidates:
        if c.doc_id not in cache:
            by_shard.setdefault(c.shard_id, []).append(c.doc_id)
    if by_shard:
        cache.update(generation.broker.fetch(by_shard, budget.until()))
    return {c.doc_id: cache[c.doc_id] for c in candidates if c.doc_id in cache}


class Retriever:
    """Builds the first entries of ranked lists (see the module doc); thread-safe."""

    def __init__(self, *, candidate_k: int, deadline_s: float) -> None:
        self.candidate_k = candidate_k
        self.deadline_s = deadline_s

    def ranked(
        self,
        generation: Generation,
        query: Query,
        stage: RankStage,
        depth: int,
        *,
        vector: NDArray[np.float32] | None,
        explain: bool = False,
        budget: RequestBudget | None = None,
    ) -> RankedList:
        """The first ``depth`` entries of the generation's ranked list."""
        budget = budget or RequestBudget.starting_now(self.deadline_s)
        expansion = getattr(stage, "expansion", None)
        if not isinstance(expansion, Rm3):
            return self._ranked(
                generation, query, stage, depth, vector=vector, explain=explain, budget=budget
            )
        expanded, complete = self.expanded(generation, query, expansion, budget)
        result = self._ranked(
            generation, expanded, stage, depth, vector=vector, explain=explain, budget=budget
        )
        result.approximate = result.approximate or not complete
        return result

    def expanded(
        self, generation: Generation, query: Query, expansion: Rm3, budget: RequestBudget
    ) -> tuple[Query, bool]:
        """``query`` expanded from its best BM25 documents, and whether every shard took
        part in finding and fetching them (else the expansion may differ next time)."""
        broker = generation.broker
        feedback = broker.gather(
            query, vector=None, k_lexical=expansion.feedback_docs, k_vector=0, deadline_s=budget.seconds()
        )
        top = sorted(
            (c for c in feedback.candidates if c.bm25 is not None),
            key=lambda c: (-(c.bm25 or 0.0), c.shard_id, c.lexical_rank or 0),
        )[: expansion.feedback_docs]
        by_shard: dict[int, list[DocId]] = {}
        for candidate in top:
            by_shard.setdefault(candidate.shard_id, []).append(candidate.doc_id)
        stored = broker.fetch(by_shard, budget.until()) if top else {}
        docs = [(c.bm25 or 0.0, stored[c.doc_id]) for c in top if c.doc_id in stored]
        complete = not (feedback.partial or feedback.approximate_scores) and len(docs) == len(top)
        return expansion.expand(query, docs), complete

    def _ranked(
        self,
        generation: Generation,
        query: Query,
        stage: RankStage,
        depth: int,
        *,
        vector: NDArray[np.float32] | None,
        explain: bool = False,
        budget: RequestBudget,
    ) -> RankedList:
        broker = generation.broker
        if not stage.needs_vector:
            gathered = broker.gather(
                query,
                vector=None,
                k_lexical=depth,
                k_vector=0,
                with_fields=stage.with_fields,
                with_doc_vectors=stage.with_doc_vectors,
                deadline_s=budget.seconds(),
            )
            stored: dict[DocId, StoredDoc] = {}
            out = stage.rank(
                query,
                gathered.candidates,
                explain=explain,
                context=self._context(generation, stored, gathered, budget),
            )
            return RankedList(
                out.ranked[:depth],
                {c.doc_id: c for c in gathered.candidates},
                out.explain,
                gathered.lexical_total,
                exhausted=len(out.ranked) < depth,
                gathered=[gathered],
                stored=stored,
            )
        window = self.candidate_k
        ranked: list[ScoredDoc] = []
        candidates: dict[DocId, Candidate] = {}
        explanations: dict[DocId, dict[str, Any]] = {}
        all_gathered: list[Gathered] = []
        fetched: dict[DocId, StoredDoc] = {}
        k_vector = window if vector is not None else 0
        exhausted = False
        cut_short = False
        lexical_total = 0
        for tier in range(MAX_TIERS):
            if tier and budget.spent():
                cut_short = True  # the page gets what the rounds so far ranked
                break
            gathered = broker.gather(
                query,
                vector=vector,
                k_lexical=window,
                k_vector=k_vector,
                with_fields=stage.with_fields,
                with_doc_vectors=stage.with_doc_vectors,
                deadline_s=budget.seconds(),
            )
            all_gathered.append(gathered)
            lexical_total = gathered.lexical_total
            fresh = [c for c in gathered.candidates if c.doc_id not in candidates]
            out = stage.rank(
                query, fresh, explain=explain, context=self._context(generation, fetched, gathered, budget)
            )
            ranked.extend(out.ranked)
            explanations.update(out.explain)
            candidates.update({c.doc_id: c for c in fresh})
            lexical_seen = sum(1 for c in gathered.candidates if c.bm25 is not None)
            if lexical_seen >= lexical_total or getattr(stage, "vector_only", False):
                exhausted = True
                break
            if len(ranked) >= depth:
                break
            window *= 4
            k_vector = 0  # vector candidates only in tier 0: the list stays finite
        # The list is every lexical match plus the tier-0 vector candidates that match
        # nothing lexically (one below the lexical window is a match: counted once).
        # A vector-only stage's list is exactly what it ranked.
        vector_only = sum(1 for c in candidates.values() if c.bm25 is None and not c.lexical_match)
        total = len(ranked) if getattr(stage, "vector_only", False) else lexical_total + vector_only
        return RankedList(
            ranked[:depth],
            candidates,
            explanations,
            total,
            exhausted and len(ranked) <= depth,  # entries cut off at depth are still to come
            all_gathered,
            fetched,
            approximate=cut_short,
        )

    @staticmethod
    def _context(
        generation: Generation, cache: dict[DocId, StoredDoc], gathered: Gathered, budget: RequestBudget
    ) -> RankContext:
        return RankContext(
            fetch=lambda cs: fetch_stored(generation, cs, cache, budget),
            generation=generation.id,
            features=gathered.features,
        )
