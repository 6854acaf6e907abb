"""A request's text and filters as a :class:`Query`, and what of it a cached answer depends on."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Self

from core.errors import BadParameter, QueryError
from core.settings import SearchSettings
from core.types import Query
from retrieval.index.lexical_query import analysed
from retrieval.query.ranking import RankStage
from retrieval.query.request import SearchRequest
from retrieval.text.analyzer import normalize_filetype, normalize_lang, normalize_site, parse_query
from retrieval.text.function_words import read_in
from retrieval.text.synonyms import Synonyms


class QueryParser:
    """Parses a request's query (operators, filters), capped, with its synonyms added."""

    def __init__(self, *, max_chars: int, max_terms: int, synonyms: Synonyms | None = None) -> None:
        self.max_chars = max_chars
        self.max_terms = max_terms
        self.synonyms = synonyms

    @classmethod
    def from_settings(cls, settings: SearchSettings) -> Self:
        synonyms = Synonyms.load(settings.synonyms_file) if settings.synonyms_file else None
        return cls(max_chars=settings.max_query_chars, max_terms=settings.max_query_terms, synonyms=synonyms)

    def parse(self, request: SearchRequest) -> Query:
        """``request.q`` with the request's filters (they add to the query's own operators), read in
        its language (``retrieval.text.function_words``)."""
        if request.q is None:
            raise QueryError("The query is empty: type one or more words to search for.")
        query = parse_query(request.q, max_chars=self.max_chars, max_terms=self.max_terms)
        updates: dict[str, Any] = {}
        for name, value, norm in (
            ("site", request.site, normalize_site),
            ("lang", request.lang, normalize_lang),
            ("filetype", request.filetype, normalize_filetype),
        ):
            if value:
                try:
                    updates[name] = norm(value)
                except QueryError as exc:  # the same rule as the operator, but a parameter's value
                    raise BadParameter(str(exc).replace(f"{name}:", f"{name}=")) from exc
        query = dataclasses.replace(query, **updates) if updates else query
        query = read_in(query, request.reader_lang, request.read_as)
        return self.synonyms.expand(query) if self.synonyms is not None else query


def normalized(query: Query) -> tuple[object, ...]:
    """What the ranking depends on: analysed terms with counts, phrases, exclusions, filters.

    ``Heat  Transfer`` and ``heat transfer`` share a cache entry; word order of free
    terms does not matter to the lexical rankers, so it does not split entries either
    (:func:`ranking_text` adds what vector and cross-encoder stages also read).
    """
    terms = tuple(sorted(Counter(t for text in query.terms for t in analysed(text)).items()))
    phrases = tuple(sorted(" ".join(analysed(p)) for p in query.phrases))
    excluded = tuple(sorted(" ".join(analysed(e)) for e in query.excluded))
    return (terms, phrases, excluded, query.site, query.lang, query.filetype, query.read_as)


def ranking_text(query: Query, stage: RankStage) -> str:
    """What of the query's text, beyond :func:`normalized`, the stage's ranking reads.

    A query vector encodes the words as typed (``comprehension list`` and ``list
    comprehension`` get different vectors and scores), and a cross-encoder reads the raw
    query, so for those stages the cache must tell such queries apart; BM25 and LTR over
    BM25 features see only the analysed terms."""
    if getattr(stage, "reads_query_text", False):
        return query.raw
    return query.positive_text if stage.needs_vector else ""
