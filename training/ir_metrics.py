"""Retrieval metrics through pytrec_eval (trec_eval's own code), never hand-rolled.

nDCG@10, MAP cut at 1000, Recall@100 and MRR@10 (reciprocal rank of the first
relevant document within the top 10). Queries absent from a run score zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytrec_eval

Run = Mapping[str, Mapping[str, float]]
"""query id → document external id → score (higher is better)."""

METRICS: tuple[str, ...] = ("ndcg@10", "map", "recall@100", "mrr@10")


@dataclass(frozen=True, slots=True)
class MetricReport:
    means: dict[str, float]
    per_query: dict[str, dict[str, float]]


def _top(scores: Mapping[str, float], k: int) -> dict[str, float]:
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
    return dict(ranked)


def evaluate_run(run: Run, qrels: Mapping[str, Mapping[str, int]]) -> MetricReport:
    """Score a run against qrels; every judged query counts, answered or not."""
    qrels_plain = {q: dict(docs) for q, docs in qrels.items()}
    full = {q: _top(run.get(q, {}), 1000) for q in qrels_plain}
    top10 = {q: _top(scores, 10) for q, scores in full.items()}
    # pytrec_eval drops queries with an empty run: give them a sentinel that is never relevant.
    for table in (full, top10):
        for scores in table.values():
            if not scores:
                scores["__no_result__"] = 0.0
    main = pytrec_eval.RelevanceEvaluator(qrels_plain, {"ndcg_cut.10", "map_cut.1000", "recall.100"})
    rr = pytrec_eval.RelevanceEvaluator(qrels_plain, {"recip_rank"})
    main_scores = main.evaluate(full)
    rr_scores = rr.evaluate(top10)
    per_query: dict[str, dict[str, float]] = {}
    for q in qrels_plain:
        per_query[q] = {
            "ndcg@10": main_scores[q]["ndcg_cut_10"],
            "map": main_scores[q]["map_cut_1000"],
            "recall@100": main_scores[q]["recall_100"],
            "mrr@10": rr_scores[q]["recip_rank"],
        }
    n = max(1, len(per_query))
    means = {m: sum(s[m] for s in per_query.values()) / n for m in METRICS}
    return MetricReport(means=means, per_query=per_query)
