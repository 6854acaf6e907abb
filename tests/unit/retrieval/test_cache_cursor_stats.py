from __future__ import annotations

import time

import pytest

from core.errors import QueryError
from retrieval.cache import TtlLruCache
from retrieval.cursor import Cursor
from retrieval.stats import bm25_idf, plan_ballast


def test_cache_is_lru_and_expires() -> None:
    cache: TtlLruCache[str] = TtlLruCache(max_entries=2, ttl_s=0.05)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("c", "C")
    assert (cache.get("b"), cache.get("a"), cache.get("c")) == (None, "A", "C")
    time.sleep(0.06)
    assert cache.get("a") is None
    assert (cache.hits, cache.misses) == (3, 2)


def test_cursor_round_trip_and_garbage() -> None:
    cursor = Cursor("g1", 'heat "flow"', "hybrid", 30, 10)
    assert Cursor.decode(cursor.encode()) == cursor
    for bad in ("", "%%%", "e30", Cursor("g", "q", "r", -1, 10).encode(), "x" * 9000):
        with pytest.raises(QueryError, match="cursor"):
            Cursor.decode(bad)


def test_ballast_gives_every_shard_the_collection_averages() -> None:
    counts = [90, 110, 100]
    tokens = [{"body": 9_000, "title": 400}, {"body": 13_000, "title": 300}, {"body": 8_000, "title": 500}]
    plan = plan_ballast(counts, tokens)
    n = plan.docs_per_shard
    for count, field_tokens, extra_docs, extra_tokens in zip(
        counts, tokens, plan.ballast_docs, plan.ballast_tokens, strict=True
    ):
        assert count + extra_docs == n and extra_docs >= 1
        for field, total in (("body", 30_000), ("title", 1_200)):
            assert (field_tokens[field] + extra_tokens[field]) / n == pytest.approx(total / 300, rel=1e-3)


def test_single_shard_needs_no_ballast_and_idf_is_lucene() -> None:
    assert plan_ballast([10], [{"body": 100}]).ballast_docs == (0,)
    assert bm25_idf(10, 1) == pytest.approx(1.9924301647)  # ln(1 + 9.5 / 1.5)
