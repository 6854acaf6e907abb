"""The ``ltr`` ranker of the evaluation harness.

Without ``--model``: k-fold cross-validation by query (``EvalContext.folds``); each
query's ranking comes from the model of the fold that held it out, so no query is
scored by a model that saw its judgments (nor chose its rounds on them). With
``--model DIR``: a trained model scores every query unchanged (zero-shot transfer to a
collection it never saw).

Candidates are the hybrid union (lexical and vector top-``depth``, default the
serving ``candidate_k`` = 100, as the ``hybrid`` rankers use), so ``ltr`` reorders
exactly the documents the fusion baselines reorder.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.types import DocId, Query, ScoredDoc
from rerank.ltr import LtrModel
from training.features import beir_labels, collection_frame
from training.rankers import EvalContext
from training.train_ltr import LtrParams, cross_validate, score_frame

logger = logging.getLogger(__name__)


def _ranked(scores: Mapping[DocId, float], k: int) -> list[ScoredDoc]:
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
    return [ScoredDoc(d, s) for d, s in ordered]


class LtrRanker:
    """LightGBM lambdarank over hybrid candidates (held-out folds, or a given model)."""

    name = "ltr"

    def __init__(self, context: EvalContext) -> None:
        self.context = context
        self.report_extra: dict[str, Any] = {}

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        ctx = self.context
        depth = int(ctx.options.get("depth", ctx.settings.search.candidate_k))
        started = time.perf_counter()
        frame = collection_frame(ctx.dataset.root, ctx.settings, queries=queries, depth=depth).frame
        self.report_extra["feature_seconds"] = round(time.perf_counter() - started, 2)
        self.report_extra["candidates_per_query"] = round(frame.height / max(1, len(queries)), 1)
        model_dir = ctx.options.get("model")
        if model_dir:
            model = LtrModel.load(Path(model_dir))
            scores = score_frame(frame, model.score)
            self.report_extra["model"] = model.model_id
        else:
            labels = beir_labels(ctx.dataset, ctx.qrels)
            qrels = {q: {str(d): g for d, g in judged.items()} for q, judged in labels.items()}
            cv = cross_validate(frame, qrels, LtrParams(), folds=ctx.folds)
            scores = cv.scores
            self.report_extra["cv_seconds"] = round(cv.seconds, 2)
            self.report_extra["fold_rounds"] = [f.rounds for f in cv.folds]
            self.report_extra["fold_ndcg@10"] = [round(f.metrics["ndcg@10"], 4) for f in cv.folds]
        return {qid: _ranked(scores.get(qid, {}), k) for qid in queries}
