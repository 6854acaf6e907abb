"""A page of results: the ranked entries as hits, with snippets and explanations.

On a page, near-identical documents (SimHashes within :data:`NEAR_DUP_BITS`) are shown
once: the best-ranked one, with ``similar`` counting the others it stands for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from core.types import Hit, Query, ScoredDoc, SearchResponse
from retrieval.index.generation import Generation
from retrieval.index.lexical_query import scoring_terms
from retrieval.query.request import RequestBudget, SearchRequest
from retrieval.query.retriever import RankedList, fetch_stored
from retrieval.query.sections import SectionQuery, snippet_and_section
from retrieval.query.snippets import SnippetMatcher
from retrieval.text.stopword_search import ignored_stopwords

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


def page_hits(
    generation: Generation,
    request: SearchRequest,
    query: Query,
    page: Sequence[ScoredDoc],
    ranked: RankedList,
    budget: RequestBudget,
    *,
    snippet_chars: int,
) -> tuple[list[Hit], set[int]]:
    """The page's hits, and the shards whose hits could not be fetched (left out).

    ``request.snippets`` False leaves snippets empty; ``request.explain`` adds each hit's
    scores and the stage's reasons. A hit whose page has a section that answers the query
    links to it and quotes it (:mod:`retrieval.query.sections`)."""
    candidates = [ranked.candidates[h.doc_id] for h in page]
    stored = fetch_stored(generation, candidates, ranked.stored, budget)
    positive = (*query.terms, *query.phrases)
    # What the lexical match scored outside titles and headings (a reader's function words are not).
    matcher = SnippetMatcher(set(scoring_terms(query)), [w for t in positive for w in t.split()])
    sections = SectionQuery.of(query, matcher)
    hits: list[Hit] = []
    lost: set[int] = set()
    kept_hashes: list[int] = []
    for position, scored in enumerate(page):
        doc = stored.get(scored.doc_id)
        if doc is None:
            lost.add(ranked.candidates[scored.doc_id].shard_id)  # died between ranking and fetching
            continue
        candidate = ranked.candidates[scored.doc_id]
        info: dict[str, Any] | None = None
        if request.explain:
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
            if doc.quality < 1.0:  # its BM25 was multiplied by this (retrieval.index.page_quality)
                info["page_quality"] = f"word match ×{doc.quality:g} ({', '.join(doc.quality_reasons)})"
        kept = collapsed_into(doc.simhash, kept_hashes)
        if kept is not None:
            hits[kept] = dataclasses.replace(hits[kept], similar=hits[kept].similar + 1)
            continue
        kept_hashes.append(doc.simhash)
        snippet, section = snippet_and_section(
            doc, sections, matcher, max_chars=snippet_chars, snippets=request.snippets
        )
        hits.append(
            Hit(
                doc_id=doc.doc_id,
                url=doc.url,
                title=doc.title or doc.url,
                snippet=snippet,
                score=scored.score,
                external_id=doc.external_id,
                explain=info,
                lang=doc.lang,
                translation_group=doc.translation_group,
                section=section,
            )
        )
    return hits, lost


def with_ignored_words(response: SearchResponse) -> SearchResponse:
    """``response`` naming the query's words that were not searched: the stopwords of a query
    too long for them to count (:mod:`retrieval.text.stopword_search`)."""
    ignored = ignored_stopwords(response.query)
    return dataclasses.replace(response, ignored_words=ignored) if ignored else response
