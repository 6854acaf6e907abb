"""Frequent past queries, from the impression log every served search writes (:mod:`online.logs`).

Search-as-you-type offers what other people searched. A query someone typed may be private,
so one is offered only once ``min_visitors`` distinct visitors (the experiment unit id: the
``trawl_uid`` cookie or ``X-Trawl-User``) searched it, and only when it found something
(first pages with results count). Queries with operators (``site:``, ``-term``, quotes) are
left out: they are tools, not topics. Read newest part first, at most ``max_rows`` rows, so
a long-running log costs a bounded read; rows still in the writer's buffer are not seen.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from online.logs import IMPRESSION_SCHEMA, part_files

logger = logging.getLogger(__name__)

MIN_VISITORS = 3
MAX_ROWS = 1_000_000
MAX_QUERY_CHARS = 100
COLUMNS = ["query", "unit_id", "page", "doc_ids"]


def is_topic(query: str) -> bool:
    """A plain query: not too long, no operator."""
    if not query or len(query) > MAX_QUERY_CHARS or '"' in query:
        return False
    return not any(":" in word or word.startswith("-") for word in query.split())


def frequent_queries(
    impressions: Path, *, min_visitors: int = MIN_VISITORS, max_rows: int = MAX_ROWS
) -> list[tuple[str, int]]:
    """``(query, visitors)`` of queries ``min_visitors`` or more visitors searched, most first.

    The query is shown as most of its searchers wrote it (after collapsing spaces); the
    count is of distinct visitors per lowercased query (a row with no visitor counts alone).
    """
    visitors: defaultdict[str, set[str]] = defaultdict(set)
    spellings: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = 0
    for part in reversed(part_files(impressions)):
        try:
            table = pq.read_table(part, columns=COLUMNS, schema=IMPRESSION_SCHEMA)
        except (OSError, ValueError) as exc:
            logger.warning("query log part %s unreadable, skipped: %s", part, exc)
            continue
        shown = pc.and_(pc.equal(table["page"], 1), pc.greater(pc.list_value_length(table["doc_ids"]), 0))
        table = table.filter(pc.fill_null(shown, False))
        for i, (query, unit) in enumerate(
            zip(table["query"].to_pylist(), table["unit_id"].to_pylist(), strict=True)
        ):
            text = " ".join((query or "").split())
            if is_topic(text):
                key = text.lower()
                visitors[key].add(unit or f"\0{part.name}:{i}")
                spellings[key][text] += 1
        rows += table.num_rows
        if rows >= max_rows:
            break
    out = [
        (max(spellings[key].items(), key=lambda item: (item[1], item[0]))[0], len(units))
        for key, units in visitors.items()
        if len(units) >= min_visitors
    ]
    out.sort(key=lambda item: (-item[1], item[0]))
    return out
