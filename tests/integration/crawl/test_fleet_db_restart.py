"""Two crawl workers ride out a PostgreSQL restart (``pg_ctl -m fast stop``, 5 s, ``start``).

The fleet's pages link in chains, so no worker can get far without the database (each
next URL is inserted and leased through it): the restart falls mid-crawl, the workers
wait, reconnect, resume their leases and finish, and every page is fetched and stored
exactly once, although their leases ran out meanwhile. Before, both workers exited 1
with ``psycopg.errors.AdminShutdown``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.docstore import DocStore
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose, sleep_then
from tests.fixtures.pg_server import PgCluster, PgUnavailable, running_cluster

_PAGES = 8
_HOSTS = 4
_LEASE_S = 5
"""Shorter than the outage (5 s down, then the start and a reconnection), so leases run out
while no worker can renew them: a worker back first must not take them as a dead
worker's (each would be fetched twice), which the heartbeat's 1 s leaves room for."""
_TRAWL = str(Path(sys.executable).parent / "trawl")


def _site(index: int) -> Site:
    """Home → p0 → p1 → … → p7: each next page is found only by fetching the one before."""
    site = Site()
    site.raw("/robots.txt", b"User-agent: *\nCrawl-delay: 0.2\n", content_type="text/plain")
    site.page("/", html_page(f"Home {index}", prose(index * 100), links=[("/p0", "first")]))
    for i in range(_PAGES):
        links = [(f"/p{i + 1}", "next")] if i + 1 < _PAGES else []
        body = html_page(f"Page {index}.{i}", prose(index * 100 + i + 1), links=links)

        async def slow(request: object, body: str = body) -> object:
            from starlette.responses import HTMLResponse

            return await sleep_then(0.05, HTMLResponse(body))

        site.handler(f"/p{i}")(slow)  # type: ignore[arg-type]
    return site


@pytest.fixture
def web() -> Iterator[list[HostServer]]:
    servers = [HostServer(_site(i), f"127.0.0.{40 + i}") for i in range(_HOSTS)]
    for server in servers:
        server.start()
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    """A cluster of this test's own: stopping the session's would fail the tests after it."""
    try:
        with running_cluster(max_connections=50) as own:
            yield own
    except PgUnavailable as exc:
        pytest.fail(str(exc))


def _worker(web: list[HostServer], data: Path, dsn: str, name: str, **extra: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TRAWL_CRAWL__ALLOWED_NETWORKS": '["127.0.0.0/24"]',
        "TRAWL_CRAWL__MIN_DELAY_S": "0.05",
        "TRAWL_CRAWL__RESPONSE_TIME_FACTOR": "0",
        "TRAWL_CRAWL__FLUSH_INTERVAL_S": "0.2",
        "TRAWL_CRAWL__LEASE_S": str(_LEASE_S),
        "TRAWL_CRAWL__CONCURRENCY": "4",
        "TRAWL_CRAWL__FETCH_TIMEOUT_S": "5",
        **extra,
    }
    argv = [_TRAWL, "crawl", *(s.url("/") for s in web), "--data", str(data), "--no-progress", "--json",
            "--frontier", dsn, "--worker-id", name]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _requests(web: list[HostServer]) -> int:
    return sum(1 for s in web for p in s.recorder.paths() if p != "/robots.txt")


@pytest.mark.timeout(400)
def test_two_workers_ride_out_a_postgresql_restart(
    web: list[HostServer], cluster: PgCluster, tmp_path: Path
) -> None:
    dsn = cluster.new_database()
    data = tmp_path / "fleet"
    workers = [_worker(web, data, dsn, f"r{i}") for i in range(2)]
    try:
        deadline = time.monotonic() + 120
        while _requests(web) < 2 * _HOSTS:
            assert time.monotonic() < deadline, "the fleet did not get going"
            assert all(w.poll() is None for w in workers), "a worker ended before the restart"
            time.sleep(0.05)
        cluster.stop("fast")
        time.sleep(5)
        cluster.start()
        restarted = time.monotonic()
        outputs = [w.communicate(timeout=300) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for w, (_, err) in zip(workers, outputs, strict=True):
        stderr = err.decode()
        assert w.returncode == 0, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
    said = b"".join(err for _, err in outputs).decode()
    assert "Lost the connection to PostgreSQL" in said and "is back after" in said, said[-3000:]
    expected = {s.url(p) for s in web for p in ["/", *(f"/p{i}" for i in range(_PAGES))]}
    # The restart fell mid-crawl: pages were still to be fetched when PostgreSQL came back.
    assert any(r.start > restarted for s in web for r in s.recorder.requests if r.path != "/robots.txt")
    fetched = Counter(s.url(p) for s in web for p in s.recorder.paths() if p != "/robots.txt")
    assert set(fetched) == expected and max(fetched.values()) == 1, fetched
    docstore = DocStore(CrawlDir(data).docs)
    stored = Counter(doc.url for segment in docstore.segments() for doc in docstore.iter_documents(segment))
    assert set(stored) == expected and max(stored.values()) == 1, stored


@pytest.mark.timeout(300)
def test_a_worker_gives_up_on_a_database_that_stays_down_with_one_line(
    web: list[HostServer], cluster: PgCluster, tmp_path: Path
) -> None:
    """Past ``crawl.db_outage_s`` the worker stops and says why in words, without a traceback."""
    dsn = cluster.new_database()
    worker = _worker(web, tmp_path / "alone", dsn, "g0", TRAWL_CRAWL__DB_OUTAGE_S="2")
    try:
        deadline = time.monotonic() + 120
        while _requests(web) < 2:
            assert time.monotonic() < deadline, "the worker did not get going"
            assert worker.poll() is None, "the worker ended before the database stopped"
            time.sleep(0.05)
        cluster.stop("fast")
        _, err = worker.communicate(timeout=200)
    finally:
        if worker.poll() is None:
            worker.kill()
    stderr = err.decode()
    assert worker.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "unreachable for over 2 s (crawl.db_outage_s)" in stderr.strip().splitlines()[-1], stderr[-3000:]
