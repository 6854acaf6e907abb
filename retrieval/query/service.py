"""The search path: parse, fan out through the broker, rank, page, snippet.

This is what ``trawl search``, the API and the web page call. It serves the
published generation of an index root (or one generation directory), switches to a
newly published generation after warming it, caches responses, and pages either by
``page`` (capped) or by an opaque cursor pinned to a generation (uncapped).

Ranked list of a generation (deterministic, so pages never overlap or skip):

* ``bm25``: the lexical ranking itself, to any depth;
* fused rankers: first the stage's ordering of the union of the lexical and vector
  top ``candidate_k`` (tier 0), then lexical-only tiers of growing depth, each
  ordered by the same stage over the documents not yet listed.

On a result page, near-identical documents (SimHashes within ``NEAR_DUP_BITS``) are
shown once: the best-ranked one, with ``similar`` counting the others it stands for.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from core.errors import BadParameter, IndexStateError, QueryError
from core.settings import SearchSettings
from core.types import DocId, Hit, Query, ScoredDoc, SearchResponse
from retrieval.index.generation import Generation, GenerationSet
from retrieval.index.layout import vocabulary_file
from retrieval.index.lexical import StoredDoc, analysed
from retrieval.query.broker import Gathered, ShardBackend
from retrieval.query.cache import TtlLruCache
from retrieval.query.cursor import Cursor, CursorCodec
from retrieval.query.hybrid import Candidate
from retrieval.query.ranking import (
    Bm25Stage,
    ConvexStage,
    DenseStage,
    ExpandedStage,
    RankContext,
    RankStage,
    RrfStage,
)
from retrieval.query.rm3 import Rm3
from retrieval.query.snippets import SnippetMatcher, make_snippet
from retrieval.query.spelling import SpellerCache
from retrieval.text.analyzer import normalize_filetype, normalize_lang, normalize_site, parse_query
from retrieval.text.stopword_search import ignored_stopwords
from retrieval.text.synonyms import Synonyms

logger = logging.getLogger(__name__)

QueryEncoder = Callable[[str], NDArray[np.float32]]
MAX_TIERS = 8


@dataclass(frozen=True, slots=True)
class PageRequest:
    offset: int
    size: int

    @property
    def page(self) -> int:
        return self.offset // self.size + 1


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


@dataclass(frozen=True, slots=True)
class RequestBudget:
    """One search's deadline, shared by every broker call it makes.

    A fused ranker's list can take several gathering rounds (widening windows) and then a
    fetch; with one deadline per call, a hung shard cost a deadline per round. Every call
    now gets what is left, but at least :data:`CALL_FLOOR` of the deadline (a fetch after
    a slow round must still reach the healthy shards), and no further round starts once
    the budget is spent: a search ends within about 1.5 deadlines, whatever a shard does.
    """

    deadline_s: float
    ends: float

    @classmethod
    def starting_now(cls, deadline_s: float) -> RequestBudget:
        return cls(deadline_s, time.perf_counter() + deadline_s)

    def seconds(self) -> float:
        """For a broker call that takes a duration (``gather``)."""
        return max(self.ends - time.perf_counter(), CALL_FLOOR * self.deadline_s)

    def until(self) -> float:
        """For a broker call that takes an absolute time (``fetch``)."""
        return time.perf_counter() + self.seconds()

    def spent(self) -> bool:
        return time.perf_counter() >= self.ends


CALL_FLOOR = 0.25
"""The share of the deadline a broker call gets even once the request's budget is spent."""


def ranking_text(query: Query, stage: RankStage) -> str:
    """What of the query's text, beyond :func:`normalized`, the stage's ranking reads.

    A query vector encodes the words as typed (``comprehension list`` and ``list
    comprehension`` get different vectors and scores), and a cross-encoder reads the raw
    query, so for those stages the cache must tell such queries apart; BM25 and LTR over
    BM25 features see only the analysed terms."""
    if getattr(stage, "reads_query_text", False):
        return query.raw
    return query.positive_text if stage.needs_vector else ""


