"""A full disk stops the crawl cleanly, and an index build says so, on a real 8 MB tmpfs.

Before, the crawl went on fetching pages it could not store ("Writing WARC records failed:
[Errno 28]", each page an internal error) until killed, and an index build ended with
Tantivy's words and a traceback. Now the crawl stops fetching at the first write that
fails for lack of space, says "disk full: <path> (N MB free); …" in one line and exits 1;
what it stored is kept, and a resume with more space fetches the rest, each page once.

Mounting needs root: the tests fail (not skip) without it, so a run that cannot mount
says so rather than passing quietly.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.docstore import DocStore
from crawl.state.sqlite import CrawlDb
from tests.fixtures.crawl.web import HostServer, Site, html_page

_PAGES = 100
_TRAWL = str(Path(sys.executable).parent / "trawl")


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` (created) for the block; unmounted after."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root: it mounts a small tmpfs to fill (mount -t tmpfs)")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.fail(f"this test needs root and mount(8) to mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _words(rng: random.Random, n_bytes: int) -> str:
    """Text that gzip cannot shrink much: base64 of random bytes, cut into words."""
    text = base64.b64encode(rng.randbytes(n_bytes)).decode()
    return " ".join(text[i : i + 8] for i in range(0, len(text), 8))


@pytest.fixture(scope="module")
def web() -> Iterator[HostServer]:
    """One host of ``_PAGES`` pages of ~80 kB each (~8 MB in all, more once stored twice)."""
    rng = random.Random(51)
    site = Site()
    site.raw("/robots.txt", b"User-agent: *\n", content_type="text/plain")
    links = [(f"/p{i}", f"page {i}") for i in range(_PAGES)]
    site.page("/", html_page("Home", "the start", links=links))
    for i in range(_PAGES):
        site.page(f"/p{i}", html_page(f"Page {i}", _words(rng, 60_000)))
    server = HostServer(site, "127.0.0.60").start()
    try:
        yield server
    finally:
        server.stop()


def _crawl(web: HostServer, data: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TRAWL_CRAWL__ALLOWED_NETWORKS": '["127.0.0.0/24"]',
        "TRAWL_CRAWL__MIN_DELAY_S": "0.01",
        "TRAWL_CRAWL__RESPONSE_TIME_FACTOR": "0",
        "TRAWL_CRAWL__FLUSH_INTERVAL_S": "0.5",
    }
    argv = [_TRAWL, "crawl", web.url("/"), "--data", str(data), "--no-progress", "--json"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)


def _pages(web: HostServer) -> list[str]:
    return [p for p in web.recorder.paths() if p != "/robots.txt"]


@pytest.mark.timeout(900)
def test_a_full_disk_stops_the_crawl_and_a_resume_finishes_it(web: HostServer, tmp_path: Path) -> None:
    expected = {web.url("/"), *(web.url(f"/p{i}") for i in range(_PAGES))}
    with small_disk(tmp_path / "small", "8m") as disk:
        data = disk / "crawl"
        full = _crawl(web, data)
        assert full.returncode == 1, full.stderr[-3000:]
        assert "Traceback" not in full.stderr, full.stderr[-3000:]
        said = full.stderr.strip().splitlines()[-1]
        assert f"disk full: {data} (" in said, said
        assert "MB free); free space and run the same command to resume" in said, said
        before = len(_pages(web))
        assert before < len(expected), "the disk did not fill: make the pages bigger"
        moved = tmp_path / "bigger"
        shutil.copytree(data, moved)  # "free space": the same data on a disk with room
    db = CrawlDb(CrawlDir(moved).db, readonly=True)
    try:
        kept = {url for url in expected if (row := db.row(url)) is not None and row["status"] == "done"}
    finally:
        db.close()
    stored = {doc.url for doc in DocStore(CrawlDir(moved).docs).iter_documents()}
    assert kept and kept <= stored  # a page acknowledged before the stop has its document

    resumed = _crawl(web, moved)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = {web.url(p) for p in _pages(web)[before:]}
    assert not again & kept  # what was stored and acknowledged is not fetched again
    docs = list(DocStore(CrawlDir(moved).docs).iter_documents())
    assert sorted(doc.url for doc in docs) == sorted(expected)
    db = CrawlDb(CrawlDir(moved).db, readonly=True)
    try:
        assert all((row := db.row(url)) is not None and row["status"] == "done" for url in expected)
    finally:
        db.close()


@pytest.mark.timeout(900)
def test_an_index_build_on_a_full_disk_says_disk_full(web: HostServer, tmp_path: Path) -> None:
    data = tmp_path / "crawl"
    crawled = _crawl(web, data)
    assert crawled.returncode == 0, crawled.stderr[-3000:]
    with small_disk(tmp_path / "small", "4m") as disk:
        index = disk / "index"
        built = subprocess.run(
            [_TRAWL, "index", "--data", str(data), "--index", str(index), "--no-publish"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert built.returncode != 0
    assert "Traceback" not in built.stderr, built.stderr[-3000:]
    said = built.stderr.strip().splitlines()[-1]
    assert f"disk full: {index}" in said and "MB free)" in said, said
