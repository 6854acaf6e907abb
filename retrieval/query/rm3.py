"""RM3 query expansion: the query's words plus the words its best BM25 matches share.

Relevance model 3 (Lavrenko and Croft, 2001; as Anserini implements it, Abdul-Jaleel et
al., 2004): the top ``feedback_docs`` documents of a first BM25 search stand in for the
relevant ones. Each votes for its words with P(w|d), weighted by its share of the feedback
documents' BM25 score; the ``feedback_terms`` words with the most votes, renormalised, are
mixed with the original query at ``original_weight``, and the weighted query is scored with
BM25 again. Documents that use the topic's vocabulary without the query's own words are
found, and the query's ambiguous words matter less.

The defaults are Anserini's, not tuned here; what ``bm25-rm3`` and ``hybrid-rm3`` do is
measured by ``trawl eval`` (``docs/relevance.md``). On known-item web queries expansion is
expected to drift from the one right page, so it is a ranker to choose, not a default. The
expansion reaches the shards as :attr:`core.types.Query.expansions` (as synonyms do), so
statistics, remote shards and the cache need nothing new.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.types import Query
from retrieval.index.lexical import StoredDoc
from retrieval.index.lexical_query import analysed
from retrieval.text.tokenizer import ENGLISH_STOPWORDS, stem, words

__all__ = ["Rm3"]


@dataclass(frozen=True, slots=True)
class Rm3:
    feedback_docs: int = 10
    feedback_terms: int = 10
    original_weight: float = 0.5
    """λ: the original query's share of the expanded query's weight."""
    body_chars: int = 20_000
    """A feedback document is read this far (title, headings and body): bounded cost per query."""

    def __post_init__(self) -> None:
        if self.feedback_docs < 1 or self.feedback_terms < 1:
            raise ValueError("RM3 needs at least one feedback document and one feedback term")
        if not 0.0 < self.original_weight <= 1.0:
            raise ValueError(f"original_weight must be in (0, 1], not {self.original_weight}")

    def expand(self, query: Query, feedback: Sequence[tuple[float, StoredDoc]]) -> Query:
        """``query`` with the relevance model's words as weighted expansions.

        ``feedback``: (BM25 score, document) of the first search's best documents, best
        first. Weights are relative to one occurrence of an original term, as
        :attr:`Query.expansions` defines them: an expansion word with relevance-model
        probability p weighs (1 − λ) p against λ / |q| for each query term.
        """
        query_terms = sum(len(analysed(t)) for t in (*query.terms, *query.phrases))
        docs = [(score, doc) for score, doc in feedback[: self.feedback_docs] if score > 0.0]
        if not query_terms or not docs or self.original_weight >= 1.0:
            return query
        model = self.relevance_model(docs)
        if not model:
            return query
        scale = (1.0 - self.original_weight) / self.original_weight * query_terms
        added = tuple((word, scale * p) for word, p in model)
        return replace(query, expansions=query.expansions + added)

    def relevance_model(self, docs: Sequence[tuple[float, StoredDoc]]) -> list[tuple[str, float]]:
        """The ``feedback_terms`` most probable words, as (a surface word, probability) pairs.

        Words are counted by stem (as the index scores them) and handed on as the most
        frequent surface form of the stem, so the shards' analyser turns each back into
        exactly that stem."""
        total_score = sum(score for score, _ in docs)
        votes: dict[str, float] = {}
        surfaces: dict[str, Counter[str]] = {}
        for score, doc in docs:
            counts, length = _stem_counts(doc, self.body_chars, surfaces)
            if not length:
                continue
            weight = score / total_score
            for term, count in counts.items():
                votes[term] = votes.get(term, 0.0) + weight * count / length
        # Ties broken by the stem, so the expansion does not depend on document order.
        best = heapq.nsmallest(self.feedback_terms, votes.items(), key=lambda kv: (-kv[1], kv[0]))
        norm = sum(p for _, p in best)
        if norm <= 0.0 or not math.isfinite(norm):
            return []
        return [(surfaces[term].most_common(1)[0][0], p / norm) for term, p in best]


def _stem_counts(
    doc: StoredDoc, body_chars: int, surfaces: dict[str, Counter[str]]
) -> tuple[Counter[str], int]:
    """Stem counts of the document's title, headings and body prefix, and their total."""
    text = " ".join((doc.title, *doc.headings, doc.body[:body_chars]))
    counts: Counter[str] = Counter()
    for word in words(text):
        if word in ENGLISH_STOPWORDS or word.isdigit() or len(word) < 2:
            continue
        term = stem(word)
        counts[term] += 1
        surfaces.setdefault(term, Counter())[word] += 1
    return counts, sum(counts.values())