def normalized(query: Query) -> tuple[object, ...]:
    """What the ranking depends on: analysed terms with counts, phrases, exclusions, filters.

    ``Heat  Transfer`` and ``heat transfer`` share a cache entry; word order of free
    terms does not matter to the lexical rankers, so it does not split entries either
    (:func:`ranking_text` adds what vector and cross-encoder stages also read).
    """
    terms = tuple(sorted(Counter(t for text in query.terms for t in analysed(text)).items()))
    phrases = tuple(sorted(" ".join(analysed(p)) for p in query.phrases))
    excluded = tuple(sorted(" ".join(analysed(e)) for e in query.excluded))
    return (terms, phrases, excluded, query.site, query.lang, query.filetype)


AUTO_RANKERS: tuple[str, ...] = ("ltr", "hybrid", "bm25")
"""The default ranker (``search.default_ranker = "auto"``): the first the generation can serve.

``ltr`` exists only where a model is loaded and needs vectors, so a fresh checkout
without a model serves ``hybrid`` and an index without vectors ``bm25``. Chosen by
measurement through the served path (figures in :data:`AUTO_REASONS`, ``rankers.toml``
and the README), on nDCG@10, the metric the targets are stated in."""

AUTO_REASONS: Mapping[str, str] = {
    "ltr": (
        "LTR trained on the mix (cranfield, cisi and three crawled documentation sites: pydocs, "
        "pgdocs, sqlitedocs; collections weighted alike) has the best held-out nDCG@10: above bm25 "
        "on a site left out of training "
        "(nDCG@10 pgdocs .9360 vs .9189, sqlitedocs .8721 vs .8052) and hybrid held out on "
        "cranfield .4531 (hybrid .4193, p=.0002) and cisi .4448 (.4424, p=.88); MRR@10, reported "
        "beside it, is lower on cisi (.6309 vs .6729)"
    ),
    "hybrid": (
        "no LTR model is loaded (models/ltr/default or rank.ltr_model): convex fusion is the best "
        "model-free ranker held out on cranfield, cisi and pydocs"
    ),
    "bm25": "this generation has no vectors the query encoder matches (run `trawl embed`)",
}
"""Why each of :data:`AUTO_RANKERS` is the default when it is the first one available."""

NEAR_DUP_BITS = 3
"""Two pages are near-identical when their SimHashes differ in at most this many bits
(the crawl's near-duplicate rule, :mod:`crawl.extraction.dedup`)."""


