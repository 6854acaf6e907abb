"""``trawl run`` and ``trawl serve`` as processes over a loopback web that keeps changing.

Every change becomes searchable (new text found, old text gone) and every deletion
disappears within the lag; search answers throughout; SIGKILL of ``trawl run`` at
random moments loses and duplicates nothing; after compaction the results equal a
full rebuild of the same docstore.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from core.crawldir import CrawlDir
from core.deletions import DeletionLog, is_removed
from core.docstore import DocStore
from retrieval.index.build import build_index
from retrieval.index.docs_source import crawled_documents
from retrieval.index.incremental import IncrementalIndexer
from retrieval.index.lexical import LexicalShard
from retrieval.index.root import IndexRoot
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.crawl.web import HostServer, Site, html_page

LAG_S = 30.0
WORDS = ["amber", "basalt", "cobalt", "dahlia", "ember", "fjord", "garnet", "heron", "indigo", "jasper"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChangingWeb:
    """Pages ``/p<i>`` linked from ``/``; each holds its own code word, changed by the test."""

    def __init__(self) -> None:
        self.words: dict[int, str] = {i: f"{w}{i}x" for i, w in enumerate(WORDS)}
        self.site = Site()
        self.site.routes["/"] = self._home
        for i in range(40):
            self.site.routes[f"/p{i}"] = self._page_handler(i)

    async def _home(self, request: object) -> object:
        from starlette.responses import HTMLResponse

        links = [(f"/p{i}", f"page {i}") for i in sorted(self.words)]
        return HTMLResponse(html_page("Home", "Index of the changing web.", links=links))

    def _page_handler(self, i: int) -> Callable[[object], object]:
        async def handler(request: object) -> object:
            from starlette.responses import HTMLResponse, Response

            word = self.words.get(i)
            if word is None:
                return Response("gone", status_code=404)
            body = f"This page talks about {word} and ordinary filler text for page number {i}."
            return HTMLResponse(html_page(f"Page {i}", body))

        return handler


@pytest.fixture
def web() -> Iterator[tuple[ChangingWeb, HostServer]]:
    changing = ChangingWeb()
    server = HostServer(changing.site, "127.0.0.23").start()
    yield changing, server
    server.stop()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRAWL_CRAWL__RECRAWL_INITIAL_S="1",
        TRAWL_CRAWL__RECRAWL_MIN_S="0.5",
        TRAWL_CRAWL__RECRAWL_MAX_S="1",
        # Killed about a second after each start, the runs may all die holding the same URL
        # (the first in the queue): each counts an attempt, and a page ends failed after
        # max_retries of them; the recrawl tries it again this long after.
        TRAWL_CRAWL__FAILED_RETRY_S="1",
        TRAWL_CRAWL__FLUSH_INTERVAL_S="0.2",
        TRAWL_CRAWL__PARSE_WORKERS="1",
        TRAWL_SEARCH__USE_VECTORS="false",
        TRAWL_API__RATE_LIMIT_PER_S="0",
    )
    return env


def _trawl(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait(predicate: Callable[[], bool], timeout: float, what: str, explain: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what} {explain()}")


def _unfinished_urls(data: Path) -> str:
    """The frontier's URLs not done, for a failure message: what the crawl is stuck on."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(CrawlDir(data).db, timeout=10)) as conn:
        query = "SELECT url, status, outcome, retries FROM urls WHERE status != 'done'"
        rows = conn.execute(query).fetchall()
    return f"(frontier URLs not done: {rows})"


class Searcher:
    def __init__(self, port: int) -> None:
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        self.errors: list[str] = []

    def urls(self, query: str) -> set[str]:
        response = self.client.get("/v1/search", params={"q": query, "size": 50, "ranker": "bm25"})
        if response.status_code != 200:
            self.errors.append(f"{response.status_code} {response.text[:200]}")
            return set()
        return {hit["url"] for hit in response.json()["results"]}


def _live_doc_ids(data: Path) -> set[int]:
    removed = DeletionLog(CrawlDir(data).deletions).latest()
    return {
        int(d.doc_id)
        for d in DocStore(CrawlDir(data).docs).iter_documents()
        if not is_removed(d, removed.get(d.doc_id))
    }


