"""Words inside links, counted at extraction and stored with the document (a page's quality)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from core.docstore import DocStore
from crawl.extraction.documents import page_document
from crawl.extraction.page import parse_html

DEMO = Path("/usr/share/doc/python3.11/html")
PAGE = """<html><head><title>Tools</title></head><body>
<nav><a href="/a">Home page link</a> <a href="/b">About</a></nav>
<main><p>The <a href="/json">json module</a> reads JSON; the <a href="/csv">csv module</a> reads CSV
files and writes them too.</p><a href="#top" class="headerlink">¶</a></main></body></html>"""


def test_link_words_count_the_main_contents_links_only() -> None:
    page = parse_html(PAGE, "https://a.test/tools")
    assert page.link_words == 4  # "json module", "csv module"; the navigation is not main content
    assert len(page.body.split()) == 15


@pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")
def test_an_index_page_is_nearly_all_links_and_a_reference_page_is_not() -> None:
    index = parse_html(
        (DEMO / "genindex-F.html").read_text(encoding="utf-8"), "https://d.test/genindex-F.html"
    )
    assert index.link_words > 0.9 * len(index.body.split())
    ref = parse_html(
        (DEMO / "library/json.html").read_text(encoding="utf-8"), "https://d.test/library/json.html"
    )
    assert 0 < ref.link_words < 0.2 * len(ref.body.split())


def test_link_words_are_stored_and_older_segments_read_as_none(tmp_path: Path) -> None:
    page = parse_html(PAGE, "https://a.test/tools")
    doc = page_document(
        "https://a.test/tools", page, fetched_at=1.0, text_hash="h", fingerprint=1, max_links=10
    )
    assert doc.link_words == 4
    parquet = DocStore(tmp_path / "parquet")
    name = parquet.append([doc])
    [read] = list(parquet.iter_documents())
    assert read.link_words == 4
    path = tmp_path / "parquet" / name
    pl.read_parquet(path).drop("link_words").write_parquet(path)  # a segment of an older crawl
    rows = DocStore(tmp_path / "rows", row_segments=True)
    row_path = tmp_path / "rows" / rows.append([doc])
    records = [json.loads(line) for line in gzip.decompress(row_path.read_bytes()).decode().splitlines()]
    older = "".join(json.dumps({k: v for k, v in r.items() if k != "link_words"}) + "\n" for r in records)
    row_path.write_bytes(gzip.compress(older.encode()))
    for store in (parquet, rows):
        [old] = list(store.iter_documents())
        assert old.link_words == 0 and old.url == doc.url
    assert list(rows.documents_by_url([doc.url]).values())[0].link_words == 0
