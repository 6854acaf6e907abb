"""``GET /v1/crawl/status`` reports what ``trawl crawl status`` does, on either frontier backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings
from crawl.state.fleet import crawl_status
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate
from tests.fixtures.docs import numbered_index

KEY = "crawl-admin-key"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The app serves an index; the crawl routes do not read it, so three documents do."""
    bodies = [f"crawl status page number {i}" for i in range(3)]
    return numbered_index(tmp_path_factory.mktemp("crawl-status") / "index", bodies)


def test_status_aggregates_the_crawl(tmp_path: Path, index_dir: Path, crawl_store: Callable[[], Any]) -> None:
    now = time.time()
    db = crawl_store()
    urls = [f"http://a.test/{i}" for i in range(5)]
    db.apply(inserts=[NewUrl(u, "a.test", 0, 1.0) for u in urls], leases=[], updates=[], hosts=[], now=now)
    failed = UrlUpdate(urls[0], UrlStatus.FAILED, Outcome.HTTP, 503, fetched=True, last_fetch=now)
    # One page's refetch has been due for an hour; another's comes tomorrow.
    due = UrlUpdate(urls[1], UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=now - 7200,
                    next_fetch=now - 3600)  # fmt: skip
    later = UrlUpdate(urls[4], UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=now,
                      next_fetch=now + 86_400)  # fmt: skip
    db.apply(inserts=[], leases=[], updates=[failed, due, later], hosts=[], now=now)
    if crawl_store.frontier_url:  # type: ignore[attr-defined]
        db.heartbeat("w-1", now, {})
    db.close()
    frontier = crawl_store.frontier_url  # type: ignore[attr-defined]
    settings = Settings.model_validate(
        {
            "api": {"admin_api_key": KEY, "crawl_data": str(tmp_path), "rate_limit_per_s": 0},
            "crawl": {"frontier_url": frontier},
            "search": {"use_vectors": False},
        }
    )
    with TestClient(create_app(settings, index_dir=index_dir)) as client:
        assert client.get("/v1/crawl/status").status_code == 401
        body = client.get("/v1/crawl/status", headers={"X-API-Key": KEY}).json()
    expected = crawl_status(tmp_path, frontier)
    moving = ("workers", "pages_per_s", "recrawl_oldest_overdue_s")  # they change with the clock
    assert {k: body[k] for k in expected if k not in moving} == {
        k: v for k, v in expected.items() if k not in moving
    }
    assert abs(body["recrawl_oldest_overdue_s"] - expected["recrawl_oldest_overdue_s"]) < 30
    assert (body["urls"], body["backlog"], body["done"], body["errors"]) == (5, 2, 2, {"http 503": 1})
    assert body["recrawl_overdue"] == 1 and 3600 <= body["recrawl_oldest_overdue_s"] < 3660
    assert body["backend"] == ("postgresql" if frontier else "sqlite")
    if frontier:
        assert body["workers_alive"] == 1
    # The fleet's hosts are in its frontier (they read the SQLite file only, and were empty).
    assert [h["host"] for h in body["hosts"]] == ["a.test"]


def test_inspect_and_hosts_read_the_configured_frontier(
    tmp_path: Path, index_dir: Path, crawl_store: Callable[[], Any]
) -> None:
    """On a fleet the crawl's state is in PostgreSQL: `/v1/inspect`, `/v1/hosts` and the hosts
    page read it there (they read the data directory's SQLite file, and knew nothing)."""
    now = time.time()
    url = "http://b.test/page"
    db = crawl_store()
    db.apply(inserts=[NewUrl(url, "b.test", 0, 1.0)], leases=[], updates=[], hosts=[], now=now)
    done = UrlUpdate(url, UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=now)
    db.apply(inserts=[], leases=[], updates=[done], hosts=[], now=now)
    db.close()
    frontier = crawl_store.frontier_url  # type: ignore[attr-defined]
    assert (tmp_path / "frontier.sqlite").exists() == (frontier is None)
    settings = Settings.model_validate(
        {
            "api": {"crawl_data": str(tmp_path), "rate_limit_per_s": 0},
            "crawl": {"frontier_url": frontier},
            "search": {"use_vectors": False},
        }
    )
    with TestClient(create_app(settings, index_dir=index_dir)) as client:
        report = client.get("/v1/inspect", params={"url": url}).json()
        hosts = client.get("/v1/hosts").json()
        page = client.get("/hosts").text
    assert report["state"]["status"] == "done"
    assert [h["outcome"] for h in report["history"]] == ["indexed"]
    assert [(h["host"], h["done"], h["indexed"]) for h in hosts] == [("b.test", 1, 1)]
    assert "b.test" in page
