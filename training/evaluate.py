"""The evaluation harness: ``trawl eval --dataset DIR --ranker NAME [--shards N] [--json]``.

It evaluates the served search path, not a copy: the collection is indexed like any crawl
(cached by content, :mod:`training.eval_index`), vectors are backfilled by the ``trawl
embed`` job, the index is opened with :func:`rerank.pipeline.open_search_service` (what the
API opens) and every judged query goes through ``SearchService.search`` as typed, page after
page until ``depth`` results, so the figures are those of what a user sees.

``ltr`` without ``--model`` is cross-validated: each fold is served by a model trained on the
other folds (plus, with ``train_with``, other collections' queries), from ``folds.tsv`` when
the collection has one, else a seeded split by query (:mod:`training.ltr_folds`).
``sample=N`` scores a deterministic held-out sample stratified by ``metadata.kind``
(:func:`stratified_sample`), the same queries whatever the ranker, so two rankers pair.
Figures per kind are in ``extra["by_kind"]``. Rankers registered in :mod:`training.rankers`
that are not served (experiment baselines, test doubles) run through their own runner.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ConfigError, QueryError
from core.settings import Settings
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from training.crawl_sets import require_collections
from training.datasets import BeirDataset
from training.eval_index import cached_index, parse_queries
from training.ir_metrics import evaluate_run
from training.rankers import SERVED_RANKERS, VECTOR_RANKERS, EvalContext, make_ranker, ranker_names

logger = logging.getLogger(__name__)

RUN_DEPTH = 100
"""Results scored per query: nDCG@10, MRR@10 and Recall@100 need no more."""

ServiceOpener = Callable[[Settings, Path], SearchService]
RankedIds = list[str]
"""External ids in served order."""


@dataclass(frozen=True, slots=True)
class EvalResult:
    dataset: str
    ranker: str
    queries: int
    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    seconds: float
    extra: dict[str, Any]
    run: dict[str, RankedIds] = field(default_factory=dict)
    """Query id → the external ids scored, in served order."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dataset": self.dataset, "ranker": self.ranker, "queries": self.queries}
        out.update({m: round(v, 6) for m, v in self.means.items()})
        out.update(self.extra)
        out["per_query"] = {
            q: {m: round(s[m], 6) for m in ("ndcg@10", "mrr@10")} for q, s in self.per_query.items()
        }
        return out


def ensure_vectors(index_dir: Path, settings: Settings) -> str:
    """Backfill the index's vectors with the ``trawl embed`` job (a no-op once done); the model id."""
    embedder = Embedder.from_settings(settings.embed)
    report = backfill_index(index_dir, embedder, settings.embed)
    logger.info("vectors of %s: %d docs, %d embedded now", index_dir, report.docs, report.embedded)
    return report.model_id


