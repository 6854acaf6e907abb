"""Bugs found by the API and online-experiments review, each pinned through the real app."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.errors import ConfigError
from core.settings import Settings
from online.logs import CLICK_SCHEMA, IMPRESSION_SCHEMA, LogPaths, ParquetLog, read_log
from tests.fixtures.docs import numbered_index

KEY = "review-admin-key"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Thirty documents that all match ``alpha``: three pages of ten."""
    bodies = [f"alpha beta word{i}" for i in range(30)]
    return numbered_index(tmp_path_factory.mktemp("review-findings") / "index", bodies)


def _with_experiments(tmp_path: Path) -> Settings:
    """Settings whose experiments come from ``tmp_path/experiments.toml`` (no rate limit, no vectors)."""
    return Settings.model_validate(
        {
            "api": {"rate_limit_per_s": 0},
            "search": {"use_vectors": False},
            "experiments": {
                "experiments_file": str(tmp_path / "experiments.toml"),
                "log_dir": str(tmp_path / "logs"),
            },
        }
    )


def _interleaving(tmp_path: Path) -> Settings:
    (tmp_path / "experiments.toml").write_text(
        "[experiments.tdi]\n"
        'mode = "interleave"\n'
        'salt = "s"\n'
        'variants = [{ name = "a", ranker = "bm25" }, { name = "b", ranker = "bm25-rm3" }]\n'
    )
    return _with_experiments(tmp_path)


@pytest.fixture(scope="module")
def apart_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Thirty ``alpha`` documents that bm25 and bm25-rm3 rank apart: RM3 learns ``gamma`` from
    the ten best and lifts the ten with the most of it (20-29) above ten bm25 prefers (10-19)."""

    def body(i: int) -> str:
        return "alpha alpha gamma" if i < 10 else "alpha" if i < 20 else "alpha gamma gamma gamma gamma"

    bodies = [f"{body(i)} word{i}" for i in range(30)]
    return numbered_index(tmp_path_factory.mktemp("ranked-apart") / "index", bodies)


def test_pages_of_an_interleaving_experiment_continue_one_merged_list(
    tmp_path: Path, apart_index: Path
) -> None:
    """Page 2 showed ranker A's page 2: documents of B's page 1 again, and never A's own it
    had displaced. Now the pages are one merged list: nothing twice, nothing skipped, and
    every page logged with its teams (a page without them counted as a tie)."""
    settings = _interleaving(tmp_path)
    with TestClient(create_app(settings, index_dir=apart_index)) as client:
        headers = {"X-Trawl-User": "user-1"}
        pages = [
            client.get("/v1/search", params={"q": "alpha", "page": str(n)}, headers=headers)
            for n in (1, 2, 3)
        ]
        again = client.get("/v1/search", params={"q": "alpha", "page": "2"}, headers=headers)
        bm25 = client.get("/v1/search", params={"q": "alpha", "size": "30", "ranker": "bm25"}).json()
        rm3 = client.get("/v1/search", params={"q": "alpha", "size": "30", "ranker": "bm25-rm3"}).json()
    assert [r["doc_id"] for r in bm25["results"][:20]] != [r["doc_id"] for r in rm3["results"][:20]]
    assert {p.status_code for p in pages} == {200}
    shown = [[r["doc_id"] for r in p.json()["results"]] for p in pages]
    assert [r["doc_id"] for r in again.json()["results"]] == shown[1]  # the same list on a reload
    every = [d for page in shown for d in page]
    assert len(every) == len(set(every)) == 30  # all thirty matches, each once
    assert set(every) == {r["doc_id"] for r in bm25["results"]}
    rows = {
        r["impression_id"]: r
        for r in read_log(LogPaths.under(tmp_path / "logs").impressions, IMPRESSION_SCHEMA).to_pylist()
    }
    for page in pages:
        row = rows[page.headers["X-Trawl-Impression"]]
        assert row["experiment"] == "tdi" and len(row["teams"]) == len(row["doc_ids"]) == 10


def test_a_cursor_under_interleaving_continues_ranker_a_outside_the_experiment(
    tmp_path: Path, index_dir: Path
) -> None:
    """A cursor continues one ranker's list (ranker A's): nothing is interleaved on it, so it
    must not count as a tie."""
    settings = _interleaving(tmp_path)
    with TestClient(create_app(settings, index_dir=index_dir)) as client:
        headers = {"X-Trawl-User": "user-1"}
        first = client.get("/v1/search", params={"q": "alpha"}, headers=headers)
        second = client.get("/v1/search", params={"cursor": first.json()["next_cursor"]}, headers=headers)
    assert first.status_code == second.status_code == 200
    rows = {
        r["impression_id"]: r
        for r in read_log(LogPaths.under(tmp_path / "logs").impressions, IMPRESSION_SCHEMA).to_pylist()
    }
    page_1 = rows[first.headers["X-Trawl-Impression"]]
    page_2 = rows[second.headers["X-Trawl-Impression"]]
    assert page_1["experiment"] == "tdi" and len(page_1["teams"]) == len(page_1["doc_ids"])
    assert page_2["experiment"] == "" and page_2["teams"] == []


def test_seeds_posted_to_the_api_reach_the_configured_frontier(
    tmp_path: Path, index_dir: Path, crawl_store: Callable[[], Any]
) -> None:
    """On a PostgreSQL frontier, seeds went into a SQLite file that no worker reads."""
    settings = Settings.model_validate(
        {
            "api": {"admin_api_key": KEY, "crawl_data": str(tmp_path), "rate_limit_per_s": 0},
            "crawl": {"frontier_url": crawl_store.frontier_url},  # type: ignore[attr-defined]
            "search": {"use_vectors": False},
        }
    )
    with TestClient(create_app(settings, index_dir=index_dir)) as client:
        answer = client.post(
            "/v1/crawl/seeds", json={"urls": ["http://seed.test/start"]}, headers={"X-API-Key": KEY}
        )
    assert answer.status_code == 200
    assert answer.json()["queued"] == ["http://seed.test/start"]
    assert crawl_store().exists("http://seed.test/start")


def test_an_oversized_body_without_content_length_is_413(tmp_path: Path, index_dir: Path) -> None:
    """A chunked body over the limit got FastAPI's 400 "error parsing the body", not 413."""
    settings = Settings.model_validate(
        {
            "api": {"admin_api_key": KEY, "rate_limit_per_s": 0, "max_request_bytes": 1024},
            "search": {"use_vectors": False},
            "experiments": {"log_dir": str(tmp_path / "logs")},
        }
    )

    def chunked() -> Iterator[bytes]:  # a generator: sent without Content-Length
        yield b'{"generation": "' + b"g" * 4096 + b'"}'

    with TestClient(create_app(settings, index_dir=index_dir)) as client:
        for path in ("/v1/click", "/v1/index/publish"):
            answer = client.post(
                path,
                content=chunked(),
                headers={"content-type": "application/json", "X-API-Key": KEY},
            )
            assert answer.status_code == 413, (path, answer.text)
            assert answer.json()["error"] == "too_large"


