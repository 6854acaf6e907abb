"""The push API on a real ``trawl serve --push-data`` process, under a concurrent search load.

Pushed documents become searchable and deleted ones disappear (waited on, not timed: the
lag is measured by ``bench/bench_push.py``); no request fails meanwhile; documents whose
push was answered survive a SIGKILL of the server, and are searchable after the restart.
"""

from __future__ import annotations

import gzip
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from core.crawldir import CrawlDir
from tests.fixtures.push_service import (
    ADMIN_KEY,
    PushClient,
    build_index,
    free_port,
    log_tail,
    push_server,
    seed_corpus,
)
from tests.fixtures.waiting import wait_for

PUSHED = 200
DELETED = range(0, 40)


class SearchLoad:
    """Searches in a loop on its own connection until stopped, counting answers that are not 200."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.answers = 0
        self.failures: list[tuple[int, str]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120) as http:
            n = 0
            while not self.stop.is_set():
                query = ["meadow notes", "pushed note", "river"][n % 3]
                n += 1
                try:
                    response = http.get("/v1/search", params={"q": query})
                except httpx.HTTPError as exc:  # a failure too: counted, and the load goes on
                    self.failures.append((0, f"{type(exc).__name__}: {exc}"))
                    continue
                self.answers += 1
                if response.status_code != 200:
                    self.failures.append((response.status_code, response.text[:200]))

    def __enter__(self) -> SearchLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def pushable(tmp_path: Path) -> tuple[Path, Path]:
    data, index = tmp_path / "docs", tmp_path / "index"
    build_index(data, index, seed_corpus(tmp_path / "seed.jsonl"))
    return data, index


def test_pushed_documents_are_searchable_deleted_ones_go_and_none_is_lost_to_a_kill(
    pushable: tuple[Path, Path],
) -> None:
    data, index = pushable
    port, log = free_port(), data.parent / "serve.log"
    client = PushClient(port)
    with push_server(index, data, port, log) as server:
        with SearchLoad(port) as load:
            with ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(client.put, range(PUSHED)))
            assert [r.status_code for r in answers] == [200] * PUSHED, [
                r.text for r in answers if r.status_code != 200
            ]
            assert all(r.json()["written"] == 1 for r in answers)
            for n in range(PUSHED):
                wait_for(lambda n=n: client.findable(n), f"pushed document {n} to be found", 120)
            with ThreadPoolExecutor(4) as pool:
                assert {r.status_code for r in pool.map(client.delete, DELETED)} == {200}
            for n in DELETED:
                wait_for(
                    lambda n=n: not client.findable(n), f"deleted document {n} to leave the results", 120
                )
        # Answered pushes, then SIGKILL at once: none may be lost.
        late = range(PUSHED, PUSHED + 20)
        assert {client.put(n).status_code for n in late} == {200}
        server.kill()
        server.wait()
    assert load.answers > 0 and load.failures == [], (load.failures[:5], log_tail(log))

    with push_server(index, data, port, log):
        for n in late:
            wait_for(
                lambda n=n: client.findable(n), f"pushed document {n} to be found after the restart", 120
            )
        assert not any(client.findable(n) for n in DELETED[:5])
        assert client.findable(PUSHED - 1)
    client.close()
    with gzip.open(CrawlDir(data).docs / "w-push" / "seg-000001.ndjson.gz", "rt") as segment:
        assert json.loads(segment.readline())["external_id"].startswith("p")


def test_push_refusals_are_clear(pushable: tuple[Path, Path]) -> None:
    data, index = pushable
    port, log = free_port(), data.parent / "serve.log"
    with push_server(index, data, port, log), httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
        admin = {"X-API-Key": ADMIN_KEY}
        no_key = http.put("/v1/documents/x", json={"url": "https://a.example/", "title": "t", "body": "b"})
        assert no_key.status_code == 401 and no_key.json()["error"] == "unauthorized"
        missing = http.put("/v1/documents/x", json={"url": "https://a.example/", "title": "t"}, headers=admin)
        assert missing.status_code == 400 and missing.json() == {
            "error": "bad_document",
            "detail": 'document x: "body" is missing',
        }
        other_id = http.put(
            "/v1/documents/x", json={"id": "y", "url": "u", "title": "t", "body": "b"}, headers=admin
        )
        assert other_id.status_code == 400 and "differs" in other_id.json()["detail"]
        batch = http.post(
            "/v1/documents",
            json={"documents": [{"id": "b1", "url": "u1", "title": "t", "body": "b"}, {"url": "u2"}]},
            headers=admin,
        )
        assert batch.status_code == 400 and batch.json()["detail"].startswith('documents[1]: "id"')
