"""A parsed ``Query`` as Tantivy queries over one lexical shard.

The query is built as a boolean query of boosted term queries, never by Tantivy's
parser, so nothing a user types can be a syntax error, and a word repeated in the
query weighs more (as in bm25s and Lucene; Tantivy's parser collapses repeats).
With corpus statistics every clause is boosted from the shard's idf to the
collection's, so every shard scores as one index over all documents would.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Self

import tantivy

from core.settings import SearchSettings
from core.types import DocId, Query
from retrieval.index.collection_stats import CorpusStats
from retrieval.index.lexical_schema import TEXT_FIELDS
from retrieval.text.function_words import function_tokens
from retrieval.text.stopword_search import (
    CAPTION_WEIGHT,
    CAPTIONS_FIELD,
    is_lone_character,
    is_sentence,
    stopword_search,
)
from retrieval.text.tokenizer import analyze

IdfRatio = Callable[[CorpusStats | None, str, Sequence[str]], float]
"""Boost turning a shard's idf of some terms in a field into the collection's."""


@lru_cache(maxsize=8192)
def analysed(text: str) -> tuple[str, ...]:
    """:func:`analyze` of a piece of query text, memoised: a query's words are analysed by the
    broker, each shard (statistics, query, per-field scores) and the snippets alike."""
    return tuple(analyze(text))


def stat_terms(query: Query) -> frozenset[str]:
    """Every analysed term whose document frequency scores ``query`` (phrases, synonyms and a
    short query's stopwords too)."""
    terms: set[str] = set()
    for text in (*query.terms, *query.phrases, *(text for text, _ in query.expansions)):
        terms.update(analysed(text))
    terms.update(stopword_search(query).terms)
    return frozenset(terms)


def scoring_terms(query: Query) -> Counter[str]:
    """Analysed positive terms with their query frequency (phrase words included); a free word
    that is a function word of the language the query is read in is left to the captions, and
    a sentence's free one-character words are not searched (``is_lone_character``)."""
    counts: Counter[str] = Counter()
    skipped = function_tokens(query.read_as) if query.read_as else frozenset()
    lone = is_sentence(query)
    for text in query.terms:
        counts.update(t for t in analysed(text) if t not in skipped and not (lone and is_lone_character(t)))
    if (skipped or lone) and not counts and not query.phrases:  # nothing else: search them
        return _all_free_terms(query)
    for text in query.phrases:
        counts.update(analysed(text))
    return counts


def _all_free_terms(query: Query) -> Counter[str]:
    """Every analysed term of ``query``, none left out: for a query of nothing else."""
    return Counter(t for text in query.terms for t in analysed(text))


@dataclass(frozen=True, slots=True)
class FieldBoosts:
    """Per-field multipliers of BM25.

    The title is indexed inside ``body`` as well (a page's title is part of its text),
    so a title match weighs ``body + title``: effectively title 1.5 > headings 1.4
    (headings are in the extracted body too) > anchors 1.2 > body 1.0. How the title
    value was chosen: see README.
    """

    title: float = 0.5
    headings: float = 0.4
    body: float = 1.0
    anchors: float = 1.2

    @classmethod
    def from_settings(cls, s: SearchSettings) -> Self:
        return cls(s.title_boost, s.headings_boost, s.body_boost, s.anchors_boost)

    def items(self) -> tuple[tuple[str, float], ...]:
        return (
            ("title", self.title),
            ("headings", self.headings),
            ("body", self.body),
            ("anchors", self.anchors),
        )


class LexicalQueryBuilder:
    """The Tantivy queries of one shard: scoring clauses, caption clauses, filters, id sets."""

    def __init__(self, schema: tantivy.Schema, live_fields: frozenset[str], idf_ratio: IdfRatio) -> None:
        self._schema = schema
        self._live_fields = live_fields
        """Fields some document of the shard has: the others would score nothing."""
        self._idf_ratio = idf_ratio

    def term(self, field: str, value: str | int) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value)

    def among(self, doc_ids: Sequence[DocId]) -> tantivy.Query:
        """Matches exactly ``doc_ids``: a disjunction of doc_id terms.

        Not ``term_set_query``, which scans the shard's whole doc_id dictionary and so
        grows with the shard; term lookups cost what the ids are.
        """
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, self.term("doc_id", int(d))) for d in doc_ids]
        )

    def in_any_field(
        self, tokens: Sequence[str], fields: Sequence[str], stats: CorpusStats | None = None
    ) -> tantivy.Query:
        """A term (one token) or exact phrase (several) in any of ``fields``."""
        if len(tokens) == 1:
            parts = [self.term(f, tokens[0]) for f in fields]
        else:
            parts = [tantivy.Query.phrase_query(self._schema, f, list(tokens)) for f in fields]
        if stats is not None:
            parts = [
                tantivy.Query.boost_query(p, self._idf_ratio(stats, f, tokens))
                for p, f in zip(parts, fields, strict=True)
            ]
        return tantivy.Query.boolean_query([(tantivy.Occur.Should, p) for p in parts])

    def filters(self, query: Query) -> list[tuple[Any, tantivy.Query]]:
        """The query's site, lang and filetype filters and its excluded terms, scoring nothing."""
        clauses: list[tuple[Any, tantivy.Query]] = []
        zero = tantivy.Query.const_score_query
        if query.site:
            clauses.append((tantivy.Occur.Must, zero(self.term("site", query.site), 0.0)))
        if query.lang:
            clauses.append((tantivy.Occur.Must, zero(self.term("lang", query.lang), 0.0)))
        if query.filetype:
            clauses.append((tantivy.Occur.Must, zero(self.term("filetype", query.filetype), 0.0)))
        for item in query.excluded:
            tokens = analysed(item)
            if tokens:
                live = [f for f in TEXT_FIELDS if f in self._live_fields]
                clauses.append((tantivy.Occur.MustNot, self.in_any_field(tokens, live)))
        return clauses

    def caption_parts(self, query: Query, stats: CorpusStats | None) -> list[tuple[str, tantivy.Query]]:
        """A short query's stopwords as terms and in word pairs as phrases, in ``captions``
        (:mod:`retrieval.text.stopword_search`), each with a label; nothing for a long query."""
        search = stopword_search(query)
        parts: list[tuple[str, tantivy.Query]] = []
        for term in search.terms:
            weight = CAPTION_WEIGHT * self._idf_ratio(stats, CAPTIONS_FIELD, (term,))
            parts.append((term, tantivy.Query.boost_query(self.term(CAPTIONS_FIELD, term), weight)))
        for pair in search.phrases:
            weight = CAPTION_WEIGHT * self._idf_ratio(stats, CAPTIONS_FIELD, pair)
            phrase = tantivy.Query.phrase_query(self._schema, CAPTIONS_FIELD, list(pair))
            parts.append((f'"{" ".join(pair)}"', tantivy.Query.boost_query(phrase, weight)))
        return parts

    def build(
        self, query: Query, boosts: Mapping[str, float], *, stats: CorpusStats | None, captions: bool
    ) -> tantivy.Query | None:
        """The Tantivy query for ``query`` over the ``boosts`` fields (plus the caption clauses
        with ``captions``); None when nothing in it can match."""
        boosts = {f: b for f, b in boosts.items() if f in self._live_fields}
        should: list[tuple[Any, tantivy.Query]] = []
        for term, count in scoring_terms(query).items():
            for field, boost in boosts.items():
                weight = boost * count * self._idf_ratio(stats, field, (term,))
                q = tantivy.Query.boost_query(self.term(field, term), weight)
                should.append((tantivy.Occur.Should, q))
        for text, share in query.expansions:
            # A synonym weighs ``share`` of what the term itself would (Query.expansions).
            tokens = analysed(text)
            if len(tokens) == 1:
                for field, boost in boosts.items():
                    weight = share * boost * self._idf_ratio(stats, field, tokens)
                    q = tantivy.Query.boost_query(self.term(field, tokens[0]), weight)
                    should.append((tantivy.Occur.Should, q))
            elif tokens and boosts:
                q = tantivy.Query.boost_query(self.in_any_field(tokens, list(boosts), stats), share)
                should.append((tantivy.Occur.Should, q))
        if captions and CAPTIONS_FIELD in self._live_fields:
            should.extend((tantivy.Occur.Should, q) for _, q in self.caption_parts(query, stats))
        # The scoring disjunction is itself required: beside Must filters, bare Should
        # clauses would turn optional and let filter-only matches through.
        clauses: list[tuple[Any, tantivy.Query]] = []
        if should:
            clauses.append((tantivy.Occur.Must, tantivy.Query.boolean_query(should)))
        for phrase in query.phrases:
            tokens = analysed(phrase)
            if tokens and boosts:
                clauses.append((tantivy.Occur.Must, self.in_any_field(tokens, list(boosts), stats)))
        has_positive = bool(clauses)
        filters = self.filters(query)
        if not has_positive:
            if query.is_empty and any(o == tantivy.Occur.Must for o, _ in filters):
                clauses.append((tantivy.Occur.Must, tantivy.Query.all_query()))
            else:
                return None
        return tantivy.Query.boolean_query(clauses + filters)
