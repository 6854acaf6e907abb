"""A result links to the section that answers the query: real Python-docs pages crawled on
loopback, indexed, searched through the HTTP API, the search page and the CLI; an index built
before sections were kept serves as before, with the same ranking."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cli.main import app
from core.settings import CrawlSettings, SearchSettings
from retrieval.index.build import build_index
from retrieval.index.docs_source import crawled_documents
from retrieval.index.lexical import LexicalShard, StoredDoc
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.demo_site import DEMO, demo_site
from tests.fixtures.serving import api_client, crawl_and_index
from tests.fixtures.shards import http_broker

pytestmark = pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")
PAGES = (
    "library/functions.html",
    "library/collections.html",
    "library/zipfile.html",
    "library/zipapp.html",
    "library/json.html",
)
CRAWL = CrawlSettings(allow_loopback=True, min_delay_s=0.0, response_time_factor=0.0, max_depth=1)
ZIP = "zip(*iterables, strict=False)"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """(crawl directory, site URL, index) after a real crawl of the pages."""
    tmp = tmp_path_factory.mktemp("sections")
    (tmp / "site").mkdir()
    with demo_site(tmp / "site", pages=PAGES) as (seed, _):
        return crawl_and_index(tmp, seed, CRAWL)


@pytest.fixture(scope="module")
def client(site: tuple[Path, str, Path]) -> Iterator[httpx.Client]:
    with api_client(site[2]) as c:
        yield c


def _result(client: httpx.Client, q: str, url: str) -> dict:  # type: ignore[type-arg]
    body = client.get("/v1/search", params={"q": q, "ranker": "bm25"}).json()
    return next(hit for hit in body["results"] if hit["url"] == url)


def _stored(index: Path, url: str) -> StoredDoc:
    for shard in sorted(index.glob("shard-*")):
        for doc in LexicalShard(shard / "lexical").iter_stored():
            if doc.url == url:
                return doc
    raise AssertionError(url)


@pytest.mark.parametrize(
    ("q", "page", "heading", "anchor", "quoted"),
    [
        ("zip", "library/functions.html", ZIP, "zip", "Iterate over several iterables in parallel"),
        ("zip two lists", "library/functions.html", ZIP, "zip", "Iterate over several iterables"),
        (
            "defaultdict",
            "library/collections.html",
            "defaultdict objects",
            "defaultdict-objects",
            "Return a new dictionary-like object",  # a heading over its entry reads on into it
        ),
    ],
)
def test_a_result_links_to_the_section_that_answers_and_quotes_it(
    client: httpx.Client,
    site: tuple[Path, str, Path],
    q: str,
    page: str,
    heading: str,
    anchor: str,
    quoted: str,
) -> None:
    url = site[1] + page
    hit = _result(client, q, url)
    assert hit["section"] == {"heading": heading, "anchor": anchor}
    assert hit["link"] == f"{url}#{anchor}" and hit["url"] == url
    doc = _stored(site[2], url)
    [section] = [s for s in doc.sections if s.anchor == anchor]
    assert doc.body.startswith(heading, section.start)
    snippet = hit["snippet_text"].removesuffix(" …")
    assert doc.body.startswith(snippet, section.start + len(heading) + 1), "how the section opens"
    assert quoted in snippet and len(snippet) > 100, snippet


def test_a_page_about_the_query_links_to_its_top(client: httpx.Client, site: tuple[Path, str, Path]) -> None:
    hit = _result(client, "json", site[1] + "library/json.html")
    assert hit["section"] is None and hit["link"] == hit["url"]


def test_the_search_page_shows_jump_to_and_the_click_lands_on_the_section(
    client: httpx.Client, site: tuple[Path, str, Path]
) -> None:
    html = client.get("/", params={"q": "zip", "ranker": "bm25"}).text
    jump = re.search(r'<p class="section">Jump to: <a href="([^"]+)"[^>]*>([^<]+)</a></p>', html)
    assert jump is not None and jump.group(2) == ZIP
    title_link = re.search(r'<h2><a href="([^"]+)"[^>]*>Built-in Functions', html)
    assert title_link is not None and title_link.group(1) == jump.group(1), "the title opens the section too"
    href = jump.group(1).replace("&amp;", "&")
    url = site[1] + "library/functions.html"
    if href.startswith("/r?"):  # clicks logged: the redirect carries the anchor
        location = client.get(href, follow_redirects=False).headers["location"]
    else:
        location = href
    assert location == f"{url}#zip"
    doc_id = _result(client, "zip", url)["doc_id"]
    click = {"i": "0" * 32, "p": "1", "d": doc_id}
    assert (
        client.get("/r", params={**click, "a": "zip"}, follow_redirects=False).headers["location"]
        == f"{url}#zip"
    )
    forged = client.get("/r", params={**click, "a": "not-on-the-page"}, follow_redirects=False)
    assert forged.headers["location"] == url, "an anchor the page does not have is dropped"


def test_the_cli_prints_the_section(site: tuple[Path, str, Path]) -> None:
    shown = CliRunner().invoke(
        app, ["search", "zip", "--index", str(site[2]), "--ranker", "bm25"], env={"COLUMNS": "300"}
    )
    assert shown.exit_code == 0, shown.output
    assert f"{site[1]}library/functions.html#zip" in shown.output and f"jump to: {ZIP}" in shown.output


def test_an_index_built_without_sections_serves_as_before_with_the_same_ranking(
    site: tuple[Path, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("retrieval.index.lexical_writer.stored_sections", lambda *_: [])
    build_index(crawled_documents(site[0]), tmp_path / "old", shards=2)
    monkeypatch.undo()
    settings = SearchSettings(use_vectors=False, cache_entries=0)
    old, new = SearchService.open(tmp_path / "old", settings), SearchService.open(site[2], settings)
    try:
        for q in ("zip", "defaultdict", "default dict", "json dumps", "zip two lists"):
            before = old.search(SearchRequest(q, ranker="bm25", size=10))
            after = new.search(SearchRequest(q, ranker="bm25", size=10))
            assert all(hit.section is None and hit.link == hit.url for hit in before.hits)
            assert [(h.doc_id, h.score) for h in before.hits] == [(h.doc_id, h.score) for h in after.hits]
            assert before.total == after.total
        assert any(hit.section is not None for hit in after.hits)
    finally:
        old.close()
        new.close()


def test_sections_cross_the_wire_from_a_shard_process(site: tuple[Path, str, Path]) -> None:
    """A shard served over HTTP (``trawl shard serve``) hands back the same sections."""
    url = site[1] + "library/functions.html"
    local = _stored(site[2], url)
    with http_broker(site[2], 2, SearchSettings(use_vectors=False)) as broker:
        found, failed = broker.fetch_reporting(
            {0: [local.doc_id], 1: [local.doc_id]}, time.perf_counter() + 30
        )
    assert not failed and found[local.doc_id].sections == local.sections
    assert any(s.anchor == "zip" for s in local.sections)
