"""The evaluation harness: ``trawl eval --dataset DIR --ranker NAME [--json]``.

Builds (or reuses a cached) index of a BEIR collection, runs every judged query
through a named ranker, and scores the run with pytrec_eval. Queries the analyzer
refuses (nothing searchable left) still count, with an empty result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import QueryError
from core.settings import Settings
from core.types import Query
from retrieval.analyzer import parse_query
from retrieval.build import build_index
from retrieval.manifest import IndexManifest
from training.datasets import BeirDataset
from training.metrics import evaluate_run
from training.rankers import EvalContext, make_ranker

logger = logging.getLogger(__name__)

RUN_DEPTH = 1000


@dataclass(frozen=True, slots=True)
class EvalResult:
    dataset: str
    ranker: str
    queries: int
    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    seconds: float
    extra: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dataset": self.dataset, "ranker": self.ranker, "queries": self.queries}
        out.update({m: round(v, 6) for m, v in self.means.items()})
        out.update(self.extra)
        out["per_query"] = {q: {"ndcg@10": round(s["ndcg@10"], 6)} for q, s in self.per_query.items()}
        return out


def cached_index(dataset: BeirDataset, settings: Settings) -> tuple[Path, Path]:
    """Index and scratch directory for a dataset, rebuilt only when the corpus changed."""
    cache_dir = settings.data_dir / "cache" / "eval" / f"{dataset.name}-{dataset.fingerprint()}"
    index_dir = cache_dir / "index"
    try:
        IndexManifest.load(index_dir)
    except Exception:  # noqa: BLE001 - any unreadable cache is rebuilt
        logger.info("building the evaluation index of %s in %s", dataset.name, index_dir)
        cache_dir.mkdir(parents=True, exist_ok=True)
        build_index(dataset.iter_documents(), index_dir, source=f"beir:{dataset.root}")
    return index_dir, cache_dir


def parse_queries(texts: Mapping[str, str]) -> dict[str, Query]:
    parsed: dict[str, Query] = {}
    for qid, text in texts.items():
        try:
            parsed[qid] = parse_query(text)
        except QueryError:
            parsed[qid] = Query(raw=text)
    return parsed


def evaluate(
    dataset_dir: Path,
    ranker_name: str,
    *,
    settings: Settings | None = None,
    options: dict[str, str] | None = None,
    folds: int = 5,
) -> EvalResult:
    settings = settings or Settings()
    dataset = BeirDataset.open(dataset_dir)
    index_dir, cache_dir = cached_index(dataset, settings)
    qrels = dataset.qrels()
    context = EvalContext(
        dataset=dataset,
        index_dir=index_dir,
        cache_dir=cache_dir,
        qrels=qrels,
        settings=settings,
        folds=folds,
        options=dict(options or {}),
    )
    ranker = make_ranker(ranker_name, context)
    queries = parse_queries(dataset.judged_queries())
    started = time.perf_counter()
    ranked = ranker.run(queries, RUN_DEPTH)
    seconds = time.perf_counter() - started
    external = {dataset.doc_id(d): d for q in qrels.values() for d in q}
    # Map internal doc ids back to the collection's ids (judged ones via the table above,
    # the rest through the index's stored external ids).
    shard = context.lexical()
    missing = {h.doc_id for hits in ranked.values() for h in hits if h.doc_id not in external}
    for doc_id, stored in shard.stored_many(sorted(missing)).items():
        external[doc_id] = stored.external_id
    run = {
        qid: {external[h.doc_id]: h.score for h in hits if h.doc_id in external}
        for qid, hits in ranked.items()
    }
    report = evaluate_run(run, {q: qrels[q] for q in queries})
    extra = dict(getattr(ranker, "report_extra", {}) or {})
    return EvalResult(
        dataset=dataset.name,
        ranker=ranker_name,
        queries=len(queries),
        means=report.means,
        per_query=report.per_query,
        seconds=seconds,
        extra=extra,
    )
