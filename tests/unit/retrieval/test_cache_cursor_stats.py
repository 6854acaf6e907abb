from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from core.errors import QueryError
from retrieval.index.collection_stats import bm25_idf, plan_ballast
from retrieval.query.cache import TtlLruCache
from retrieval.query.cursor import Cursor, CursorCodec, load_or_create_key


def test_cache_is_lru_and_expires() -> None:
    now = [100.0]
    cache: TtlLruCache[str] = TtlLruCache(max_entries=2, ttl_s=0.05, clock=lambda: now[0])
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("c", "C")
    assert (cache.get("b"), cache.get("a"), cache.get("c")) == (None, "A", "C")
    now[0] += 0.049
    assert cache.get("c") == "C"  # not yet expired
    now[0] += 0.002
    assert cache.get("a") is None
    assert (cache.hits, cache.misses) == (4, 2)


def codec(secret: bytes = b"k" * 32) -> CursorCodec:
    return CursorCodec(secret, max_size=50, max_depth=10_000)


def forged(payload: dict[str, object], secret: bytes = b"k" * 32) -> str:
    """A cursor with any payload, correctly signed: what a leaked key would allow."""
    raw = json.dumps(payload).encode()
    mac = codec(secret)._mac(str(payload["g"]), raw)
    return f"{base64.urlsafe_b64encode(raw).decode()}.{base64.urlsafe_b64encode(mac).decode()}"


def test_cursor_round_trip_and_garbage() -> None:
    cursor = Cursor("g1", 'heat "flow"', "hybrid", 30, 10)
    assert codec().decode(codec().encode(cursor)) == cursor
    unsigned = base64.urlsafe_b64encode(b'{"g":"g1","q":"x","r":"bm25","o":10,"s":10}').decode()
    for bad in ("", "%%%", "e30", "x" * 9000, unsigned, unsigned + ".AAAA"):
        with pytest.raises(QueryError, match="cursor"):
            codec().decode(bad)


def test_cursor_is_bound_to_its_key_and_generation() -> None:
    token = codec().encode(Cursor("g1", "heat", "bm25", 10, 10))
    with pytest.raises(QueryError, match="not made by this service or was altered"):
        codec(b"other" * 8).decode(token)
    payload, mac = token.split(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=="))
    for change in ({"s": 1_000_000}, {"g": "g2"}, {"o": 20}):
        raw = base64.urlsafe_b64encode(json.dumps({**data, **change}).encode()).decode()
        with pytest.raises(QueryError, match="altered"):
            codec().decode(f"{raw}.{mac}")


@pytest.mark.parametrize(
    ("o", "s", "message"),
    [
        (10, 1_000_000, "page size 1000000 is out of range"),
        (1e308, 10, "not a whole number"),
        (float("inf"), 10, "not a whole number"),
        (2**63, 10, "depth 9223372036854775808 is out of range"),
        (10**18, 10, "out of range"),
        (-10, 10, "out of range"),
        (True, 10, "not a whole number"),
        (15, 10, "not a whole number of pages"),
    ],
)
def test_signed_cursor_is_still_held_to_the_caps(o: object, s: object, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        codec().decode(forged({"g": "g1", "q": "x", "r": "bm25", "o": o, "s": s}))


def test_cursor_carries_its_filters_and_refuses_malformed_ones() -> None:
    cursor = Cursor("g1", "heat", "bm25", 10, 10, site="docs.python.org", lang=None, filetype="pdf")
    assert codec().decode(codec().encode(cursor)) == cursor
    # A cursor minted before filters travelled in it reads as unfiltered.
    assert codec().decode(forged({"g": "g1", "q": "x", "r": "bm25", "o": 10, "s": 10})).site is None
    for bad in ("docs", [1, None, None], [None, None], {"site": "x"}):
        with pytest.raises(QueryError, match="not valid"):
            codec().decode(forged({"g": "g1", "q": "x", "r": "bm25", "o": 10, "s": 10, "f": bad}))


def test_cursor_keeps_the_language_its_query_was_read_in() -> None:
    read = Cursor("g1", "Astuces pour", "bm25", 10, 10, read_as="fr")
    assert codec().decode(codec().encode(read)) == read
    # English (and a cursor minted before readings travelled) reads as no language: the same token.
    plain = Cursor("g1", "heat", "bm25", 10, 10)
    assert "l" not in json.loads(base64.urlsafe_b64decode(codec().encode(plain).split(".")[0] + "=="))
    assert codec().decode(codec().encode(plain)).read_as == ""
    for bad in (1, "f r", "x" * 9, ["fr"]):
        with pytest.raises(QueryError, match="not valid"):
            codec().decode(forged({"g": "g1", "q": "x", "r": "bm25", "o": 10, "s": 10, "l": bad}))


def test_cursor_key_is_created_once_under_the_index_root(tmp_path: Path) -> None:
    first = load_or_create_key(tmp_path)
    assert len(first) == 32 and load_or_create_key(tmp_path) == first
    assert (tmp_path / "cursor.key").stat().st_mode & 0o077 == 0


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
