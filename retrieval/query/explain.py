"""BM25 of one result broken down by query term and by field, for the explain page.

The ranked list carries one BM25 per candidate (and, for the rankers that need it,
one per field). A person asking "why this result" wants to see which words matched
where: each positive term and phrase of the query is scored alone on each field of
the document, with the same collection statistics as the query (shard-comparable
BM25), and weighted by the field's boost, so the cells add up to (about) the total
BM25 the ranker used. A short query's stopwords, and the word pairs holding them, get a
``captions`` cell (titles and headings with every word; :mod:`retrieval.text.stopword_search`).
A demoted page's cells hold its quality, as its BM25 does (``retrieval.index.page_quality``).
Only shards opened in this process can be asked; for a remote shard the breakdown is empty.
"""

from __future__ import annotations

import dataclasses
import time

from core.types import DocId, Query
from retrieval.index.lexical_query import analysed, scoring_terms
from retrieval.index.lexical_schema import TEXT_FIELDS
from retrieval.query.broker import Broker
from retrieval.query.shard_backend import LocalShard
from retrieval.text.stopword_search import CAPTIONS_FIELD

__all__ = ["bm25_breakdown"]

_STATS_DEADLINE_S = 2.0


def bm25_breakdown(broker: Broker, query: Query, doc_id: DocId, shard_id: int) -> dict[str, dict[str, float]]:
    """``{term or "phrase": {field: boost × BM25}}`` of ``doc_id`` for each positive part of ``query``.

    Fields where the part scores nothing are left out; a part that matches no field
    is left out too.
    """
    replicas = broker.shards[shard_id] if 0 <= shard_id < len(broker.shards) else []
    shard = next((r for r in replicas if isinstance(r, LocalShard) and r.failed is None), None)
    if shard is None:
        return {}  # remote, or taken out for a damaged file
    scored = scoring_terms(query)  # a reader's function words score in the captions only
    alone: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
        ((t,), ()) for t in query.terms if any(a in scored for a in analysed(t))
    ]
    alone += [((), (p,)) for p in query.phrases]
    parts = [
        (
            terms[0] if terms else f'"{phrases[0]}"',
            dataclasses.replace(query, terms=terms, phrases=phrases, expansions=()),
        )
        for terms, phrases in alone
    ]
    boosts = dict(shard.lexical.boosts.items())
    out: dict[str, dict[str, float]] = {}
    for label, part in parts:
        stats = broker.stats(part, time.perf_counter() + _STATS_DEADLINE_S)
        scores = shard.lexical.field_scores(part, [doc_id], stats=stats)
        cells = {
            f: boosts.get(f, 1.0) * scores[f][doc_id]  # the page's quality is in them, as in its BM25
            for f in TEXT_FIELDS
            if scores.get(f, {}).get(doc_id, 0.0) > 0.0
        }
        if cells:
            out[label] = cells
    # A short query's stopwords score in titles and headings only (retrieval.text.stopword_search).
    stats = broker.stats(query, time.perf_counter() + _STATS_DEADLINE_S)
    for label, score in shard.lexical.caption_scores(query, doc_id, stats=stats).items():
        out.setdefault(label, {})[CAPTIONS_FIELD] = score
    return out
