"""WARC an archive can use: wire payloads with digests, request records, revisits on recrawl.

Every file is checked with warcio's own checker (``warcio check``: block and payload
digests recomputed from the bytes); the reading side decodes the wire payload with the
crawl's cap, and reprocessing the archive yields the crawl's documents.
"""

from __future__ import annotations

import asyncio
import gzip
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import brotli
import pytest
from starlette.requests import Request
from starlette.responses import Response
from warcio.archiveiterator import ArchiveIterator

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from crawl.run.reprocess import reprocess
from crawl.run.warc import IDENTICAL_PAYLOAD, SERVER_NOT_MODIFIED, payload_digest, read_responses
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

SETTINGS = CrawlSettings(
    min_delay_s=0.0,
    response_time_factor=0,
    allow_loopback=True,
    recrawl_initial_s=100,
    recrawl_min_s=10,
    recrawl_max_s=1000,
    flush_interval_s=0.1,
)
GZ_PAGE = html_page("Gzipped", prose(201))
BR_PAGE = html_page("Brotli", prose(202))


def _encoded(body: bytes, coding: str):  # type: ignore[no-untyped-def]
    async def handler(request: Request) -> Response:
        return Response(body, headers={"content-type": "text/html", "content-encoding": coding})

    return handler


async def _with_etag(request: Request) -> Response:
    if request.headers.get("if-none-match") == '"v1"':
        return Response(status_code=304, headers={"etag": '"v1"'})
    return Response(html_page("Tagged", prose(203)), media_type="text/html", headers={"etag": '"v1"'})


@pytest.fixture
def server() -> Iterator[HostServer]:
    site = Site()
    links = [("/gz", "g"), ("/br", "b"), ("/plain", "p"), ("/tagged", "t")]
    site.page("/", html_page("Home", prose(200), links=links))
    site.page("/plain", html_page("Plain", prose(204)))
    site.routes["/gz"] = _encoded(gzip.compress(GZ_PAGE.encode(), mtime=0), "gzip")
    site.routes["/br"] = _encoded(brotli.compress(BR_PAGE.encode()), "br")
    site.routes["/tagged"] = _with_etag
    running = HostServer(site, "127.0.0.15").start()
    yield running
    running.stop()


# warcio 1.8 drains each payload through its own decoder, written for the brotlipy API
# (``decompress``, a settable ``unused_data``); brotli 1.1+ has ``process`` only. The
# digests it checks are over the raw payload either way, so the checker gets an adapter.
_CHECK = """
import sys, brotli, warcio.cli
from warcio.bufferedreaders import BufferedReader

class Brotli:
    unused_data = None
    def __init__(self):
        self._obj = brotli.Decompressor()
    def decompress(self, data):
        return self._obj.process(data)
    def flush(self):
        return b""

BufferedReader.DECOMPRESSORS["br"] = Brotli
sys.exit(warcio.cli.main())
"""