def _indexed_doc_ids(index: Path) -> list[int]:
    root = IndexRoot(index)
    gen = root.path_of(root.current() or "")
    return [int(d.doc_id) for d in LexicalShard(gen / "shard-0000" / "lexical").iter_stored()]


def test_changes_reach_search_and_sigkill_loses_nothing(
    web: tuple[ChangingWeb, HostServer], tmp_path: Path
) -> None:
    changing, server = web
    data, index = tmp_path / "crawl", tmp_path / "index"
    run_args = ("run", server.url("/"), "--data", str(data), "--index", str(index), "--allow-loopback",
                "--delay-s", "0", "--poll-s", "0.3", "--compact-every-s", "0")  # fmt: skip
    runner = _trawl(*run_args)
    serve = None
    try:
        _wait(lambda: IndexRoot(index).current() is not None, 60, "a first generation")
        port = free_port()
        serve = _trawl("serve", "--index", str(index), "--port", str(port))
        search = Searcher(port)

        def up() -> bool:
            try:
                return search.client.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        _wait(up, 60, "trawl serve answering")
        url = server.url
        _wait(lambda: url("/p3") in search.urls("dahlia3x"), LAG_S, "the first pages searchable")

        # Change one page, add one, delete one: all visible within the lag.
        changing.words[1] = "quokka1x"
        changing.words[12] = "zircon12x"
        del changing.words[2]
        started = time.monotonic()
        _wait(lambda: url("/p1") in search.urls("quokka1x"), LAG_S, "changed text found")
        _wait(lambda: url("/p1") not in search.urls("basalt1x"), LAG_S, "old text gone")
        _wait(lambda: url("/p12") in search.urls("zircon12x"), LAG_S, "new page found")
        _wait(lambda: url("/p2") not in search.urls("cobalt2x"), LAG_S, "deleted page gone")
        assert time.monotonic() - started < LAG_S

        # SIGKILL at random moments while the web keeps changing; restart each time.
        rng = random.Random(18)
        for kill in range(5):
            changing.words[20 + kill] = f"kill{kill}word"
            changing.words[5] = f"ember{kill}k"
            time.sleep(rng.uniform(0.3, 2.5))
            runner.send_signal(signal.SIGKILL)
            runner.wait(timeout=30)
            runner = _trawl(*run_args)
        for kill in range(5):
            _wait(
                lambda k=kill: url(f"/p{20 + k}") in search.urls(f"kill{k}word"),
                LAG_S,
                f"page {20 + kill}",
                lambda: f"(trawl run exit status: {runner.poll()}) {_unfinished_urls(data)}",
            )
        _wait(lambda: url("/p5") in search.urls("ember4k"), LAG_S, "last change after the kills")
        # Every serving worker follows CURRENT on its own: wait for the one that answers.
        _wait(lambda: url("/p5") not in search.urls("ember3k"), LAG_S, "the change before it gone")

        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 0, runner.stderr.read().decode() if runner.stderr else ""
        assert search.errors == []

        # Nothing lost, nothing twice: the index holds exactly the live documents.
        indexed = _indexed_doc_ids(index)
        assert len(indexed) == len(set(indexed))
        assert set(indexed) == _live_doc_ids(data)

        # Compaction converges to a full rebuild of the same docstore.
        IncrementalIndexer(data, index).compact()
        build_index(crawled_documents(data), tmp_path / "rebuilt")
        compacted, rebuilt = SearchService.open(index), SearchService.open(tmp_path / "rebuilt")
        for query in ["page", "quokka1x", "filler text", "ember4k", "index"]:
            left = [
                (h.doc_id, round(h.score, 4)) for h in compacted.search(SearchRequest(query, size=20)).hits
            ]
            right = [
                (h.doc_id, round(h.score, 4)) for h in rebuilt.search(SearchRequest(query, size=20)).hits
            ]
            assert left == right, query
    finally:
        for proc in (runner, serve):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
