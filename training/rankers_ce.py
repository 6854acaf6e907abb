"""Cross-validation helpers for the cross-encoder over held-out LTR (the served ``ltr+ce`` stage).

Both models are cross-validated on the same query folds (:func:`training.train_ltr.cv_splits`):
a query's LTR scores come from the LightGBM model of the fold that held it out, and its top
``RankSettings.reranker_top_n`` are reordered by a cross-encoder fine-tuned on the *other*
folds' queries only. No query's judgments train either model that scores it.

The head's order is ``w·z(ce) + (1 − w)·z(ltr)``; for each fold, ``w`` (from a small grid; 1
is the cross-encoder alone, 0 the LTR order) is the one with the best nDCG@10 over the
*other* folds' held-out queries, so a fold's own judgments never choose its weight. The
report gives the chosen weights and, as a sensitivity check only, every grid weight's
metrics (choosing among those would be choosing on the test queries).

Cross-encoder scores are cached per dataset and parameters (``ce-scores-*.json``), so
re-running with another weight does not retrain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from core.types import DocId
from rerank.cross_encoder import rerank_head
from training.ir_metrics import MetricReport, evaluate_run
from training.train_ltr import FullQrels, Split

logger = logging.getLogger(__name__)

WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)

TrainFn = Callable[[Sequence[str]], Callable[[str, Sequence[DocId]], Sequence[float]]]
"""Training query ids → a scorer of (qid, doc ids)."""


def head_of(scores: Mapping[DocId, float], top_n: int) -> list[DocId]:
    return [d for d, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_n]]


def cross_validate_ce(
    splits: Sequence[Split],
    ltr_scores: Mapping[str, Mapping[DocId, float]],
    train: TrainFn,
    *,
    top_n: int,
) -> dict[str, dict[DocId, float]]:
    """Cross-encoder scores of each test query's LTR head, from a model trained on its split's train part."""
    out: dict[str, dict[DocId, float]] = {}
    for split in splits:
        score = train(split.train)
        for qid in split.test:
            head = head_of(ltr_scores.get(qid, {}), top_n)
            out[qid] = {d: float(s) for d, s in zip(head, score(qid, head), strict=True)}
    return out


def combine(
    ltr_scores: Mapping[DocId, float], ce_scores: Mapping[DocId, float], *, top_n: int, weight: float
) -> dict[DocId, float]:
    """Final scores of one query: the head reordered above the LTR-ordered tail."""
    ordered = head_of(ltr_scores, len(ltr_scores))
    head, tail = ordered[:top_n], ordered[top_n:]
    if len(head) < 2:
        return {d: float(len(ordered) - pos) for pos, d in enumerate(ordered)}
    if not all(d in ce_scores for d in head):
        raise ValueError("cross-encoder scores are missing for part of the head")
    new = rerank_head(
        np.array([ltr_scores[d] for d in head]), np.array([ce_scores[d] for d in head]), weight=weight
    )
    total = len(ordered)
    final = {head[i]: float(total - pos) for pos, i in enumerate(new)}
    final.update({d: float(total - len(head) - pos) for pos, d in enumerate(tail)})
    return final


def _report(
    scores: Mapping[str, Mapping[DocId, float]], qrels: FullQrels, qids: Sequence[str]
) -> MetricReport:
    run = {q: {str(d): v for d, v in scores.get(q, {}).items()} for q in qids}
    return evaluate_run(run, {q: qrels.get(q, {}) for q in qids})


def choose_weights(
    splits: Sequence[Split], per_query: Mapping[float, Mapping[str, Mapping[str, float]]]
) -> dict[int, float]:
    """Each fold's blend weight: the best mean nDCG@10 over the *other* folds' queries.

    A fold's own judgments never choose its weight; ties go to the smaller weight
    (closer to the LTR order).
    """
    out: dict[int, float] = {}
    for split in splits:
        held = set(split.test)
        best: tuple[float, float] | None = None
        for w in sorted(per_query):
            values = [m["ndcg@10"] for q, m in per_query[w].items() if q not in held]
            mean = float(np.mean(values)) if values else 0.0
            if best is None or mean > best[0] + 1e-12:
                best = (mean, w)
        out[split.fold] = best[1] if best is not None else 0.0
    return out
