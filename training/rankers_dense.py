"""Dense and hybrid rankers for the evaluation harness: ``dense``, ``hybrid-rrf``, ``hybrid``.

Vectors of an evaluation corpus are backfilled into its cached index (inside the
context's ``cache_dir``) by the same job as ``trawl embed``, so the first run embeds
and later runs only load.

``hybrid`` (convex fusion) learns one number, the dense weight. It is chosen by
cross-validation on query folds: each query's reported ranking uses the weight that
was best (nDCG@10) on the *other* folds, never on the queries it is reported on.

Every ranker here reports ``ann_recall@10``: the overlap of the HNSW top-10 with exact
(brute-force) top-10 documents, averaged over queries.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from core.types import Query, ScoredDoc
from retrieval.backfill import backfill_index, open_vector_shard
from retrieval.embed import Embedder
from retrieval.hybrid import Candidate, convex, rrf, shard_candidates
from retrieval.lexical import LexicalShard
from retrieval.vector import VectorShard
from training.metrics import evaluate_run
from training.rankers import EvalContext

logger = logging.getLogger(__name__)

WEIGHT_GRID: tuple[float, ...] = tuple(round(w, 2) for w in np.linspace(0.0, 1.0, 21))
RECALL_K = 10


def query_text(query: Query) -> str:
    """What the embedder sees: the positive words (operators stripped), else the raw text."""
    return query.positive_text or query.raw


def fold_of(qids: list[str], folds: int, *, seed: int = 0) -> dict[str, int]:
    """Deterministic, shuffled assignment of queries to ``folds`` folds."""
    order = sorted(qids)
    random.Random(seed).shuffle(order)
    return {qid: i % folds for i, qid in enumerate(order)}


def ann_recall(vectors: VectorShard, query_vectors: NDArray[np.float32], k: int = RECALL_K) -> float:
    """Mean |HNSW top-k ∩ exact top-k| / k over the queries."""
    if len(query_vectors) == 0:
        return 0.0
    total = 0.0
    for vector in query_vectors:
        approx = {h.doc_id for h in vectors.search(vector, k)}
        exact = {h.doc_id for h in vectors.search_exact(vector, k)}
        total += len(approx & exact) / max(1, len(exact))
    return total / len(query_vectors)


class _DenseBase:
    """Loads the embedder and the (backfilled) vector shard of the evaluation index."""

    name = "dense"

    def __init__(self, context: EvalContext) -> None:
        self.context = context
        self.embedder = Embedder.from_settings(context.settings.embed)
        report = backfill_index(context.index_dir, self.embedder, context.settings.embed)
        logger.info(
            "vectors of %s: %d docs, %d embedded now", context.dataset.name, report.docs, report.embedded
        )
        self.vectors = open_vector_shard(
            context.index_dir, 0, model_id=self.embedder.model_id, ef=context.settings.embed.hnsw_ef
        )
        self.lexical: LexicalShard = context.lexical()
        self.report_extra: dict[str, Any] = {
            "model_id": self.embedder.model_id,
            "precision": self.embedder.precision,
        }

    def _encode(self, queries: Mapping[str, Query]) -> dict[str, NDArray[np.float32]]:
        qids = list(queries)
        matrix = self.embedder.encode_queries([query_text(queries[q]) for q in qids])
        self.report_extra["ann_recall@10"] = round(ann_recall(self.vectors, matrix), 6)
        return {qid: matrix[i] for i, qid in enumerate(qids) if query_text(queries[qid]).strip()}


class DenseRanker(_DenseBase):
    """HNSW top-k by cosine (best passage per document)."""

    name = "dense"

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        vectors = self._encode(queries)
        return {qid: self.vectors.search(vectors[qid], k) if qid in vectors else [] for qid in queries}


class _HybridBase(_DenseBase):
    def _candidates(self, queries: Mapping[str, Query]) -> dict[str, list[Candidate]]:
        depth = int(self.context.options.get("depth", self.context.settings.embed.vector_k))
        vectors = self._encode(queries)
        return {
            qid: shard_candidates(
                self.lexical, self.vectors, query, vectors.get(qid), k_lexical=depth, k_vector=depth
            )
            for qid, query in queries.items()
        }


class HybridRrfRanker(_HybridBase):
    """RRF (k = ``search.rrf_k``, as served) of lexical top-100 and vector top-100."""

    name = "hybrid-rrf"

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        rrf_k = self.context.settings.search.rrf_k
        return {qid: rrf(c, k=rrf_k)[:k] for qid, c in self._candidates(queries).items()}


class HybridConvexRanker(_HybridBase):
    """Convex fusion with the dense weight cross-validated on query folds."""

    name = "hybrid"

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        candidates = self._candidates(queries)
        dataset = self.context.dataset
        qrels = {
            qid: {str(dataset.doc_id(doc)): grade for doc, grade in judged.items()}
            for qid, judged in self.context.qrels.items()
            if qid in queries
        }
        # Per-query nDCG@10 of every weight on the grid (only judged queries can teach).
        ndcg: dict[float, dict[str, float]] = {}
        for w in WEIGHT_GRID:
            run = {
                qid: {str(h.doc_id): h.score for h in convex(candidates[qid], weight=w)[:k]} for qid in qrels
            }
            ndcg[w] = {q: s["ndcg@10"] for q, s in evaluate_run(run, qrels).per_query.items()}
        folds = max(2, self.context.folds)
        fold = fold_of(list(queries), folds)
        weights: list[float] = []
        for f in range(folds):
            train = [q for q in qrels if fold[q] != f]
            weights.append(max(WEIGHT_GRID, key=lambda w: (_mean(ndcg[w], train), -abs(w - 0.5))))
        self.report_extra["fold_weights"] = weights
        return {qid: convex(candidates[qid], weight=weights[fold[qid]])[:k] for qid in queries}


def _mean(per_query: Mapping[str, float], qids: list[str]) -> float:
    return sum(per_query[q] for q in qids) / max(1, len(qids))
