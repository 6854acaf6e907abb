"""Three crawl workers on one PostgreSQL frontier over a recording web of five loopback hosts.

Every assertion is made from what the servers saw: one request in flight per host
across the fleet, Crawl-delay kept between workers, every reachable page fetched
exactly once; and after one worker is SIGKILLed mid-crawl, the others take over its
hosts once its leases expire, ending with the documents a one-process crawl finds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.docstore import DocStore
from crawl.state.fleet import crawl_status
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose, sleep_then

_PAGES = 8
_CRAWL_DELAY_S = 0.3
_TRAWL = str(Path(sys.executable).parent / "trawl")


def _site(index: int, homes: list[str]) -> Site:
    site = Site()
    robots = "User-agent: *\nDisallow: /private\n"
    if index == 0:
        robots += f"Crawl-delay: {_CRAWL_DELAY_S}\n"
    site.raw("/robots.txt", robots.encode(), content_type="text/plain")
    links = [(f"/p{i}", f"page {i}") for i in range(_PAGES)] + [(h, "neighbour") for h in homes]
    home = html_page(f"Home {index}", prose(index * 100), links=[*links, ("/private", "no")])

    async def gated_home(request: object) -> object:
        from starlette.responses import HTMLResponse

        while not _HOME_GATE.is_set():
            await asyncio.sleep(0.05)
        return HTMLResponse(home)

    site.handler("/")(gated_home)  # type: ignore[arg-type]
    for i in range(_PAGES):
        body = html_page(
            f"Page {index}.{i}", prose(index * 100 + i + 1), links=[(f"/p{(i + 1) % _PAGES}", "n")]
        )

        async def slow(request: object, body: str = body) -> object:
            from starlette.responses import HTMLResponse

            return await sleep_then(0.03, HTMLResponse(body))

        site.handler(f"/p{i}")(slow)  # type: ignore[arg-type]
    return site


_HOME_GATE = threading.Event()
"""Home pages wait for it; open unless a test closes it (to start its workers on an equal footing)."""
_HOME_GATE.set()


def _running(servers: list[HostServer]) -> Iterator[list[HostServer]]:
    """Start the hosts, hand them to the test, stop them after (a fixture's body)."""
    for server in servers:
        server.start()
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def web() -> Iterator[list[HostServer]]:
    servers = [HostServer(Site(), f"127.0.0.{2 + i}") for i in range(5)]
    homes = [s.url("/") for s in servers]
    for i, server in enumerate(servers):
        server.site.routes.update(_site(i, homes).routes)
    yield from _running(servers)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TRAWL_CRAWL__ALLOWED_NETWORKS='["127.0.0.0/24"]',
        TRAWL_CRAWL__MIN_DELAY_S="0.05",
        TRAWL_CRAWL__RESPONSE_TIME_FACTOR="0",
        TRAWL_CRAWL__FLUSH_INTERVAL_S="0.2",
        TRAWL_CRAWL__LEASE_S="10",
        TRAWL_CRAWL__CONCURRENCY="4",
        TRAWL_CRAWL__MAX_RETRIES="1",
        TRAWL_CRAWL__FETCH_TIMEOUT_S="2",
    )
    env.update(extra)
    return env


def _worker(web: list[HostServer], data: Path, frontier: str | None, name: str) -> subprocess.Popen[bytes]:
    argv = [_TRAWL, "crawl", *(s.url("/") for s in web), "--data", str(data), "--no-progress", "--json"]
    if frontier:
        argv += ["--frontier", frontier, "--worker-id", name]
    return subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _page_requests(web: list[HostServer]) -> int:
    return sum(1 for s in web for p in s.recorder.paths() if p != "/robots.txt")


def _wait(workers: list[subprocess.Popen[bytes]], timeout_s: float = 200) -> None:
    deadline = time.monotonic() + timeout_s
    for w in workers:
        try:
            w.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in workers:
                other.kill()
            raise
    for w in workers:
        if w.returncode not in (0, -signal.SIGKILL):
            raise AssertionError(f"worker exited {w.returncode}: {w.stderr.read().decode()[-3000:]}")  # type: ignore[union-attr]


def _expected(web: list[HostServer]) -> set[str]:
    return {s.url(p) for s in web for p in ["/", *(f"/p{i}" for i in range(_PAGES))]}