def query_kinds(dataset: BeirDataset, field: str = "kind") -> dict[str, str]:
    """Query id → ``metadata.kind`` (crawl-derived sets; or another ``field``); empty when no query
    has one. ``metadata.lang`` is the reader's language a query is searched with (its
    ``Accept-Language``): the Debian Reference bench's queries are read in their edition's."""
    kinds: dict[str, str] = {}
    with (dataset.root / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                record = json.loads(line)
                kind = (record.get("metadata") or {}).get(field)
                if kind:
                    kinds[str(record["_id"])] = str(kind)
    return kinds


def stratified_sample(qids: Sequence[str], kinds: Mapping[str, str], n: int, seed: int = 0) -> list[str]:
    """``n`` of ``qids``, each kind's share kept (largest remainder), by seeded hash; in input order."""
    if n >= len(qids):
        return list(qids)
    strata: dict[str, list[str]] = {}
    for q in qids:
        strata.setdefault(kinds.get(q, ""), []).append(q)
    exact = {k: n * len(v) / len(qids) for k, v in strata.items()}
    quota = {k: int(x) for k, x in exact.items()}
    by_remainder = sorted(strata, key=lambda k: (quota[k] - exact[k], k))
    for k in by_remainder[: n - sum(quota.values())]:
        quota[k] += 1

    def key(q: str) -> str:
        return hashlib.sha256(f"{seed}:{q}".encode()).hexdigest()

    chosen = {q for k, v in strata.items() for q in sorted(v, key=key)[: quota[k]]}
    return [q for q in qids if q in chosen]


def by_kind(per_query: Mapping[str, Mapping[str, float]], kinds: Mapping[str, str]) -> dict[str, Any]:
    """Mean nDCG@10 and MRR@10 of the scored queries of each kind."""
    groups: dict[str, list[str]] = {}
    for q in per_query:
        if q in kinds:
            groups.setdefault(kinds[q], []).append(q)
    return {
        k: {
            "queries": len(qs),
            **{m: round(sum(per_query[q][m] for q in qs) / len(qs), 6) for m in ("ndcg@10", "mrr@10")},
        }
        for k, qs in sorted(groups.items())
    }


def served_ranking(
    service: SearchService, text: str, ranker: str, depth: int = RUN_DEPTH, reader_lang: str | None = None
) -> RankedIds:
    """The first ``depth`` results ``/v1/search`` serves for ``text`` (pages followed by cursor),
    to a reader of ``reader_lang`` (None: no ``Accept-Language``).

    Snippets are not made: only ids and order are scored, and making a hundred
    snippets over long pages cost more than ranking them (py-spy: over half the time).
    """
    size = min(depth, service.settings.max_page_size)
    ids: RankedIds = []
    try:
        response = service.search(
            SearchRequest(
                text, ranker=ranker, size=size, spell=False, snippets=False, reader_lang=reader_lang
            )
        )
        while True:
            ids.extend(h.external_id or h.url for h in response.hits)
            if len(ids) >= depth or not response.next_cursor:
                break
            following = SearchRequest(
                cursor=response.next_cursor, spell=False, snippets=False, reader_lang=reader_lang
            )
            response = service.search(following)
    except QueryError:
        return []  # nothing searchable left: the query counts, with an empty result
    return ids[:depth]


def served_run(
    service: SearchService,
    queries: Mapping[str, str],
    ranker: str,
    depth: int = RUN_DEPTH,
    readers: Mapping[str, str] | None = None,
) -> dict[str, RankedIds]:
    """Each query's :func:`served_ranking`, read in its language in ``readers`` (query id → code)."""
    readers = readers or {}
    return {
        qid: served_ranking(service, text, ranker, depth, readers.get(qid)) for qid, text in queries.items()
    }


@contextmanager
def opened(open_service: ServiceOpener, settings: Settings, index_dir: Path) -> Iterator[SearchService]:
    service = open_service(settings, index_dir)
    try:
        yield service
    finally:
        for stage in service.stages.values():
            close = getattr(stage, "close", None)
            if close is not None:
                close()
        service.close()


def default_opener() -> ServiceOpener:
    # lazy: loads LightGBM (the ltr stage); registered rankers and test doubles run without it
    from rerank.pipeline import open_search_service

    return open_search_service


def eval_settings(settings: Settings, *, ltr_model: Path | None = None) -> Settings:
    """The served settings, with the response cache off (every query is ranked afresh)."""
    search = settings.search.model_copy(update={"cache_entries": 0})
    rank = settings.rank.model_copy(update={"ltr_model": ltr_model}) if ltr_model else settings.rank
    return settings.model_copy(update={"search": search, "rank": rank})


def as_run(ranked: Mapping[str, RankedIds]) -> dict[str, dict[str, float]]:
    """Rank-based scores, so pytrec_eval scores exactly the served order."""
    return {
        q: {d: float(len(ids) - i) for i, d in enumerate(dict.fromkeys(ids))} for q, ids in ranked.items()
    }


def evaluate(
    dataset_dir: Path,
    ranker_name: str,
    *,
    settings: Settings | None = None,
    options: dict[str, str] | None = None,
    folds: int = 5,
    shards: int = 1,
    depth: int = RUN_DEPTH,
    train_with: Sequence[Path] = (),
    open_service: ServiceOpener | None = None,
    sample: int | None = None,
    sample_seed: int = 0,
    transfer: bool = False,
) -> EvalResult:
    """Every judged query of a collection through ``ranker_name`` as served; pytrec_eval's metrics.

    Cross-validated ``ltr`` also trains on ``train_with`` and on the comma-separated
    collections of ``options["train_with"]`` (how a rankers.toml config names its mix).
    ``transfer`` (or ``options["transfer"]``) trains on those collections only:
    leave-one-collection-out, one model for every query.
    """
    settings = settings or Settings()
    options = dict(options or {})
    if ranker_name not in ranker_names():
        raise ConfigError(f"Unknown ranker {ranker_name!r}; expected one of: {', '.join(ranker_names())}.")
    if ranker_name == "ltr+ce" and not options.get("model"):
        raise ConfigError(
            "Held-out ltr+ce is not measured by `trawl eval`: it would need a cross-encoder "
            "fine-tuned per fold. Pass --model DIR with TRAWL_RANK__RERANKER_MODEL set to a "
            "`trawl train reranker` output (in-sample for the collections they were trained on)."
        )
    transfer = transfer or options.get("transfer", "").lower() in ("1", "true", "on", "yes")
    if transfer and (not ranker_name.startswith("ltr") or options.get("model")):
        raise ConfigError("--transfer trains LTR fold models: it needs --ranker ltr and no --model.")
    mix = [*train_with, *(Path(p) for p in options.get("train_with", "").split(",") if p)]
    if ranker_name.startswith("ltr") and not options.get("model"):  # refused now, not after indexing
        require_collections(mix, wanted_by=f"LTR held out on {Path(dataset_dir).name}, trained with them,")
    dataset = BeirDataset.open(dataset_dir)
    index_dir, cache_dir = cached_index(dataset, settings, shards=shards)
    qrels = dataset.qrels()
    texts = dataset.judged_queries()
    kinds = query_kinds(dataset)
    readers = query_kinds(dataset, "lang")
    extra: dict[str, Any] = {"depth": depth, "shards": shards, "path": "served"}
    if sample is not None and sample < len(texts):
        kept = stratified_sample(list(texts), kinds, sample, sample_seed)
        extra["sample"] = {"queries": len(kept), "of": len(texts), "seed": sample_seed, "strata": "kind"}
        texts = {q: texts[q] for q in kept}
    started = time.perf_counter()
    if ranker_name not in SERVED_RANKERS:
        ranked = _registered_run(
            dataset, texts, ranker_name, index_dir, cache_dir, settings, options, folds, depth
        )
        extra["path"] = "registered"
    else:
        opener = open_service or default_opener()
        if ranker_name in VECTOR_RANKERS:
            extra["model_id"] = ensure_vectors(index_dir, settings)
        if ranker_name.startswith("ltr") and not options.get("model"):
            # lazy: loads LightGBM, needed only to train fold models
            from training.ltr_folds import fold_models

            cv = fold_models(dataset, settings, folds=folds, train_with=mix, transfer=transfer)
            extra.update(cv.report())
            ranked = {}
            for fold, model_dir in cv.models.items():
                fold_queries = {q: texts[q] for q in cv.test_queries(fold) if q in texts}
                with opened(opener, eval_settings(settings, ltr_model=model_dir), index_dir) as service:
                    ranked.update(served_run(service, fold_queries, ranker_name, depth, readers))
        else:
            model = Path(options["model"]) if options.get("model") else None
            with opened(opener, eval_settings(settings, ltr_model=model), index_dir) as service:
                if ranker_name not in service.ranker_names():
                    raise ConfigError(
                        f"Ranker {ranker_name!r} cannot be served on this index "
                        f"(available: {', '.join(service.ranker_names())})."
                    )
                ranked = served_run(service, texts, ranker_name, depth, readers)
                stage = service.stages[ranker_name]
                model_id = getattr(getattr(stage, "model", None), "model_id", None)
                if model_id:
                    extra["ltr_model"] = model_id
    seconds = time.perf_counter() - started
    report = evaluate_run(as_run(ranked), {q: qrels[q] for q in texts})
    if kinds:
        extra["by_kind"] = by_kind(report.per_query, kinds)
    return EvalResult(
        dataset=dataset.name,
        ranker=ranker_name,
        queries=len(texts),
        means=report.means,
        per_query=report.per_query,
        seconds=seconds,
        extra=extra,
        run=ranked,
    )


def _registered_run(
    dataset: BeirDataset,
    texts: Mapping[str, str],
    name: str,
    index_dir: Path,
    cache_dir: Path,
    settings: Settings,
    options: dict[str, str],
    folds: int,
    depth: int,
) -> dict[str, RankedIds]:
    """A registered (not served) ranker's run, mapped to the collection's ids."""
    qrels = dataset.qrels()
    context = EvalContext(dataset, index_dir, cache_dir, qrels, settings, folds=folds, options=options)
    ranker = make_ranker(name, context)
    hits = ranker.run(parse_queries(texts), depth)
    shard = context.lexical()
    wanted = sorted({h.doc_id for ranked in hits.values() for h in ranked})
    external = {d: s.external_id for d, s in shard.stored_many(wanted).items()}
    return {q: [external[h.doc_id] for h in ranked if h.doc_id in external] for q, ranked in hits.items()}
