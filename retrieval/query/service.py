"""The search path: parse, fan out through the broker, rank, page, snippet.

This is what ``trawl search``, the API and the web page call, with a
:class:`~retrieval.query.request.SearchRequest`. It serves the published generation of
an index root (or one generation directory), switches to a newly published generation
after warming it, caches responses, and pages either by ``page`` (capped) or by an
opaque cursor pinned to a generation (uncapped). Its steps live beside it: parsing
(:mod:`.parsing`), the rankers (:mod:`.served_rankers`), the ranked list
(:mod:`.retriever`), paging (:mod:`.paging`), hits (:mod:`.results`) and spelling
(:mod:`.correction`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from core.errors import BadParameter, IndexStateError, QueryError, ShardUnavailable
from core.settings import SearchSettings
from core.types import DocId, Query, SearchResponse
from retrieval.index.generation import Generation, GenerationSet
from retrieval.index.watch import FileWatch
from retrieval.query.cache import TtlLruCache
from retrieval.query.circuit import CircuitState
from retrieval.query.correction import SpellingCorrector
from retrieval.query.cursor import CursorCodec
from retrieval.query.facets import FACET_FIELDS, FacetValue, top_values
from retrieval.query.paging import Pager
from retrieval.query.parsing import QueryParser, normalized, ranking_text
from retrieval.query.ranking import RankStage
from retrieval.query.request import PageRequest, RequestBudget, SearchRequest
from retrieval.query.results import page_hits, with_ignored_words
from retrieval.query.retriever import Retriever
from retrieval.query.served_rankers import QueryEncoder, ServedRankers
from retrieval.query.shard_backend import LocalShard, ShardBackend
from retrieval.query.shared_cache import LayeredCache, open_shared_cache
from retrieval.query.translations import with_translations
from retrieval.text.compounds import with_compounds
from retrieval.text.stopword_search import is_sentence

logger = logging.getLogger(__name__)

WARM_QUERIES = ("the", "search engine", "python list")


class SearchService:
    """Searches an index; one instance per process, shared by requests (thread-safe)."""

    def __init__(
        self,
        generations: GenerationSet,
        settings: SearchSettings,
        *,
        encoder: QueryEncoder | None = None,
        encoder_model: str | None = None,
        stages: Mapping[str, RankStage] | None = None,
    ) -> None:
        self.generations = generations
        self.settings = settings
        self.rankers = ServedRankers(settings, encoder=encoder, encoder_model=encoder_model, stages=stages)
        self.parser = QueryParser.from_settings(settings)
        self.retriever = Retriever(candidate_k=settings.candidate_k, deadline_s=settings.deadline_s)
        self.pager = Pager(settings, CursorCodec.for_index(generations.index, settings))
        self.spelling = SpellingCorrector(settings, self.parser)
        self.cache: LayeredCache[SearchResponse] = LayeredCache(
            TtlLruCache(settings.cache_entries, settings.cache_ttl_s), open_shared_cache(settings)
        )
        generations.listeners.append(lambda _gen: self.cache.clear())
        self.watch: FileWatch | None = None
        """The background check of the served files (:meth:`watch_files`; serving processes only)."""

    @classmethod
    def open(
        cls,
        index: Path,
        settings: SearchSettings | None = None,
        *,
        encoder: QueryEncoder | None = None,
        encoder_model: str | None = None,
        stages: Mapping[str, RankStage] | None = None,
        remote: Sequence[Sequence[ShardBackend]] | None = None,
    ) -> Self:
        """The service over the generation ``index`` publishes (or ``remote`` shards), warming
        each newly published generation before it serves."""
        settings = settings or SearchSettings()
        holder: list[SearchService] = []

        def opener(path: Path) -> Generation:
            return Generation.open(path, settings, remote=remote)

        def warm(generation: Generation) -> None:
            if holder:
                holder[0].warm(generation)

        generations = GenerationSet(index, opener, keep=settings.open_generations, warm=warm)
        service = cls(generations, settings, encoder=encoder, encoder_model=encoder_model, stages=stages)
        holder.append(service)
        return service

    # -- what it serves ---------------------------------------------------------------

    @property
    def generation(self) -> Generation:
        return self.generations.current

    @property
    def num_docs(self) -> int:
        return self.generation.num_docs

    @property
    def stages(self) -> dict[str, RankStage]:
        return self.rankers.stages

    @property
    def encoder(self) -> QueryEncoder | None:
        return self.rankers.encoder

    @encoder.setter
    def encoder(self, encoder: QueryEncoder | None) -> None:
        self.rankers.encoder = encoder

    @property
    def encoder_model(self) -> str | None:
        return self.rankers.encoder_model

    @encoder_model.setter
    def encoder_model(self, model: str | None) -> None:
        self.rankers.encoder_model = model

    def shard_circuits(self) -> list[CircuitState]:
        """Each shard of the serving generation: answering, or skipped until a probe answers."""
        return self.generation.broker.circuits.states()

    def problems(self) -> list[str]:
        """What is not served and why (damaged files, a generation that failed to open):
        ``/healthz`` says "degraded" with these."""
        return self.generations.problems()

    def watch_files(self) -> FileWatch:
        """Check the content of the served files in the background (started once): a
        damaged file takes its shard's part out of service and clears the response cache."""
        if self.watch is None:
            self.watch = FileWatch(
                self.generations,
                interval_s=self.settings.verify_interval_s,
                on_damage=lambda _generation, _damage: self.cache.clear(),
            )
            self.watch.start()
        return self.watch

    def can_use_vectors(self, generation: Generation) -> bool:
        return self.rankers.can_use_vectors(generation)

    def ranker_names(self, generation: Generation | None = None) -> list[str]:
        return self.rankers.names(generation or self.generation)

    def default_ranker(self, generation: Generation) -> str:
        return self.rankers.default(generation)

    def default_reason(self, generation: Generation) -> str:
        """Why :meth:`default_ranker` is what it is, for ``/healthz`` and operators."""
        return self.rankers.default_reason(generation)

    def parse(self, request: SearchRequest, generation: Generation | None = None) -> Query:
        """The request's query as the ranking of ``generation`` (the serving one by default)
        reads it: filters, synonyms and the compound spellings its vocabulary holds."""
        query = self.parser.parse(request)
        if not self.settings.compounds:
            return query
        return with_compounds(query, self.spelling.vocabulary(generation or self.generation))

    def facets(
        self, query: Query, names: Sequence[str], *, limit: int = 10
    ) -> tuple[dict[str, list[FacetValue]], list[int]]:
        """Counts per value of each facet over every result of ``query`` (``retrieval.query.facets``),
        and the shards that could not count (remote, or out of service): their results are not in it."""
        counts: dict[str, list[dict[str, int]]] = {name: [] for name in names}
        missing: list[int] = []
        with self.generations.using() as generation:
            assert generation is not None  # the serving generation is always open
            for shard_id, replicas in enumerate(generation.broker.shards):
                counter = next((r for r in replicas if isinstance(r, LocalShard) and r.failed is None), None)
                try:
                    if counter is None:
                        raise ShardUnavailable(f"shard {shard_id} cannot count facets here")
                    for name in names:
                        counts[name].append(counter.facet_counts(query, FACET_FIELDS[name]))
                except ShardUnavailable:
                    missing.append(shard_id)
        return {name: top_values(name, counts[name], limit) for name in names}, missing

    # -- the request ------------------------------------------------------------------

    def search(self, request: SearchRequest) -> SearchResponse:
        """One page of results, with a spelling suggestion or a rewrite (``spell=False``: neither).

        A query with a misspelt word gets ``suggestion``; when it also finds fewer than
        ``spell_rewrite_below`` results, or is a few keywords one of which no page has
        ("subproces run": the pages found are those with "run" alone; "if statment" matching
        only headings with "if"), and the correction finds more, the correction's results are served instead,
        with ``rewritten_from`` naming what was typed. A cursor continues whatever query it was
        made for, so it is never corrected.

        Example: ``service.search(SearchRequest("list comprehension", ranker="bm25"))``.
        """
        budget = RequestBudget.starting_now(self.settings.deadline_s)
        response = with_ignored_words(self._search(request))
        raw = request.q
        if request.cursor or raw is None or not (request.spell and self.settings.spelling):
            return response
        found = self.spelling.suggestion(self.generations, raw, response, budget)
        suggestion = found.text
        if suggestion is None:
            return response
        # Results that only a short query's stopwords found ("if statment": pages with "if" in
        # a heading), or that miss a word no page holds, are not what was asked for: the
        # correction is served as for no results (DECISIONS 85).
        below = self.settings.spell_rewrite_below  # 0: never rewrite
        unheld = not found.all_held and not is_sentence(response.query)  # a sentence has words to spare
        if below > 0 and (response.total < below or not found.some_held or unheld):
            rewritten = with_ignored_words(self._search(dataclasses.replace(request, q=suggestion)))
            # A word no page holds matched nothing: its correction ranks pages that have it first.
            if rewritten.total > response.total or (unheld and rewritten.total == response.total > 0):
                took = response.took_ms + rewritten.took_ms
                return dataclasses.replace(rewritten, rewritten_from=raw, took_ms=took)
        return dataclasses.replace(response, suggestion=suggestion)

    def _search(self, request: SearchRequest) -> SearchResponse:
        """The request's page on the generation it reads: the serving one, or its cursor's."""
        started = time.perf_counter()
        self.generations.refresh()
        pinned = self.pager.decode(request.cursor) if request.cursor else None
        with self.generations.using(pinned.generation if pinned else None) as generation:
            if generation is None:
                assert pinned is not None  # the serving generation is always open
                raise BadParameter(
                    f"The cursor belongs to generation {pinned.generation}, which is no longer served; "
                    "start the search again."
                )
            if pinned is not None:
                request, page = self.pager.follow(request, pinned)
            else:
                page = self.pager.page(request)
            response = self._search_on(generation, request, page, started=started)
        return with_translations(response, request.reader_lang)

    def _search_on(
        self, generation: Generation, request: SearchRequest, page: PageRequest, *, started: float
    ) -> SearchResponse:
        """One page of ``generation``'s ranked list (kept open by the caller)."""
        budget = RequestBudget(self.settings.deadline_s, started + self.settings.deadline_s)
        query = self.parse(request, generation)
        stage = self.rankers.stage(request.ranker, generation)
        key = (
            generation.view,
            normalized(query),
            ranking_text(query, stage),
            page.offset,
            page.size,
            stage.name,
            request.explain,
            bool(request.cursor),
            request.snippets,
        )
        cached = self.cache.get(key)
        if cached is not None:
            took = (time.perf_counter() - started) * 1000
            return dataclasses.replace(cached, query=query, took_ms=took, cached=True)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        vector = self.rankers.query_vector(query, stage, generation)
        timings["encode"] = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        depth = page.depth
        ranked = self.retriever.ranked(
            generation, query, stage, depth, vector=vector, explain=request.explain, budget=budget
        )
        timings["retrieve_rank"] = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        hits, lost = page_hits(
            generation,
            request,
            query,
            ranked.ranked[page.offset : depth],
            ranked,
            budget,
            snippet_chars=self.settings.snippet_chars,
        )
        timings["snippets"] = (time.perf_counter() - t0) * 1000
        # A shard that ranked a hit and then failed to return it is missing from this page.
        missing = sorted({s for g in ranked.gathered for s in g.missing_shards} | lost)
        missing_vector = sorted({s for g in ranked.gathered for s in g.missing_vector})
        has_more = depth < ranked.total and not (ranked.exhausted and depth >= len(ranked.ranked))
        response = SearchResponse(
            query=query,
            total=ranked.total,
            page=page.page,
            size=page.size,
            hits=tuple(hits),
            took_ms=(time.perf_counter() - started) * 1000,
            ranker=stage.name,
            generation=generation.id,
            partial=bool(missing or missing_vector),
            missing_shards=tuple(missing),
            missing_vector_shards=tuple(missing_vector),
            hedged_shards=tuple(sorted({s for g in ranked.gathered for s in g.hedged})),
            next_cursor=self.pager.next_cursor(
                generation.view,
                request,
                stage.name,
                page,
                has_more=has_more and bool(hits),
                read_as=query.read_as,
            ),
            timings_ms=timings,
        )
        approximate = ranked.approximate or any(g.approximate_scores for g in ranked.gathered)
        # An update or a publish cleared the cache while this search ran on a view it has
        # since dropped: the answer stays out of it (its key could outlive the view).
        if not response.partial and not approximate and not generation.retired:
            self.cache.put(key, response)
        return response

    # -- the generation ---------------------------------------------------------------

    def warm(self, generation: Generation) -> None:
        """Touch a generation's indexes before it serves (page cache, lazy structures).

        The lazy structures, the exact cosine matrix of each in-process vector shard and
        the speller, cost seconds on a large index: a first query would pay them
        (DECISIONS 32).
        """
        for replicas in generation.broker.shards:
            for shard in replicas:
                vectors = getattr(shard, "vector", None)
                if vectors is not None:
                    vectors.warm()
        if self.settings.spelling:
            self.spelling.warm(generation)
        for raw in WARM_QUERIES:
            try:
                query = self.parser.parse(SearchRequest(raw))
                stage = self.rankers.stage(None, generation)
                vector = self.rankers.query_vector(query, stage, generation)
                self.retriever.ranked(generation, query, stage, 10, vector=vector)
            except QueryError:
                continue

    def document(self, doc_id: DocId) -> Any:
        """The stored document with this id from the serving generation, or None when no
        shard has it. A shard that did not answer may hold it: that is an
        :class:`IndexStateError` (HTTP 503, try again), not "no such document" (404)."""
        with self.generations.using() as generation:
            assert generation is not None  # the serving generation is always open
            broker = generation.broker
            shards = {i: [doc_id] for i in range(len(broker.shards))}
            found, failed = broker.fetch_reporting(shards, time.perf_counter() + self.settings.deadline_s)
        doc = found.get(doc_id)
        if doc is None and failed:
            raise IndexStateError(
                f"Shard{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} did not answer, "
                f"so document {doc_id} may exist there; try again."
            )
        return doc

    def locate_url(self, url: str) -> tuple[DocId, int] | None:
        """(doc_id, shard) of a canonical URL in the serving generation, when indexed here.

        Only in-process shards can answer; with remote shards this returns None.
        """
        for replicas in self.generation.broker.shards:
            find = getattr(replicas[0], "doc_id_for_url", None)
            if find is None:
                continue
            try:
                doc_id = find(url)
            except ShardUnavailable:
                continue  # taken out for a damaged file
            if doc_id is not None:
                return doc_id, replicas[0].shard_id
        return None

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        self.generations.close()