def _doc_urls(data: Path) -> set[str]:
    return {doc.url for doc in DocStore(CrawlDir(data).docs).iter_documents()}


@pytest.mark.timeout(400)
def test_three_workers_share_politeness_and_fetch_every_page_once(
    web: list[HostServer], pg_dsn: str, tmp_path: Path
) -> None:
    data = tmp_path / "crawl"
    # A worker that started late on a loaded machine would find the crawl over: the home
    # pages wait until every worker reported and a second one holds a host (a worker
    # leases no more hosts than it has fetches waiting, so one host is left for another).
    _HOME_GATE.clear()
    try:
        workers = [_worker(web, data, pg_dsn, f"w{i}") for i in range(3)]
        _open_gate_when_reported(pg_dsn, 3, gate=_HOME_GATE, owners=2)
    finally:
        _HOME_GATE.set()
    _wait(workers)
    for server in web:
        assert server.recorder.max_in_flight == 1, server.address
        pages = Counter(p for p in server.recorder.paths() if p != "/robots.txt")
        assert set(pages) == {"/", *(f"/p{i}" for i in range(_PAGES))}, server.address
        assert max(pages.values()) == 1, pages
        assert "/private" not in pages
    delayed = web[0].recorder.sorted_requests()
    gaps = [b.start - a.end for a, b in zip(delayed, delayed[1:], strict=False)]
    assert min(gaps) >= _CRAWL_DELAY_S * 0.9, gaps
    assert _doc_urls(data) == _expected(web)
    folders = [p for p in CrawlDir(data).docs.iterdir() if p.is_dir()]
    assert len(folders) >= 2  # the work was shared, each worker in its own folder
    status = crawl_status(data, pg_dsn)
    # Every worker reported itself (how many still count as alive depends on how long ago the
    # first one finished, which a loaded machine stretches past the 30 s heartbeat window).
    assert (status["backend"], len(status["workers"]), status["backlog"]) == ("postgresql", 3, 0)
    assert {w["worker"] for w in status["workers"]} == {"w0", "w1", "w2"}


@pytest.mark.timeout(400)
def test_a_killed_worker_leaves_its_hosts_to_the_others(
    web: list[HostServer], pg_dsn: str, tmp_path: Path
) -> None:
    data = tmp_path / "fleet"
    workers = [_worker(web, data, pg_dsn, f"k{i}") for i in range(3)]
    deadline = time.monotonic() + 120
    while _page_requests(web) < 12:
        assert time.monotonic() < deadline, "the fleet did not get going"
        time.sleep(0.05)
    workers[0].send_signal(signal.SIGKILL)
    _wait(workers)
    assert workers[0].returncode == -signal.SIGKILL
    fleet_docs = _doc_urls(data)
    single = tmp_path / "single"
    alone = _worker(web, single, None, "")
    _wait([alone])
    assert fleet_docs == _doc_urls(single) == _expected(web)
    for server in web:
        assert server.recorder.max_in_flight == 1, server.address


