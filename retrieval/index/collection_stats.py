"""Collection statistics shared by shards, so BM25 from different shards is comparable.

Tantivy scores a term with ``idf(N, df) * tf_norm(tf, dl / avgdl)`` from the statistics of
the index it runs in, so a document-partitioned shard's scores drift from those of one index
over all documents, and a merged top-k would differ from the single-index top-k. Trawl
removes both differences:

* **average field length**: at build time each shard gets a few *ballast* documents (a
  token no analysed text can produce, never returned) so that every shard has the same
  document count N' and, per field, the collection's average length (:func:`plan_ballast`);
* **idf**: at query time the broker sums each term's document frequency over the shards and
  every shard boosts its term queries by ``idf(N, df_global) / idf(N', df_local)``
  (:class:`CorpusStats`).

The result equals a single-index search up to float rounding (a test proves it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

BALLAST_TOKEN = "_ballast_"
"""Analysis splits on ``_``, so no document or query text can produce this token."""


def bm25_idf(num_docs: int, doc_freq: int) -> float:
    """Tantivy's (and Lucene's) BM25 idf."""
    return math.log(1.0 + (num_docs - doc_freq + 0.5) / (doc_freq + 0.5))


@dataclass(frozen=True, slots=True)
class BallastPlan:
    """Per shard: how many ballast documents, and how many ballast tokens per field."""

    docs_per_shard: int
    """N': every shard's document count after ballast."""
    ballast_docs: tuple[int, ...]
    ballast_tokens: tuple[dict[str, int], ...]


def plan_ballast(doc_counts: Sequence[int], field_tokens: Sequence[Mapping[str, int]]) -> BallastPlan:
    """Ballast that gives every shard the same N' and each field the collection's average length.

    N' is the smallest count at which no shard must *remove* tokens to reach the global
    average, plus one so every shard has a ballast document to carry its extra tokens.
    """
    total_docs = sum(doc_counts)
    fields = sorted({f for tokens in field_tokens for f in tokens})
    totals = {f: sum(t.get(f, 0) for t in field_tokens) for f in fields}
    if len(doc_counts) <= 1 or total_docs == 0:
        return BallastPlan(total_docs, tuple(0 for _ in doc_counts), tuple({} for _ in doc_counts))
    needed = max(doc_counts)
    for tokens in field_tokens:
        for f in fields:
            if totals[f] > 0:
                needed = max(needed, math.ceil(tokens.get(f, 0) * total_docs / totals[f]))
    n_prime = needed + 1
    ballast_docs = tuple(n_prime - n for n in doc_counts)
    ballast_tokens = tuple(
        {f: max(0, round(totals[f] * n_prime / total_docs) - tokens.get(f, 0)) for f in fields}
        for tokens in field_tokens
    )
    return BallastPlan(n_prime, ballast_docs, ballast_tokens)


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """Global N and document frequencies of the terms of one query, summed over shards."""

    num_docs: int
    doc_freq: dict[tuple[str, str], int] = field(default_factory=dict)
    """(field, term) → number of real documents containing the term in that field."""

    def idf(self, field_name: str, term: str) -> float:
        return bm25_idf(self.num_docs, self.doc_freq.get((field_name, term), 0))

    @staticmethod
    def merge(num_docs: int, parts: Sequence[Mapping[tuple[str, str], int]]) -> CorpusStats:
        merged: dict[tuple[str, str], int] = {}
        for part in parts:
            for key, value in part.items():
                merged[key] = merged.get(key, 0) + value
        return CorpusStats(num_docs, merged)
