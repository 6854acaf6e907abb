"""Generations through the API: publish while queries run, rollback, pinned cursors, admin auth,
rate limiting and size limits. A real uvicorn server on 127.0.0.1 over a real index root."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from core.settings import Settings
from retrieval.index.root import IndexRoot
from tests.conftest import ServerThread
from training.datasets import BeirDataset

KEY = "s3cret-admin-key"


@pytest.fixture(scope="module")
def root(eval_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> IndexRoot:
    root = IndexRoot(tmp_path_factory.mktemp("gen") / "index")
    docs = list(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 300))
    root.publish(root.build(docs, shards=2))
    return root


@pytest.fixture(scope="module")
def server(root: IndexRoot) -> Iterator[ServerThread]:
    settings = Settings.model_validate(
        {"api": {"admin_api_key": KEY, "rate_limit_per_s": 0}, "search": {"use_vectors": False}}
    )
    with ServerThread(create_app(settings, index_dir=root.root)) as running:
        yield running


def test_publish_during_queries_loses_nothing_and_rollback_restores(
    root: IndexRoot, server: ServerThread, eval_dir: Path
) -> None:
    client = httpx.Client(base_url=server.url, timeout=10)
    first = root.current()
    before = client.get("/v1/search", params={"q": "flow", "size": 20}).json()
    assert before["generation"] == first
    cursor_before = client.get("/v1/search", params={"q": "boundary layer flow", "size": 5}).json()
    new_docs = list(itertools.islice(BeirDataset.open(eval_dir / "cisi").iter_documents(), 300))
    second = root.build(new_docs, shards=3)

    statuses: list[int] = []
    generations: set[str] = set()
    stop = threading.Event()

    def hammer() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            while not stop.is_set():
                r = c.get("/v1/search", params={"q": "flow information"})
                statuses.append(r.status_code)
                if r.status_code == 200:
                    generations.add(r.json()["generation"])

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 30
        while len(statuses) < count and time.monotonic() < deadline:
            time.sleep(0.01)

    workers = [threading.Thread(target=hammer) for _ in range(3)]
    for w in workers:
        w.start()
    wait_for(6)  # queries are in flight before the publish…
    unauthorized = client.post("/v1/index/publish", json={"generation": second})
    assert unauthorized.status_code == 401 and unauthorized.json()["error"] == "unauthorized"
    published = client.post("/v1/index/publish", json={"generation": second}, headers={"X-API-Key": KEY})
    assert published.json() == {"serving": second}
    after = client.get("/v1/search", params={"q": "flow", "size": 20}).json()
    wait_for(len(statuses) + 6)  # …and after it
    stop.set()
    for w in workers:
        w.join()
    assert len(statuses) >= 12 and set(statuses) == {200}
    assert after["generation"] == second and generations == {first, second}

    # A cursor taken before the publish keeps reading its generation, with no repeats.
    seen = [r["doc_id"] for r in cursor_before["results"]]
    cursor = cursor_before["next_cursor"]
    while cursor:
        page = client.get("/v1/search", params={"cursor": cursor}).json()
        assert page["generation"] == first
        seen += [r["doc_id"] for r in page["results"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == cursor_before["total"]

    rolled = client.post("/v1/index/rollback", headers={"X-API-Key": KEY})
    assert rolled.json() == {"serving": first}
    again = client.get("/v1/search", params={"q": "flow", "size": 20}).json()
    assert [r["doc_id"] for r in again["results"]] == [r["doc_id"] for r in before["results"]]
    # The caller's mistakes are 4xx, not "index unavailable" (they were 503).
    bad = client.post("/v1/index/publish", json={"generation": "nope"}, headers={"X-API-Key": KEY})
    assert (bad.status_code, bad.json()["error"]) == (404, "unknown_generation")
    assert "does not exist" in bad.json()["detail"]
    malformed = client.post("/v1/index/publish", json={"generation": "../x"}, headers={"X-API-Key": KEY})
    assert (malformed.status_code, malformed.json()["error"]) == (400, "bad_parameter")
    assert client.get("/v1/search", params={"q": "flow"}).json()["generation"] == first


def test_a_rollback_with_nothing_earlier_is_a_conflict(
    eval_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = IndexRoot(tmp_path_factory.mktemp("once") / "index")
    docs = list(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 20))
    only = root.build(docs, shards=1)
    root.publish(only)
    settings = Settings.model_validate(
        {"api": {"admin_api_key": KEY, "rate_limit_per_s": 0}, "search": {"use_vectors": False}}
    )
    with ServerThread(create_app(settings, index_dir=root.root)) as running:
        r = httpx.post(f"{running.url}/v1/index/rollback", headers={"X-API-Key": KEY})
        serving = httpx.get(f"{running.url}/v1/search", params={"q": "flow"}).json()["generation"]
    assert (r.status_code, r.json()["error"]) == (409, "nothing_to_roll_back")
    assert serving == only


def test_admin_is_off_without_a_key(root: IndexRoot) -> None:
    settings = Settings.model_validate({"search": {"use_vectors": False}})
    with ServerThread(create_app(settings, index_dir=root.root)) as running:
        r = httpx.post(f"{running.url}/v1/index/rollback", headers={"X-API-Key": "anything"})
        assert (r.status_code, r.json()["error"]) == (403, "forbidden")


def test_rate_limit_and_size_limits(root: IndexRoot) -> None:
    settings = Settings.model_validate(
        {
            "api": {"rate_limit_per_s": 1, "rate_limit_burst": 5, "max_request_bytes": 2048},
            "search": {"use_vectors": False},
        }
    )
    with (
        ServerThread(create_app(settings, index_dir=root.root)) as running,
        httpx.Client(base_url=running.url) as c,
    ):
        codes = [c.get("/v1/search", params={"q": "flow"}).status_code for _ in range(8)]
        assert codes[:5] == [200] * 5 and 429 in codes[5:]
        limited = c.get("/v1/search", params={"q": "flow"})
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert c.get("/healthz").status_code == 200  # health checks are never limited
        assert c.get("/v1/search", params={"q": "x" * 5000}).status_code == 414
        big = c.post(
            "/v1/click", content=b"{" + b" " * 10_000 + b"}", headers={"content-type": "application/json"}
        )
        assert big.status_code == 413
