"""``trawl index --warc``: archives from wget and from Trawl's own crawler index like the crawl.

Real Sphinx pages on a loopback server are crawled by Trawl (its WARC files kept) and
archived by Debian's wget (``--warc-file``). Every index built from the archives must
answer the same top 10 as the index built from the crawl, for a fixed query set. A third
archive holds hand-made damaged records (a truncated gzip member, a wrong length, a block
that is not HTTP): they are counted and skipped, the rest of their files still read.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from cli.main import app
from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.demo_site import DEMO, demo_site

pytestmark = [
    pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed"),
    pytest.mark.skipif(shutil.which("wget") is None, reason="Debian's wget is not installed"),
]

PAGES = (
    "library/asyncio-eventloop.html",
    "library/json.html",
    "library/pathlib.html",
    "library/os.path.html",
    "library/functions.html",
    "library/collections.html",
    "tutorial/inputoutput.html",
    "library/zipfile.html",
)
QUERIES = (
    "event loop",
    "json decode",
    "path exists",
    "read a file line by line",
    "zip two lists",
    "default dict",
    "glob pattern",
    "open",
)
SETTINGS = CrawlSettings(allow_loopback=True, min_delay_s=0.0, response_time_factor=0.0, max_depth=1)


@pytest.fixture(scope="module")
def archived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The site crawled by Trawl (DIR ``crawl``) and archived by wget (``wget.warc.gz``)."""
    tmp = tmp_path_factory.mktemp("warc-import")
    with demo_site(tmp / "site", PAGES) as (seed, _requests):
        asyncio.run(Crawler(tmp / "crawl", SETTINGS, seeds=[seed]).run())
        wget = subprocess.run(
            ["wget", "--quiet", "--recursive", "--level=1", "--execute", "robots=off",
             "--warc-file", str(tmp / "wget"), "--directory-prefix", str(tmp / "mirror"), seed],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert wget.returncode == 0, wget.stderr
    yield tmp, seed


def _index(*args: str) -> str:
    result = CliRunner().invoke(app, ["index", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def _top10(index: Path) -> dict[str, list[tuple[str, float]]]:
    service = SearchService.open(index)
    try:
        return {
            q: [
                (h.url, round(h.score, 4))
                for h in service.search(SearchRequest(q, size=10, ranker="bm25")).hits
            ]
            for q in QUERIES
        }
    finally:
        service.close()


def _response(writer: WARCWriter, url: str, body: bytes) -> None:
    http = StatusAndHeaders(
        "200 OK",
        [("Content-Type", "text/html"), ("Content-Length", str(len(body)))],
        protocol="HTTP/1.0",
    )
    writer.write_record(
        writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http)
    )


def _page(word: str) -> bytes:
    return f"<html><title>{word}</title><body><p>{word} {word} only here</p></body></html>".encode()


def _damaged_archives(tmp: Path, seed: str) -> tuple[Path, Path]:
    """A gzip-per-record archive with a truncated member and a block that is not HTTP, and a
    plain archive with a wrong Content-Length, each between good copies of the site's pages."""
    good = io.BytesIO()
    writer = WARCWriter(good, gzip=True)
    _response(writer, seed + PAGES[0], (DEMO / PAGES[0]).read_bytes())
    first_end = good.tell()
    _response(writer, seed + "truncated.html", _page("xylophonist"))
    truncated = good.getvalue()[first_end:]
    not_http = (
        b"WARC/1.0\r\nWARC-Type: response\r\n"
        b"WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-000000000001>\r\n"
        b"WARC-Target-URI: " + (seed + "nothttp.html").encode() + b"\r\nWARC-Date: 2026-01-01T00:00:00Z\r\n"
        b"Content-Type: application/http; msgtype=response\r\nContent-Length: 29\r\n\r\n"
        b"quokka is not an HTTP answer\n\r\n\r\n"
    )
    tail = io.BytesIO()
    _response(WARCWriter(tail, gzip=True), seed + PAGES[1], (DEMO / PAGES[1]).read_bytes())
    gz = tmp / "damaged.warc.gz"
    gz.write_bytes(
        good.getvalue()[:first_end]
        + truncated[: len(truncated) // 2]
        + gzip.compress(not_http)
        + tail.getvalue()
    )

    plain = io.BytesIO()
    writer = WARCWriter(plain, gzip=False)
    _response(writer, seed + PAGES[2], (DEMO / PAGES[2]).read_bytes())
    start = plain.tell()
    _response(writer, seed + "badlength.html", _page("narwhalian"))
    end = plain.tell()
    _response(writer, seed + PAGES[3], (DEMO / PAGES[3]).read_bytes())
    data = plain.getvalue()
    record = data[start:end]
    length = re.search(rb"Content-Length: (\d+)", record)
    assert length is not None
    record = record.replace(length.group(0), b"Content-Length: %d" % (int(length.group(1)) - 25), 1)
    bad = tmp / "damaged.warc"
    bad.write_bytes(data[:start] + record + data[end:])
    return gz, bad


def test_archives_from_wget_and_trawl_index_like_the_crawl(
    archived: tuple[Path, str], tmp_path: Path
) -> None:
    tmp, seed = archived
    crawl = tmp / "crawl"
    _index("--data", str(crawl), "--index", str(tmp_path / "crawled"))
    expected = _top10(tmp_path / "crawled")
    assert sum(1 for hits in expected.values() if hits) >= 6, expected

    own = _index(
        "--warc",
        str(CrawlDir(crawl).warc),
        "--data",
        str(tmp_path / "own"),
        "--index",
        str(tmp_path / "own-index"),
    )
    assert f"{len(PAGES) + 1} documents" in own and "0 damaged record(s)" in own, own
    assert _top10(tmp_path / "own-index") == expected

    gz, plain = _damaged_archives(tmp_path, seed)
    output = _index(
        "--warc", str(tmp / "wget.warc.gz"), "--warc", str(gz), "--warc", str(plain),
        "--data", str(tmp_path / "wget"), "--index", str(tmp_path / "wget-index"),
    )  # fmt: skip
    assert "3 damaged record(s) skipped" in output, output
    damaged = [line for line in output.splitlines() if line.startswith("damaged: ")]
    assert len(damaged) == 3, output
    assert any("damaged.warc.gz at offset" in line and "HTTP" in line for line in damaged), damaged
    assert any("damaged.warc at offset" in line and "digest" in line for line in damaged), damaged
    assert _top10(tmp_path / "wget-index") == expected
    summary = json.loads(CrawlDir(tmp_path / "wget").imported.read_text())
    assert [d["file"] for d in summary["damaged"]] == [str(gz), str(gz), str(plain)]
    urls = {d.url for d in DocStore(CrawlDir(tmp_path / "wget").docs).iter_documents()}
    assert urls == {seed} | {seed + p for p in PAGES}
    service = SearchService.open(tmp_path / "wget-index")
    try:
        for word in ("xylophonist", "narwhalian", "quokka"):  # only in the damaged records
            assert not service.search(SearchRequest(word, ranker="bm25")).hits, word
    finally:
        service.close()


def test_an_import_never_replaces_a_crawl_and_a_missing_archive_is_named(
    archived: tuple[Path, str], tmp_path: Path
) -> None:
    tmp, _seed = archived
    crawl = tmp_path / "crawl"
    shutil.copytree(tmp / "crawl", crawl)
    before = len(DocStore(CrawlDir(crawl).docs))
    result = CliRunner().invoke(
        app,
        ["index", "--warc", str(tmp / "wget.warc.gz"), "--data", str(crawl), "--index", str(tmp_path / "i")],
    )
    assert result.exit_code != 0
    assert "holds a crawl" in str(result.exception) + result.output
    assert len(DocStore(CrawlDir(crawl).docs)) == before
    missing = CliRunner().invoke(
        app,
        [
            "index",
            "--warc",
            str(tmp_path / "nowhere*.warc.gz"),
            "--data",
            str(tmp_path / "d"),
            "--index",
            str(tmp_path / "i"),
        ],
    )
    assert missing.exit_code != 0
    assert "no WARC or ARC file there" in str(missing.exception) + missing.output


@pytest.mark.ray
def test_ray_reads_a_file_per_task_and_merges_duplicates_across_files_as_the_local_import(
    archived: tuple[Path, str], tmp_path: Path
) -> None:
    tmp, seed = archived
    mirror = io.BytesIO()
    writer = WARCWriter(mirror, gzip=True)
    for page in PAGES[:2]:  # the same pages under another host: duplicates of the wget archive's
        _response(writer, f"http://mirror.example/{page}", (DEMO / page).read_bytes())
    (tmp_path / "mirror.warc.gz").write_bytes(mirror.getvalue())
    files = [str(tmp / "wget.warc.gz"), str(tmp_path / "mirror.warc.gz")]
    served: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for engine in ("local", "ray"):
        args = [arg for f in files for arg in ("--warc", f)]
        output = _index(*args, "--data", str(tmp_path / engine), "--index", str(tmp_path / f"{engine}-index"),
                        "--engine", engine)  # fmt: skip
        assert f"{len(PAGES) + 1} documents" in output, output
        served[engine] = _top10(tmp_path / f"{engine}-index")
    assert served["ray"] == served["local"]
    assert not any("mirror.example" in url for hits in served["ray"].values() for url, _ in hits)
    workers = sorted(p.name for p in CrawlDir(tmp_path / "ray").docs.iterdir() if p.is_dir())
    assert workers == ["w-00000", "w-00001"]