def _warcio_check(files: list[Path]) -> None:
    checked = subprocess.run(
        [sys.executable, "-c", _CHECK, "check", "-v"] + [str(f) for f in files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "digest pass" in checked.stdout


def _records(files: list[Path]) -> list[tuple[str, dict[str, str], dict[str, str], bytes]]:
    """(type, WARC headers, HTTP headers lower-cased, raw payload) of every record."""
    out = []
    for path in files:
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                http = {k.lower(): v for k, v in record.http_headers.headers} if record.http_headers else {}
                out.append(
                    (record.rec_type, dict(record.rec_headers.headers), http, record.raw_stream.read())
                )
    return out


def _crawl(data: Path, server: HostServer, *, recrawl: bool) -> None:
    asyncio.run(Crawler(data, SETTINGS, seeds=[server.url("/")], recrawl=recrawl).run())


def test_responses_keep_the_wire_payload_and_a_recrawl_writes_revisits_only(
    server: HostServer, tmp_path: Path
) -> None:
    warc = CrawlDir(tmp_path).warc
    _crawl(tmp_path, server, recrawl=False)
    first = sorted(warc.rglob("*.warc.gz"))
    _warcio_check(first)
    records = _records(first)
    responses = {
        h["WARC-Target-URI"]: (h, http, payload) for kind, h, http, payload in records if kind == "response"
    }
    ids = {h["WARC-Record-ID"] for h, _, _ in responses.values()}
    requests = [h for kind, h, _, _ in records if kind == "request"]
    assert len(requests) == len(responses) and {h["WARC-Concurrent-To"] for h in requests} == ids

    headers, http, payload = responses[server.url("/gz")]
    assert http["content-encoding"] == "gzip" and gzip.decompress(payload) == GZ_PAGE.encode()
    assert headers["WARC-Payload-Digest"] == payload_digest(payload) and "WARC-Block-Digest" in headers
    _, http, payload = responses[server.url("/br")]
    assert http["content-encoding"] == "br" and brotli.decompress(payload) == BR_PAGE.encode()

    decoded = {r.url: r for r in read_responses(warc, max_bytes=SETTINGS.max_page_bytes)}
    assert decoded[server.url("/gz")].body == GZ_PAGE.encode()
    assert decoded[server.url("/br")].body == BR_PAGE.encode()
    assert "content-encoding" not in decoded[server.url("/gz")].headers
    capped = {r.url for r in read_responses(warc, max_bytes=1000)}
    assert capped == {server.url("/robots.txt")}, "payloads decoding past the cap are skipped"

    conn = sqlite3.connect(CrawlDir(tmp_path).db)
    conn.execute("UPDATE urls SET next_fetch = 0 WHERE next_fetch IS NOT NULL")  # time passes
    conn.commit()
    conn.close()
    _crawl(tmp_path, server, recrawl=True)
    second = sorted(set(warc.rglob("*.warc.gz")) - set(first))
    _warcio_check(second)
    again = _records(second)
    revisits = {h["WARC-Target-URI"]: h for kind, h, _, _ in again if kind == "revisit"}
    assert {kind for kind, *_ in again} == {"revisit", "request"}
    robots = {server.url("/robots.txt")}  # refetched or not, as its cache says
    assert set(revisits) - robots == set(responses) - robots and server.url("/gz") in revisits
    for url, h in revisits.items():
        original = responses[url][0]
        expected = SERVER_NOT_MODIFIED if url.endswith("/tagged") else IDENTICAL_PAYLOAD
        assert h["WARC-Profile"] == expected
        assert h["WARC-Refers-To-Target-URI"] == url
        assert h["WARC-Refers-To-Date"] == original["WARC-Date"]
        assert h["WARC-Refers-To"] == original["WARC-Record-ID"]
        assert h["WARC-Payload-Digest"] == original["WARC-Payload-Digest"]


async def _odd_headers(request: Request) -> Response:
    # Latin-1 bytes in a value with a ';' (warcio's record builder raised on it, which
    # stopped every later WARC write of the crawl) and a non-standard reason phrase.
    response = Response(
        html_page("Odd", prose(205)), media_type="text/html", headers={"x-note": "caf\u00e9; a=\u00e9"}
    )
    return response


def test_header_lines_are_archived_as_they_came_and_odd_bytes_stop_nothing(tmp_path: Path) -> None:
    site = Site()
    site.page("/", html_page("Home", prose(206), links=[("/odd", "o"), ("/after", "a")]))
    site.routes["/odd"] = _odd_headers
    site.page("/after", html_page("After", prose(207)))
    running = HostServer(site, "127.0.0.16").start()
    try:
        _crawl(tmp_path, running, recrawl=False)
        files = sorted(CrawlDir(tmp_path).warc.rglob("*.warc.gz"))
        _warcio_check(files)
        blocks = {}
        for path in files:
            with path.open("rb") as stream:
                for record in ArchiveIterator(stream):
                    if record.rec_type == "response":
                        uri = record.rec_headers.get_header("WARC-Target-URI")
                        blocks[uri] = record.http_headers
        assert set(blocks) >= {running.url("/"), running.url("/odd"), running.url("/after")}
        # warcio parses the line as text; the bytes on disk are the ones the server sent.
        raw = b"".join(gzip.open(path).read() for path in files)
        assert b"\r\nx-note: caf\xe9; a=\xe9\r\n" in raw
        assert blocks[running.url("/odd")].get_statuscode() == "200"
        indexed = {d.url for d in DocStore(CrawlDir(tmp_path).docs).iter_documents()}
        assert {running.url("/odd"), running.url("/after")} <= indexed
    finally:
        running.stop()


def test_reprocess_decodes_the_wire_payloads(server: HostServer, tmp_path: Path) -> None:
    _crawl(tmp_path, server, recrawl=False)
    crawled = {d.url: d.body for d in DocStore(CrawlDir(tmp_path).docs).iter_documents()}
    summary = reprocess(tmp_path, SETTINGS)
    again = {d.url: d.body for d in DocStore(CrawlDir(tmp_path).docs).iter_documents()}
    assert summary.documents == len(crawled) == 5
    assert again == crawled
    assert prose(201).split()[0] in again[server.url("/gz")]
