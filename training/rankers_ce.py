"""The ``ltr+ce`` ranker of the evaluation harness: held-out LTR, then a held-out cross-encoder.

Both models are cross-validated on the same query folds (:func:`training.train_ltr.cv_splits`
over the judged queries, as :func:`training.train_ltr.cross_validate` makes them): a
query's LTR scores come from the LightGBM model of the fold that held it out, and its
top ``RankSettings.reranker_top_n`` are reordered by a cross-encoder fine-tuned on the
*other* folds' queries only. No query's judgments train either model that scores it.

The head's order is ``w·z(ce) + (1 − w)·z(ltr)``. Whether to blend, and how much, is
decided by cross-validation: for each fold, ``w`` (from a small grid; 1 is the
cross-encoder alone, 0 the LTR order) is the one with the best nDCG@10 over the
*other* folds' held-out queries, so a fold's own judgments never choose its weight.
The report gives the chosen weights and, as a sensitivity check only, the four
metrics of every grid weight (choosing among those would be choosing on the test
queries).

Cross-encoder scores are cached per dataset and parameters (``ce-scores-*.json``), so
re-running with another weight does not retrain.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from core.types import DocId, Query, ScoredDoc
from rerank.cross_encoder import rerank_head
from training.features import beir_labels, collection_frame
from training.metrics import MetricReport, evaluate_run
from training.rankers import EvalContext
from training.train_ltr import FullQrels, LtrParams, Split, cross_validate, cv_splits
from training.train_reranker import RerankerParams, shard_texts, train_fold

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


class LtrCeRanker:
    name = "ltr+ce"

    def __init__(self, context: EvalContext) -> None:
        self.context = context
        self.report_extra: dict[str, Any] = {}

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        ctx = self.context
        rank = ctx.settings.rank
        depth = int(ctx.options.get("depth", ctx.settings.search.candidate_k))
        top_n = rank.reranker_top_n
        params = dataclasses.replace(RerankerParams(), max_pairs=rank.reranker_train_pairs)
        frame = collection_frame(ctx.dataset.root, ctx.settings, queries=queries, depth=depth).frame
        labels = beir_labels(ctx.dataset, ctx.qrels)
        qrels = {q: {str(d): g for d, g in judged.items()} for q, judged in labels.items()}

        started = time.perf_counter()
        cv = cross_validate(frame, qrels, LtrParams(), folds=ctx.folds)
        self.report_extra["ltr_cv_seconds"] = round(time.perf_counter() - started, 2)
        judged = [q for q in dict.fromkeys(frame["qid"].to_list()) if qrels.get(q)]
        splits = cv_splits(judged, ctx.folds, seed=0)

        key = hashlib.blake2b(
            json.dumps(
                [dataclasses.asdict(params), top_n, ctx.folds, depth, sorted(queries)], sort_keys=True
            ).encode(),
            digest_size=8,
        ).hexdigest()
        cache = ctx.cache_dir / f"ce-scores-{key}.json"
        if cache.exists():
            stored = json.loads(cache.read_text())
            ce = {q: {DocId(int(d)): s for d, s in row.items()} for q, row in stored["scores"].items()}
            self.report_extra.update(stored["extra"])
            self.report_extra["ce_scores_cached"] = str(cache)
        else:
            ce = self._cross_validate(splits, cv.scores, labels, queries, frame, params, top_n)
            cache.write_text(
                json.dumps(
                    {
                        "scores": {q: {str(d): s for d, s in row.items()} for q, row in ce.items()},
                        "extra": self.report_extra,
                    }
                )
            )
        grid = sorted({*WEIGHT_GRID, rank.reranker_weight})
        finals = {
            w: {
                q: combine(cv.scores.get(q, {}), ce[q], top_n=top_n, weight=w)
                if q in ce
                else dict(cv.scores.get(q, {}))
                for q in queries
            }
            for w in grid
        }
        reports = {w: _report(s, qrels, judged) for w, s in finals.items()}
        fold_weights = choose_weights(splits, {w: r.per_query for w, r in reports.items()})
        chosen = {
            q: finals[fold_weights[split.fold]][q] for split in splits for q in split.test if q in queries
        }
        chosen.update({q: finals[rank.reranker_weight][q] for q in queries if q not in chosen})
        self.report_extra["weight"] = "chosen per fold on the other folds' held-out queries"
        self.report_extra["fold_weights"] = [fold_weights[split.fold] for split in splits]
        self.report_extra["top_n"] = top_n
        self.report_extra["by_weight"] = {
            str(w): {m: round(v, 4) for m, v in r.means.items()} for w, r in reports.items()
        }
        out: dict[str, list[ScoredDoc]] = {}
        for qid in queries:
            ordered = sorted(chosen.get(qid, {}).items(), key=lambda item: (-item[1], item[0]))[:k]
            out[qid] = [ScoredDoc(d, s) for d, s in ordered]
        return out

    def _cross_validate(
        self,
        splits: Sequence[Split],
        ltr_scores: Mapping[str, Mapping[DocId, float]],
        labels: Mapping[str, Mapping[DocId, int]],
        queries: Mapping[str, Query],
        frame: Any,
        params: RerankerParams,
        top_n: int,
    ) -> dict[str, dict[DocId, float]]:
        from retrieval.embed import default_model_path

        texts_of = shard_texts(self.context.lexical())
        query_texts = {q: query.raw for q, query in queries.items()}
        fold_stats: list[dict[str, Any]] = []
        score_ms: list[float] = []

        def train(qids: Sequence[str]) -> Callable[[str, Sequence[DocId]], Sequence[float]]:
            reranker, stats = train_fold(
                default_model_path(), frame, labels, qids, query_texts, texts_of, params
            )
            fold_stats.append(stats)
            logger.info("reranker fold %d: %s", len(fold_stats) - 1, stats)

            def score(qid: str, doc_ids: Sequence[DocId]) -> Sequence[float]:
                texts = texts_of(doc_ids)
                begun = time.perf_counter()
                values = reranker.score(query_texts[qid], [texts.get(d, "") for d in doc_ids])
                score_ms.append((time.perf_counter() - begun) * 1000)
                return [float(v) for v in values]

            return score

        started = time.perf_counter()
        ce = cross_validate_ce(splits, ltr_scores, train, top_n=top_n)
        self.report_extra["ce_cv_seconds"] = round(time.perf_counter() - started, 2)
        self.report_extra["ce_train_seconds"] = [s["seconds"] for s in fold_stats]
        self.report_extra["ce_train_pairs"] = [s["pairs"] for s in fold_stats]
        self.report_extra["ce_last_loss"] = [s["last_loss"] for s in fold_stats]
        self.report_extra["ce_ms_per_query"] = {
            "median": round(float(np.median(score_ms)), 1) if score_ms else None,
            "p95": round(float(np.percentile(score_ms, 95)), 1) if score_ms else None,
            "threads": params.threads,
        }
        return ce
