"""One crawl per data directory: a second ``trawl crawl`` (or ``trawl run``) on a directory a
live crawl writes is refused with that crawl's name, and a killed crawl's lock is taken over.

Both crawls used to run to the end, fetching every URL twice. A fleet on PostgreSQL shares
the directory on purpose: there each worker name is locked instead. Real ``trawl``
processes over a recording loopback site; one page is held open by the test until the
second command has answered, so the first crawl is surely still running.
"""

from __future__ import annotations

import asyncio
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
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

_PAGES = 6
_TRAWL = str(Path(sys.executable).parent / "trawl")


class GatedSite:
    """Pages ``/p0``…; ``/p0`` answers only once the gate is open (``asked`` once it is asked for)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.asked = threading.Event()
        self.site = Site()
        links = [(f"/p{i}", f"page {i}") for i in range(_PAGES)]
        self.site.page("/", html_page("Home", prose(1), links=links))
        for i in range(1, _PAGES):
            self.site.page(f"/p{i}", html_page(f"Page {i}", prose(10 + i)))
        self.site.handler("/p0")(self._gated)

    async def _gated(self, request: Request) -> Response:
        self.asked.set()
        while not self.gate.is_set():
            await asyncio.sleep(0.02)
        return HTMLResponse(html_page("Page 0", prose(10)))


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture
def web() -> Iterator[tuple[GatedSite, HostServer]]:
    gated = GatedSite()
    server = HostServer(gated.site, "127.0.0.45").start()
    yield gated, server
    gated.gate.set()
    for proc in _STARTED:  # a failed test leaves no crawl running
        proc.kill()
        proc.wait()
    _STARTED.clear()
    server.stop()


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "250",
        "TRAWL_CRAWL__ALLOWED_NETWORKS": '["127.0.0.0/24"]',
        "TRAWL_CRAWL__MIN_DELAY_S": "0.01",
        "TRAWL_CRAWL__FETCH_TIMEOUT_S": "900",  # the gated page waits for the test, never times out
        "TRAWL_CRAWL__PARSE_WORKERS": "1",
        "TRAWL_SEARCH__USE_VECTORS": "false",
        **extra,
    }


def _crawl(server: HostServer, data: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [_TRAWL, "crawl", server.url("/"), "--data", str(data), "--no-progress", "--json", *extra]
    proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _STARTED.append(proc)
    return proc


def _wait_until_asked(gated: GatedSite, proc: subprocess.Popen[str]) -> None:
    """Until ``proc`` waits for the gated page (it holds the directory by then)."""
    deadline = time.monotonic() + 300
    while not gated.asked.wait(0.05):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the crawl never asked for the gated page"


def _pages(server: HostServer) -> Counter[str]:
    return Counter(p for p in server.recorder.paths() if p != "/robots.txt")


@pytest.mark.timeout(900)
def test_a_second_crawl_or_run_on_a_crawled_directory_is_refused(
    web: tuple[GatedSite, HostServer], tmp_path: Path
) -> None:
    gated, server = web
    data, index = tmp_path / "crawl", tmp_path / "index"
    first = _crawl(server, data)
    try:
        _wait_until_asked(gated, first)  # the first crawl is mid-fetch, holding the directory
        second = subprocess.run(
            [_TRAWL, "crawl", server.url("/"), "--data", str(data), "--no-progress"],
            env=_env(), capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        run = subprocess.run(
            [_TRAWL, "run", server.url("/"), "--data", str(data), "--index", str(index), "--allow-loopback"],
            env=_env(), capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        for refused in (second, run):
            message = " ".join(refused.stderr.split())
            assert refused.returncode == 2, refused.stderr
            assert f"Crawl directory {data} is in use by pid {first.pid}" in message, message
            assert "Traceback" not in refused.stderr
        assert not index.exists()  # refused before the indexer started
    finally:
        gated.gate.set()
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    pages = _pages(server)
    assert set(pages) == {"/", *(f"/p{i}" for i in range(_PAGES))}
    assert max(pages.values()) == 1, pages  # nothing fetched twice


@pytest.mark.timeout(900)
def test_a_killed_crawls_lock_is_taken_over(web: tuple[GatedSite, HostServer], tmp_path: Path) -> None:
    gated, server = web
    data = tmp_path / "crawl"
    first = _crawl(server, data)
    _wait_until_asked(gated, first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    gated.gate.set()
    resumed = _crawl(server, data)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert set(_pages(server)) == {"/", *(f"/p{i}" for i in range(_PAGES))}


@pytest.mark.timeout(900)
def test_fleet_workers_share_the_directory_but_not_a_name(
    web: tuple[GatedSite, HostServer], pg_dsn: str, tmp_path: Path
) -> None:
    gated, server = web
    data = tmp_path / "fleet"
    first = _crawl(server, data, "--frontier", pg_dsn, "--worker-id", "a")
    try:
        _wait_until_asked(gated, first)
        twin = subprocess.run(
            [_TRAWL, "crawl", server.url("/"), "--data", str(data), "--no-progress"]
            + ["--frontier", pg_dsn, "--worker-id", "a"],
            env=_env(), capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert twin.returncode == 2, twin.stderr
        assert f"Fleet worker 'a' in {data} is in use by pid {first.pid}" in " ".join(twin.stderr.split())
        other = _crawl(server, data, "--frontier", pg_dsn, "--worker-id", "b")
    finally:
        gated.gate.set()
    for worker in (first, other):
        out, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err
    assert max(_pages(server).values()) == 1
