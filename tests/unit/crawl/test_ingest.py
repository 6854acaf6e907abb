"""Archive records as other crawlers write them (revisits, chunked and gzip bodies, robots.txt,
other hosts) and JSON Lines documents, into a crawl data directory."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings
from crawl.ingest.json_documents import BadDocument
from crawl.ingest.jsonl_import import import_jsonl
from crawl.ingest.warc_import import import_archives
from crawl.scope import Scope

SITE = "http://docs.example/"
SETTINGS = CrawlSettings()


def _page(title: str, words: str) -> bytes:
    return f"<html><title>{title}</title><body><h1>{title}</h1><p>{words}</p></body></html>".encode()


def _http(body_length: int | None, *extra: tuple[str, str], status: str = "200 OK") -> StatusAndHeaders:
    headers = [("Content-Type", "text/html; charset=utf-8"), *extra]
    if body_length is not None:
        headers.append(("Content-Length", str(body_length)))
    return StatusAndHeaders(status, headers, protocol="HTTP/1.1")


def _chunked(data: bytes) -> bytes:
    half = len(data) // 2
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (data[:half], data[half:])) + b"0\r\n\r\n"


def _archive(path: Path) -> dict[str, str]:
    """Writes the archive; returns each page's payload digest by URL."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    digests: dict[str, str] = {}

    def response(url: str, body: bytes, http: StatusAndHeaders) -> None:
        record = writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http)
        writer.write_record(record)
        digests[url] = record.rec_headers.get_header("WARC-Payload-Digest")

    robots = b"User-agent: *\nDisallow: /private/\n"
    response(
        SITE + "robots.txt", robots, StatusAndHeaders("200 OK", [("Content-Type", "text/plain")], "HTTP/1.1")
    )
    response(SITE + "a.html", _page("Alpha", "aardvark anteater"), _http(None))
    gzipped = _chunked(gzip.compress(_page("Beta", "badger bison")))
    response(
        SITE + "b.html", gzipped, _http(None, ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked"))
    )
    response(SITE + "private/c.html", _page("Gamma", "gazelle gnu"), _http(None))
    response("http://other.example/d.html", _page("Delta", "dingo dormouse"), _http(None))
    response(SITE + "gone.html", b"not found", _http(None, status="404 Not Found"))
    image = writer.create_warc_record(
        SITE + "e.png",
        "response",
        payload=io.BytesIO(b"\x89PNG...."),
        http_headers=StatusAndHeaders("200 OK", [("Content-Type", "image/png")], "HTTP/1.1"),
    )
    writer.write_record(image)
    for url, refers_to in ((SITE + "a.html", SITE + "a.html"), (SITE + "copy-of-a.html", SITE + "a.html")):
        revisit = writer.create_revisit_record(
            url, digests[refers_to], refers_to, "2026-01-01T00:00:00Z", http_headers=_http(None)
        )
        writer.write_record(revisit)
    path.write_bytes(out.getvalue())
    return digests


def test_archives_of_other_crawlers_through_extraction_scope_and_robots(tmp_path: Path) -> None:
    archive = tmp_path / "other.warc.gz"
    _archive(archive)
    summary = import_archives([archive], tmp_path / "all", SETTINGS)
    docs = {d.url: d for d in DocStore(CrawlDir(tmp_path / "all").docs).iter_documents()}
    assert set(docs) == {
        SITE + "a.html",
        SITE + "b.html",
        SITE + "private/c.html",
        "http://other.example/d.html",
    }
    assert docs[SITE + "b.html"].title == "Beta" and "badger bison" in docs[SITE + "b.html"].body
    assert summary.outcomes == {
        "indexed": 4,
        "robots_txt": 1,
        "http": 1,
        "not_html": 1,
        "revisit": 1,
        "duplicate": 1,  # a revisit of another URL reads its original's payload: the same page
    }
    assert summary.damaged == []

    kept = import_archives(
        [archive],
        tmp_path / "kept",
        SETTINGS,
        scope=Scope.from_seeds([SITE], mode="host", max_depth=10**9),
        respect_robots=True,
    )
    docs = {d.url for d in DocStore(CrawlDir(tmp_path / "kept").docs).iter_documents()}
    assert docs == {SITE + "a.html", SITE + "b.html"}
    assert kept.outcomes["robots"] == 1 and kept.outcomes["out_of_scope"] == 1


def test_json_lines_documents_with_metadata_and_a_named_bad_line(tmp_path: Path) -> None:
    source = tmp_path / "docs.jsonl"
    lines = [
        {"id": "k1", "url": "https://kb.example/a", "title": "Alpha", "body": "aardvark", "team": "red"},
        {
            "id": 2,
            "url": "urn:kb:2",
            "title": "Beta",
            "body": "badger",
            "headings": ["Bees"],
            "lang": "EN",
            "published": "2026-03-01T00:00:00Z",
        },  # fmt: skip
        {"id": "k1", "url": "https://kb.example/a", "title": "Alpha v2", "body": "aardvark again"},
    ]
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    summary = import_jsonl([source], tmp_path / "data")
    assert summary.records == 3 and summary.documents == 2
    docs = {d.external_id: d for d in DocStore(CrawlDir(tmp_path / "data").docs).iter_documents()}
    assert docs["k1"].title == "Alpha v2" and docs["k1"].host == "kb.example"
    assert (
        docs["2"].headings == ("Bees",) and docs["2"].lang == "en" and docs["2"].published_at == 1772323200.0
    )
    with gzip.open(CrawlDir(tmp_path / "data").metadata, "rt") as kept:
        assert [json.loads(line) for line in kept] == [{"id": "k1", "team": "red"}]

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(lines[0]) + "\n" + json.dumps({"id": "x", "url": "u", "title": 3, "body": ""}) + "\n"
    )
    with pytest.raises(BadDocument, match=r'bad.jsonl line 2: "title" must be a string'):
        import_jsonl([bad], tmp_path / "data")
    not_json = tmp_path / "garbage.jsonl"
    not_json.write_text('{"id": "x"\n')
    with pytest.raises(BadDocument, match=r"garbage.jsonl line 1: not a JSON object"):
        import_jsonl([not_json], tmp_path / "data")
    assert len(DocStore(CrawlDir(tmp_path / "data").docs)) == 2  # a failed import leaves the last one