def collapsed_into(simhash: int, kept: Sequence[int]) -> int | None:
    """Position of the better result on this page that ``simhash`` is a near copy of, if any.

    0 means "unknown" (documents not from a crawl): never collapsed.
    """
    if not simhash:
        return None
    for i, other in enumerate(kept):
        if other and (simhash ^ other).bit_count() <= NEAR_DUP_BITS:
            return i
    return None


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
        self.encoder = encoder
        self.encoder_model = encoder_model
        self.stages: dict[str, RankStage] = {
            "bm25": Bm25Stage(),
            "dense": DenseStage(),
            "hybrid-rrf": RrfStage(settings.rrf_k),
            "hybrid": ConvexStage(settings.hybrid_weight),
            "bm25-rm3": ExpandedStage(Bm25Stage(), Rm3()),
            "hybrid-rm3": ExpandedStage(ConvexStage(settings.hybrid_weight), Rm3()),
        }
        self.stages.update(stages or {})
        self.cache: TtlLruCache[SearchResponse] = TtlLruCache(settings.cache_entries, settings.cache_ttl_s)
        generations.listeners.append(lambda _gen: self.cache.clear())
        self.spellers = SpellerCache(
            keep=settings.keep_generations + 1,
            known_df=settings.spell_known_df,
            max_distance=settings.spell_max_distance,
        )
        self.synonyms = Synonyms.load(settings.synonyms_file) if settings.synonyms_file else None
        self.cursors = CursorCodec.for_index(generations.index, settings)

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
        settings = settings or SearchSettings()
        holder: list[SearchService] = []

        def opener(path: Path) -> Generation:
            return Generation.open(path, settings, remote=remote)

        def warm(generation: Generation) -> None:
            if holder:
                holder[0].warm(generation)

        generations = GenerationSet(index, opener, keep=settings.keep_generations, warm=warm)
        service = cls(generations, settings, encoder=encoder, encoder_model=encoder_model, stages=stages)
        holder.append(service)
        return service

    # -- properties -----------------------------------------------------------------

    @property
    def generation(self) -> Generation:
        return self.generations.current

    @property
    def num_docs(self) -> int:
        return self.generation.num_docs

    def can_use_vectors(self, generation: Generation) -> bool:
        return (
            self.encoder is not None
            and generation.vector_model is not None
            and (self.encoder_model is None or self.encoder_model == generation.vector_model)
        )

    def ranker_names(self, generation: Generation | None = None) -> list[str]:
        generation = generation or self.generation
        vectors = self.can_use_vectors(generation)
        return sorted(n for n, s in self.stages.items() if vectors or not s.needs_vector)

    def default_ranker(self, generation: Generation) -> str:
        if self.settings.default_ranker != "auto":
            return self.settings.default_ranker
        available = self.ranker_names(generation)
        return next(name for name in AUTO_RANKERS if name in available)

    def default_reason(self, generation: Generation) -> str:
        """Why :meth:`default_ranker` is what it is, for ``/healthz`` and operators."""
        name = self.default_ranker(generation)
        if self.settings.default_ranker != "auto":
            return f"configured: search.default_ranker = {name!r}"
        return f"auto (first of {', '.join(AUTO_RANKERS)} this index serves): {AUTO_REASONS[name]}"

    def stage(self, name: str | None, generation: Generation) -> RankStage:
        name = name or self.default_ranker(generation)
        available = self.ranker_names(generation)
        if name not in available:
            if name in self.stages:
                raise QueryError(
                    f"Ranker {name!r} needs vectors, which generation {generation.id} does not have "
                    f"(run `trawl embed`); available: {', '.join(available)}."
                )
            raise QueryError(f"Unknown ranker {name!r}; expected one of: {', '.join(available)}.")
        return self.stages[name]

    # -- request validation -----------------------------------------------------------

    def page_request(self, page: int | None, size: int | None) -> PageRequest:
        """Validate paging; errors name the parameter and the allowed range."""
        s = self.settings
        page = 1 if page is None else page
        size = s.default_page_size if size is None else size
        if page < 1 or page > s.max_page:
            raise BadParameter(
                f"page={page} is out of range; use 1 to {s.max_page} (or a cursor to go deeper)."
            )
        if size < 1 or size > s.max_page_size:
            raise BadParameter(f"size={size} is out of range; use 1 to {s.max_page_size}.")
        return PageRequest((page - 1) * size, size)

    def _pinned_filters(
        self, pinned: Cursor, *, site: str | None, lang: str | None, filetype: str | None
    ) -> tuple[str | None, str | None, str | None]:
        """The cursor's filters; a filter parameter sent beside the cursor must agree with them.

        A cursor pages through one ranked list: the filters select that list, so a
        different one beside the cursor would mix two lists (and the cursor alone, as
        clients send it, must not drop them)."""
        checks = (
            ("site", site, pinned.site, normalize_site),
            ("lang", lang, pinned.lang, normalize_lang),
            ("filetype", filetype, pinned.filetype, normalize_filetype),
        )
        for name, given, kept, norm in checks:
            if given and (not kept or norm(given) != norm(kept)):
                raise QueryError(
                    f"{name} cannot change while following a cursor (it pages through the list "
                    f"{name}={kept or '(none)'} selected); start the search again."
                )
        return pinned.site, pinned.lang, pinned.filetype

    def parse(
        self, raw: str, *, site: str | None = None, lang: str | None = None, filetype: str | None = None
    ) -> Query:
        query = parse_query(
            raw, max_chars=self.settings.max_query_chars, max_terms=self.settings.max_query_terms
        )
        updates: dict[str, Any] = {}
        if site:
            updates["site"] = normalize_site(site)
        if lang:
            updates["lang"] = normalize_lang(lang)
        if filetype:
            updates["filetype"] = normalize_filetype(filetype)
        query = dataclasses.replace(query, **updates) if updates else query
        return self.synonyms.expand(query) if self.synonyms is not None else query

    # -- ranking ----------------------------------------------------------------------

    def query_vector(
        self, query: Query, stage: RankStage, generation: Generation
    ) -> NDArray[np.float32] | None:
        if not stage.needs_vector or self.encoder is None or not self.can_use_vectors(generation):
            return None
        text = query.positive_text
        return self.encoder(text) if text.strip() else None

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
        """The first ``depth`` entries of the generation's ranked list (see module doc)."""
        budget = budget or RequestBudget.starting_now(self.settings.deadline_s)
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
        window = self.settings.candidate_k
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

    def _fetch(
        self,
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

    def _context(
        self, generation: Generation, cache: dict[DocId, StoredDoc], gathered: Gathered, budget: RequestBudget
    ) -> RankContext:
        return RankContext(
            fetch=lambda cs: self._fetch(generation, cs, cache, budget),
            generation=generation.id,
            features=gathered.features,
        )

    # -- the request ------------------------------------------------------------------

    def search(
        self,
        raw: str | None,
        *,
        page: int | None = None,
        size: int | None = None,
        ranker: str | None = None,
        cursor: str | None = None,
        explain: bool = False,
        site: str | None = None,
        lang: str | None = None,
        filetype: str | None = None,
        spell: bool = True,
        snippets: bool = True,
    ) -> SearchResponse:
        """One page of results, with a spelling suggestion or a rewrite (``spell=False``: neither).

        ``snippets=False`` leaves every hit's snippet empty and changes nothing else: for
        callers that score the ranked list (``trawl eval`` reads 100 results a query,
        where making their snippets would cost more than ranking them).

        A query with a misspelt word gets ``suggestion``; when it also finds fewer than
        ``spell_rewrite_below`` results (or none the index holds a non-stopword of: "if
        statment" matching only headings with "if") and the correction finds more, the correction's
        results are served instead, with ``rewritten_from`` naming what was typed. A
        cursor continues whatever query it was made for, so it is never corrected.
        """

        def run(text: str | None) -> SearchResponse:
            return _with_ignored_words(
                self._search(
                    text,
                    page=page,
                    size=size,
                    ranker=ranker,
                    cursor=cursor,
                    explain=explain,
                    site=site,
                    lang=lang,
                    filetype=filetype,
                    snippets=snippets,
                )
            )

        budget = RequestBudget.starting_now(self.settings.deadline_s)
        response = run(raw)
        if cursor or raw is None or not (spell and self.settings.spelling):
            return response
        suggestion, words_found = self._suggestion(raw, response, budget)
        if suggestion is None:
            return response
        # Results that only a short query's stopwords found ("if statment": pages with "if" in
        # a heading) are not what was asked for: the correction is served as for no results.
        below = self.settings.spell_rewrite_below  # 0: never rewrite
        if below > 0 and (response.total < below or not words_found):
            rewritten = run(suggestion)
            if rewritten.total > response.total:
                took = response.took_ms + rewritten.took_ms
                return dataclasses.replace(rewritten, rewritten_from=raw, took_ms=took)
        return dataclasses.replace(response, suggestion=suggestion)

    def _suggestion(
        self, raw: str, response: SearchResponse, budget: RequestBudget
    ) -> tuple[str | None, bool]:
        """The speller's correction of ``raw``, leaving alone the words the live index holds,
        and whether the index holds any of the query's words other than stopwords.

        The vocabulary is written when a generation is built; pages indexed in place since
        then bring words it lacks, which read as typos of known words ("lisp" for "list")
        and would be rewritten away from the fresh pages that have them. A word the
        vocabulary does not know well enough to leave alone is therefore looked up in the
        shards (one fan-out, only when there is a correction to make) and counts with the
        documents that hold it, as it would after a rebuild. The lookup gets what is left
        of the search's deadline (at least :data:`CALL_FLOOR` of it): a slow shard must not
        cost a second deadline.
        """
        with self.generations.using() as generation:
            if generation is None or generation.id != response.generation:
                return None, True  # a publish since: the next search suggests for the new one
            speller = self.spellers.get(generation.id, vocabulary_file(generation.path))
            if speller is None or speller.suggest(raw) is None:
                return None, True
            query = self.parse(raw)
            freqs = generation.broker.term_doc_freqs(query, budget.until())
        indexed: dict[str, int] = {}
        for (_field, term), count in freqs.items():
            indexed[term] = max(indexed.get(term, 0), count)

        def indexed_df(word: str) -> int:
            terms = analysed(word)
            return indexed.get(terms[0], 0) if len(terms) == 1 else 0

        words = {t for text in (*query.terms, *query.phrases) for t in analysed(text)}
        return speller.suggest(raw, indexed_df=indexed_df), any(indexed.get(t, 0) > 0 for t in words)

    def _search(
        self,
        raw: str | None,
        *,
        page: int | None = None,
        size: int | None = None,
        ranker: str | None = None,
        cursor: str | None = None,
        explain: bool = False,
        site: str | None = None,
        lang: str | None = None,
        filetype: str | None = None,
        snippets: bool = True,
    ) -> SearchResponse:
        started = time.perf_counter()
        self.generations.refresh()
        pinned = self.cursors.decode(cursor) if cursor else None
        with self.generations.using(pinned.generation if pinned else None) as generation:
            if generation is None:
                assert pinned is not None  # the serving generation is always open
                raise QueryError(
                    f"The cursor belongs to generation {pinned.generation}, which is no longer served; "
                    "start the search again."
                )
            if pinned is not None:
                raw, ranker = pinned.query, pinned.ranker
                request = PageRequest(pinned.offset, pinned.size)
                if size is not None and size != pinned.size:
                    raise QueryError("size cannot change while following a cursor; start the search again.")
                site, lang, filetype = self._pinned_filters(pinned, site=site, lang=lang, filetype=filetype)
            else:
                request = self.page_request(page, size)
            return self._search_on(
                generation,
                raw,
                request,
                started=started,
                ranker=ranker,
                cursor=bool(cursor),
                explain=explain,
                site=site,
                lang=lang,
                filetype=filetype,
                snippets=snippets,
            )

    def _search_on(
        self,
        generation: Generation,
        raw: str | None,
        request: PageRequest,
        *,
        started: float,
        ranker: str | None,
        cursor: bool,
        explain: bool,
        site: str | None,
        lang: str | None,
        filetype: str | None,
        snippets: bool,
    ) -> SearchResponse:
        """One page of ``generation``'s ranked list (kept open by the caller)."""
        budget = RequestBudget(self.settings.deadline_s, started + self.settings.deadline_s)
        if raw is None:
            raise QueryError("The query is empty: type one or more words to search for.")
        query = self.parse(raw, site=site, lang=lang, filetype=filetype)
        stage = self.stage(ranker, generation)
        key = (
            generation.view,
            normalized(query),
            ranking_text(query, stage),
            request.offset,
            request.size,
            stage.name,
            explain,
            cursor,
            snippets,
        )
        cached = self.cache.get(key)
        if cached is not None:
            took = (time.perf_counter() - started) * 1000
            return dataclasses.replace(cached, query=query, took_ms=took, cached=True)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        vector = self.query_vector(query, stage, generation)
        timings["encode"] = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        depth = request.offset + request.size
        ranked = self.ranked(generation, query, stage, depth, vector=vector, explain=explain, budget=budget)
        timings["retrieve_rank"] = (time.perf_counter() - t0) * 1000
        page_hits = ranked.ranked[request.offset : depth]
        t0 = time.perf_counter()
        hits, lost = self._hits(
            generation, query, page_hits, ranked, budget, explain=explain, snippets=snippets
        )
        timings["snippets"] = (time.perf_counter() - t0) * 1000
        # A shard that ranked a hit and then failed to return it is missing from this page.
        missing = sorted({s for g in ranked.gathered for s in g.missing_shards} | lost)
        missing_vector = sorted({s for g in ranked.gathered for s in g.missing_vector})
        has_more = depth < ranked.total and not (ranked.exhausted and depth >= len(ranked.ranked))
        next_cursor = (
            self.cursors.encode(
                Cursor(
                    generation.view,
                    raw,
                    stage.name,
                    depth,
                    request.size,
                    site or None,
                    lang or None,
                    filetype or None,
                )
            )
            if has_more and hits and depth + request.size <= self.settings.max_cursor_depth
            else None
        )
        response = SearchResponse(
            query=query,
            total=ranked.total,
            page=request.page,
            size=request.size,
            hits=tuple(hits),
            took_ms=(time.perf_counter() - started) * 1000,
            ranker=stage.name,
            generation=generation.id,
            partial=bool(missing or missing_vector),
            missing_shards=tuple(missing),
            missing_vector_shards=tuple(missing_vector),
            hedged_shards=tuple(sorted({s for g in ranked.gathered for s in g.hedged})),
            next_cursor=next_cursor,
            timings_ms=timings,
        )
        approximate = ranked.approximate or any(g.approximate_scores for g in ranked.gathered)
        # An update or a publish cleared the cache while this search ran on a view it has
        # since dropped: the answer stays out of it (its key could outlive the view).
        if not response.partial and not approximate and not generation.retired:
            self.cache.put(key, response)
        return response

    def _hits(
        self,
        generation: Generation,
        query: Query,
        page_hits: Sequence[ScoredDoc],
        ranked: RankedList,
        budget: RequestBudget,
        *,
        explain: bool,
        snippets: bool = True,
    ) -> tuple[list[Hit], set[int]]:
        """The page's hits, and the shards whose hits could not be fetched (left out)."""
        candidates = [ranked.candidates[h.doc_id] for h in page_hits]
        stored = self._fetch(generation, candidates, ranked.stored, budget)
        positive = (*query.terms, *query.phrases)
        matcher = SnippetMatcher(
            {t for text in positive for t in analysed(text)}, [w for t in positive for w in t.split()]
        )
        hits: list[Hit] = []
        lost: set[int] = set()
        kept_hashes: list[int] = []
        for position, scored in enumerate(page_hits):
            doc = stored.get(scored.doc_id)
            if doc is None:
                lost.add(ranked.candidates[scored.doc_id].shard_id)  # died between ranking and fetching
                continue
            candidate = ranked.candidates[scored.doc_id]
            info: dict[str, Any] | None = None
            if explain:
                info = {
                    "shard": candidate.shard_id,
                    "bm25": candidate.bm25,
                    "field_bm25": dict(candidate.field_bm25),
                    "cosine": candidate.cosine,
                    "lexical_rank": candidate.lexical_rank,
                    "vector_rank": candidate.vector_rank,
                    "final_score": scored.score,
                    "position": position + 1,
                    **ranked.explain.get(scored.doc_id, {}),
                }
            kept = collapsed_into(doc.simhash, kept_hashes)
            if kept is not None:
                hits[kept] = dataclasses.replace(hits[kept], similar=hits[kept].similar + 1)
                continue
            kept_hashes.append(doc.simhash)
            hits.append(
                Hit(
                    doc_id=doc.doc_id,
                    url=doc.url,
                    title=doc.title or doc.url,
                    snippet=make_snippet(
                        doc.body or doc.description, matcher, max_chars=self.settings.snippet_chars
                    )
                    if snippets
                    else "",
                    score=scored.score,
                    external_id=doc.external_id,
                    explain=info,
                )
            )
        return hits, lost

    def warm(self, generation: Generation) -> None:
        """Touch a generation's indexes before it serves (page cache, lazy structures).

        The lazy structures cost seconds on a large index, so a first query would pay
        them: the exact cosine matrix of each in-process vector shard (~2 s per 50K
        passages) and the speller (~1 s per 100K words).
        """
        for replicas in generation.broker.shards:
            for shard in replicas:
                vectors = getattr(shard, "vector", None)
                if vectors is not None:
                    vectors.warm()
        if self.settings.spelling:
            self.spellers.get(generation.id, vocabulary_file(generation.path))
        for raw in ("the", "search engine", "python list"):
            try:
                query = self.parse(raw)
                stage = self.stage(None, generation)
                vector = self.query_vector(query, stage, generation)
                self.ranked(generation, query, stage, 10, vector=vector)
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
            lexical = getattr(replicas[0], "lexical", None)
            if lexical is not None:
                doc_id = lexical.doc_id_for_url(url)
                if doc_id is not None:
                    return doc_id, replicas[0].shard_id
        return None

    def close(self) -> None:
        self.generations.close()


def _with_ignored_words(response: SearchResponse) -> SearchResponse:
    """``response`` naming the query's words that were not searched: the stopwords of a query
    too long for them to count (:mod:`retrieval.text.stopword_search`)."""
    ignored = ignored_stopwords(response.query)
    return dataclasses.replace(response, ignored_words=ignored) if ignored else response