class _CloseOnFirstAcquire:
    """A lock that, the first time it is taken, lets ``close`` run to the end first.

    It replays, deterministically, a request thread appending a row just as the service
    shuts down: past ``append``'s closed check, before it takes the lock.
    """

    def __init__(self, log: ParquetLog) -> None:
        self.log = log
        self.inner = threading.Lock()
        self.armed = True

    def __enter__(self) -> None:
        if self.armed:
            self.armed = False
            closer = threading.Thread(target=self.log.close)
            closer.start()
            closer.join()
        self.inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


def test_a_row_appended_while_the_log_closes_is_written(tmp_path: Path) -> None:
    """The row passed the closed check, close flushed an empty buffer, and the row was left behind."""
    log = ParquetLog(tmp_path / "clicks", CLICK_SCHEMA, max_buffer_rows=100, flush_interval_s=None)
    log._lock = _CloseOnFirstAcquire(log)  # type: ignore[assignment]
    row = {
        "click_id": "c" * 32,
        "impression_id": "i" * 32,
        "ts": datetime.now(UTC),
        "doc_id": 1,
        "position": 1,
        "experiment": "",
        "variant": "",
        "team": "",
    }
    log.append(row)
    assert read_log(tmp_path / "clicks", CLICK_SCHEMA).num_rows == 1


@pytest.mark.parametrize("url", ["http://[::1/page", "https://[not-an-address]:80/"])
def test_an_unparsable_indexnow_url_is_400(tmp_path: Path, index_dir: Path, url: str) -> None:
    """``urlsplit`` raises ValueError on a broken IPv6 host: the GET answered 500."""
    settings = Settings.model_validate(
        {"api": {"crawl_data": str(tmp_path), "rate_limit_per_s": 0}, "search": {"use_vectors": False}}
    )
    with TestClient(create_app(settings, index_dir=index_dir), raise_server_exceptions=False) as client:
        answer = client.get("/indexnow", params={"url": url, "key": "a1b2c3d4-key"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "bad_parameter"


def test_an_experiment_naming_an_unknown_ranker_stops_the_start(tmp_path: Path, index_dir: Path) -> None:
    """Unchecked, every enrolled user's search was refused 400 "Unknown ranker" instead."""
    (tmp_path / "experiments.toml").write_text(
        "[experiments.typo]\n"
        'salt = "s"\n'
        'variants = [{ name = "a", ranker = "bm25" }, { name = "b", ranker = "bm25-typo" }]\n'
    )
    settings = _with_experiments(tmp_path)
    with (
        pytest.raises(ConfigError, match="bm25-typo"),
        TestClient(create_app(settings, index_dir=index_dir)) as client,
    ):
        client.get("/v1/search", params={"q": "alpha"}, headers={"X-Trawl-User": "user-1"})