@pytest.mark.timeout(400)
def test_the_page_budgets_hold_across_the_fleet(web: list[HostServer], pg_dsn: str, tmp_path: Path) -> None:
    """``--max-pages`` and the per-host cap count the fleet's pages, not each worker's: three
    workers asked for 11 pages, at most 3 a host, fetch 11 pages, none twice, at most 3 a host
    (each worker counted its own: up to three times either budget)."""
    data = tmp_path / "budget"
    argv = [_TRAWL, "crawl", *(s.url("/") for s in web), "--data", str(data), "--no-progress", "--json",
            "--frontier", pg_dsn, "--max-pages", "11"]  # fmt: skip
    env = _env(TRAWL_CRAWL__MAX_PAGES_PER_HOST="3")
    workers = [
        subprocess.Popen(
            [*argv, "--worker-id", f"b{i}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for i in range(3)
    ]
    _wait(workers)
    per_host = [Counter(p for p in s.recorder.paths() if p != "/robots.txt") for s in web]
    assert sum(sum(pages.values()) for pages in per_host) == 11, per_host
    assert max(max(pages.values(), default=0) for pages in per_host) == 1, per_host
    assert max(len(pages) for pages in per_host) <= 3, per_host
    assert len(_doc_urls(data)) == 11


_COPY = prose(500, 300)
_NEAR = prose(600, 1000).split()


def _near_text(host: int) -> str:
    """The same 1,000 words on every host but one, which names the host: near-duplicates."""
    words = list(_NEAR)
    words[500] = f"host{host}word"
    return " ".join(words)


def _slow_page(site: Site, path: str, html: str, gate: threading.Event) -> None:
    """A page that waits for the gate (the test opens it once every worker has reported to the
    fleet: a worker that started late on a loaded machine would find the crawl over), then
    takes a moment, so the crawl lasts while every worker holds hosts."""

    async def slow(request: object) -> object:
        from starlette.responses import HTMLResponse

        while not gate.is_set():
            await asyncio.sleep(0.05)
        return await sleep_then(0.4, HTMLResponse(html))

    site.handler(path)(slow)  # type: ignore[arg-type]


_GATE = threading.Event()


@pytest.fixture
def copies_web() -> Iterator[list[HostServer]]:
    _GATE.clear()
    servers = [HostServer(Site(), f"127.0.0.{12 + i}") for i in range(4)]
    for i, server in enumerate(servers):
        links = [("/own", "own"), ("/copy", "copy"), ("/near", "near")]
        _slow_page(server.site, "/", html_page(f"Home {i}", prose(700 + i), links=links), _GATE)
        _slow_page(server.site, "/own", html_page(f"Own {i}", prose(800 + i)), _GATE)
        _slow_page(server.site, "/copy", html_page("The same page everywhere", _COPY), _GATE)
        _slow_page(server.site, "/near", html_page("Nearly the same page", _near_text(i)), _GATE)
    yield from _running(servers)


def _open_gate_when_reported(
    pg_dsn: str, workers: int, timeout_s: float = 180, *, gate: threading.Event = _GATE, owners: int = 0
) -> None:
    """Open ``gate`` once ``workers`` workers have a row in the fleet's ``workers`` table and
    ``owners`` distinct workers hold host leases."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        while True:
            try:
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM workers),"
                    " (SELECT count(DISTINCT lease_owner) FROM hosts WHERE lease_owner <> '')"
                ).fetchone()
                reported, holding = (int(row[0]), int(row[1])) if row else (0, 0)
            except psycopg.errors.UndefinedTable:
                reported, holding = 0, 0
            if reported >= workers and holding >= owners:
                break
            assert time.monotonic() < deadline, (
                f"{reported} of {workers} workers reported, {holding} hold hosts"
            )
            time.sleep(0.1)
    gate.set()


@pytest.mark.timeout(400)
def test_copies_fetched_by_different_workers_are_indexed_once(
    copies_web: list[HostServer], pg_dsn: str, tmp_path: Path
) -> None:
    """Each worker's duplicate index knows only its own new documents; the fleet's claims in
    PostgreSQL (``crawl.state.content_claims``) keep one original of a page copied on every host,
    and one of a page nearly copied, as a single process does."""
    from crawl.extraction.dedup import fingerprints, hamming
    from crawl.extraction.page import parse_html
    from crawl.state.postgres import PgCrawlDb

    near = [
        fingerprints(parse_html(html_page("Nearly the same page", _near_text(i)), "http://x/").body)
        for i in range(4)
    ]
    assert max(hamming(a[1], b[1]) for a in near for b in near) <= 3  # the fixture is what it says
    data = tmp_path / "copies"
    workers = [_worker(copies_web, data, pg_dsn, f"c{i}") for i in range(3)]
    _open_gate_when_reported(pg_dsn, 3)
    _wait(workers)
    docs = _doc_urls(data)
    copies = {s.url("/copy") for s in copies_web}
    nears = {s.url("/near") for s in copies_web}
    assert len(docs & copies) == 1 and len(docs & nears) == 1, sorted(docs)
    assert docs - copies - nears == {s.url(p) for s in copies_web for p in ("/", "/own")}
    db = PgCrawlDb(pg_dsn)
    try:
        for group in (copies, nears):
            (original,) = docs & group
            for url in group - {original}:
                row = db.row(url)
                assert row is not None and row["outcome"].startswith("duplicate"), row
                assert row["dup_of"] == original, row
    finally:
        db.close()
    indexed = sum(json.loads(w.stdout.read().decode().strip().splitlines()[-1])["indexed"] for w in workers)  # type: ignore[union-attr]
    assert indexed == len(docs) == 10
    assert len([p for p in CrawlDir(data).docs.iterdir() if p.is_dir()]) >= 2  # more than one worker indexed
