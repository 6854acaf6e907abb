"""Crash safety: a crawl killed with SIGKILL midway resumes to the same documents, and a
URL acknowledged before the kill is never fetched again. The crawl runs as a real
``python -m cli.main crawl`` process against fixture servers in this process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

PAGES_PER_HOST = 30
REPO = Path(__file__).resolve().parents[3]


def _site(seed: int) -> Site:
    site = Site()
    for i in range(PAGES_PER_HOST):
        children = [(f"/p{c}", f"page {c}") for c in (2 * i + 1, 2 * i + 2) if c < PAGES_PER_HOST]
        site.page(
            "/" if i == 0 else f"/p{i}", html_page(f"Page {seed}-{i}", prose(seed * 1000 + i), links=children)
        )
    return site


@pytest.fixture(scope="module")
def servers() -> Iterator[list[HostServer]]:
    started = [HostServer(_site(n), f"127.0.0.{n}").start() for n in (11, 12, 13)]
    yield started
    for server in started:
        server.stop()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "TRAWL_CRAWL__MIN_DELAY_S": "0.03",
            "TRAWL_CRAWL__RESPONSE_TIME_FACTOR": "0",
            "TRAWL_CRAWL__FLUSH_EVERY": "4",
            "TRAWL_CRAWL__FLUSH_INTERVAL_S": "0.1",
            "TRAWL_CRAWL__CONCURRENCY": "4",
            "PYTHONPATH": str(REPO),
        }
    )
    return env


def _command(servers: list[HostServer], data: Path) -> list[str]:
    seeds = [s.url("/") for s in servers]
    return [
        sys.executable,
        "-m",
        "cli.main",
        "crawl",
        *seeds,
        "--data",
        str(data),
        "--allow-private",
        "--no-progress",
        "--json",
    ]


@contextlib.contextmanager
def _crawl_process(servers: list[HostServer], data: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A crawl process that is killed if the test fails while it still runs."""
    process = subprocess.Popen(
        _command(servers, data), cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def _done_urls(data: Path) -> set[str]:
    conn = sqlite3.connect(CrawlDir(data).db)
    try:
        return {u for (u,) in conn.execute("SELECT url FROM urls WHERE status = 'done'")}
    except sqlite3.OperationalError:  # the crawl process has not created its tables yet
        return set()
    finally:
        conn.close()


def _requests(servers: list[HostServer]) -> list[str]:
    return [
        s.url(p) if p != "/" else s.url("/")
        for s in servers
        for p in s.recorder.paths()
        if p != "/robots.txt"
    ]


def _clear(servers: list[HostServer]) -> None:
    for server in servers:
        with server.recorder._lock:
            server.recorder.requests.clear()


def test_sigkill_then_resume_gives_the_same_documents(servers: list[HostServer], tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    settings = CrawlSettings(
        min_delay_s=0.0, response_time_factor=0, allow_loopback=True, concurrency=4, flush_interval_s=0.1
    )
    summary = asyncio.run(Crawler(reference, settings, seeds=[s.url("/") for s in servers]).run())
    expected = {d.url for d in DocStore(CrawlDir(reference).docs).iter_documents()}
    assert len(expected) == summary.indexed == 3 * PAGES_PER_HOST

    _clear(servers)
    data = tmp_path / "killed"
    with _crawl_process(servers, data) as process:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if CrawlDir(data).exists() and len(_done_urls(data)) >= 20:
                break
            assert process.poll() is None, process.communicate()
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL
    acknowledged = _done_urls(data)
    assert 20 <= len(acknowledged) < 3 * PAGES_PER_HOST

    _clear(servers)
    resumed = subprocess.run(_command(servers, data), cwd=REPO, env=_env(), capture_output=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    result = json.loads(resumed.stdout)
    assert result["stopped"] is False and result["pending"] == 0
    refetched = set(_requests(servers)) & acknowledged
    assert refetched == set()
    assert {d.url for d in DocStore(CrawlDir(data).docs).iter_documents()} == expected


def test_sigint_stops_gracefully_and_resume_completes(servers: list[HostServer], tmp_path: Path) -> None:
    data = tmp_path / "interrupted"
    with _crawl_process(servers, data) as process:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if CrawlDir(data).exists() and len(_done_urls(data)) >= 10:
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr.decode()[-2000:]
    summary = json.loads(stdout)
    assert summary["stopped"] is True and summary["pending"] > 0
    stored = {d.url for d in DocStore(CrawlDir(data).docs).iter_documents()}
    assert stored == _done_urls(data) and len(stored) == summary["indexed"]
    resumed = subprocess.run(_command(servers, data), cwd=REPO, env=_env(), capture_output=True, timeout=60)
    assert resumed.returncode == 0
    assert len({d.url for d in DocStore(CrawlDir(data).docs).iter_documents()}) == 3 * PAGES_PER_HOST
