"""hreflang alternates read from a page and stored with its document; older segments read without them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl

from core.docstore import DocStore
from crawl.extraction.documents import page_document
from crawl.extraction.page import parse_html

PAGE = """<html lang="de"><head><title>Willkommen</title>
<link rel="canonical" href="/de/">
<link rel="alternate" hreflang="en" href="https://a.test/en/">
<link rel="alternate" hreflang="FR" href="../fr/">
<link rel="alternate" hreflang="x-default" href="/">
<link rel="alternate" type="application/rss+xml" href="/feed.xml">
<link rel="alternate" hreflang="de" href="/de/">
</head><body><p>Hallo</p></body></html>"""


def test_alternates_are_read_canonical_without_x_default_or_feeds() -> None:
    page = parse_html(PAGE, "https://a.test/de/")
    assert page.canonical_url == "https://a.test/de/"
    assert page.alternates == (
        ("en", "https://a.test/en/"),
        ("fr", "https://a.test/fr/"),
        ("de", "https://a.test/de/"),
    )
    doc = page_document(
        "https://a.test/de/", page, fetched_at=1.0, text_hash="h", fingerprint=1, max_links=10
    )
    assert doc.alternates == ("https://a.test/en/", "https://a.test/fr/", "https://a.test/de/")


def test_segments_written_before_alternates_read_as_none(tmp_path: Path) -> None:
    page = parse_html(PAGE, "https://a.test/de/")
    doc = page_document(
        "https://a.test/de/", page, fetched_at=1.0, text_hash="h", fingerprint=1, max_links=10
    )
    parquet = DocStore(tmp_path / "parquet")
    name = parquet.append([doc])
    path = tmp_path / "parquet" / name
    pl.read_parquet(path).drop("alternates").write_parquet(path)  # a segment of an older crawl
    rows = DocStore(tmp_path / "rows", row_segments=True)
    name = rows.append([doc])
    path = tmp_path / "rows" / name
    records = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
    older = "".join(json.dumps({k: v for k, v in r.items() if k != "alternates"}) + "\n" for r in records)
    path.write_bytes(gzip.compress(older.encode()))
    for store in (parquet, rows):
        [read] = list(store.iter_documents())
        assert read.alternates == () and read.url == doc.url and read.title == "Willkommen"
    assert list(rows.documents_by_url([doc.url]).values())[0].alternates == ()
