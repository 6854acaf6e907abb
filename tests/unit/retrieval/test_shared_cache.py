"""The workers' shared response cache: what one process put, another gets, until it expires."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.settings import SearchSettings
from retrieval.query.cache import TtlLruCache
from retrieval.query.shared_cache import LayeredCache, SharedCache, open_shared_cache


def test_two_openers_of_one_file_share_entries_until_they_expire(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite"
    one: SharedCache[dict[str, int]] = SharedCache(path, max_entries=10, ttl_s=60)
    two: SharedCache[dict[str, int]] = SharedCache(path, max_entries=10, ttl_s=60)
    key = ("view-1", (("heron", 1),), 0, 10, "bm25")
    assert two.get(key) is None
    one.put(key, {"hits": 3})
    one.flush()
    assert two.get(key) == {"hits": 3}
    assert two.get(("view-2", (("heron", 1),), 0, 10, "bm25")) is None  # another generation's view
    stale: SharedCache[dict[str, int]] = SharedCache(path, max_entries=10, ttl_s=-1)
    stale.put(("old",), {"hits": 1})
    stale.flush()
    assert one.get(("old",)) is None
    two.clear()
    assert one.get(key) is None


def test_a_file_that_is_not_a_cache_is_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "responses.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    settings = SearchSettings(shared_cache_path=path)
    assert open_shared_cache(settings) is None
    assert "each worker caches alone" in caplog.text
    assert open_shared_cache(SearchSettings(shared_cache_path=tmp_path / "ok.sqlite")) is not None
    assert open_shared_cache(SearchSettings(shared_cache_path=tmp_path / "x.sqlite", cache_entries=0)) is None


def test_the_local_level_answers_first_and_takes_what_the_shared_one_had(tmp_path: Path) -> None:
    shared: SharedCache[str] = SharedCache(tmp_path / "r.sqlite", max_entries=10, ttl_s=60)
    shared.put("k", "from another worker")
    shared.flush()
    layered = LayeredCache(TtlLruCache[str](10, 60), shared)
    assert layered.get("k") == "from another worker"
    shared.clear()
    assert layered.get("k") == "from another worker"  # now held in this process
    layered.clear()
    assert layered.get("k") is None


def test_a_put_while_another_worker_holds_the_write_lock_is_written_after_it(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite"
    cache: SharedCache[str] = SharedCache(path, max_entries=10, ttl_s=60)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the other worker, mid-write
    cache.put("k", "answer")  # returns at once: the search that made it does not wait
    other.execute("COMMIT")
    cache.flush()
    assert cache.get("k") == "answer"


def test_a_trim_bounds_the_file_and_keeps_the_newest_entry(tmp_path: Path) -> None:
    cache: SharedCache[int] = SharedCache(tmp_path / "r.sqlite", max_entries=100, ttl_s=60)
    for i in range(300):  # past TRIM_EVERY_PUTS (256): one trim ran
        cache.put(("q", i), i)
    cache.flush()
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        (rows,) = db.execute("SELECT count(*) FROM responses").fetchone()
    assert 100 <= rows < 300
    assert cache.get(("q", 299)) == 299
