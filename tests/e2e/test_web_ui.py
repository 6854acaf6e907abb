"""The web UI in a real browser: Debian's headless Chromium driven by Playwright.

Loads the search page, searches, pages, opens "why this result", and checks that no
script from page content ran (a crawled page carries ``<script>`` and an ``onerror``
image in its text; both must appear as text, never execute).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from api.app import create_app
from core.settings import Settings
from core.types import Document, doc_id_for
from retrieval.index.build import build_index
from tests.conftest import ServerThread

pytestmark = pytest.mark.e2e


def _docs() -> list[Document]:
    docs = []
    for i in range(25):
        url = f"https://site{i % 3}.example/page{i}"
        body = f"Document {i} about search engines and ranking. " + "filler text " * 20
        if i == 3:
            body += ' <script>window.__pwned = 1</script> <img src=x onerror="window.__pwned=2"> search'
        docs.append(
            Document(
                doc_id=doc_id_for(url),
                url=url,
                title=f"Search page {i}",
                body=body,
                host=f"site{i % 3}.example",
                lang="en",
            )
        )
    evil = "javascript:window.__pwned=3"
    docs.append(
        Document(doc_id=doc_id_for(evil), url=evil, title="<b>search</b> evil", body="search", host="evil")
    )
    return docs


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    index = tmp_path_factory.mktemp("ui") / "index"
    build_index(_docs(), index)
    with ServerThread(create_app(Settings(), index_dir=index)) as running:
        yield running


def test_search_page_pages_and_explains_without_running_page_scripts(
    server: ServerThread, browser: object
) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(server.url + "/")
    page.fill("input[name=q]", "search")
    page.click("button[type=submit]")
    page.wait_for_selector("#meta")
    assert "26 results" in page.inner_text("#meta")
    assert page.locator(".result").count() == 10
    first_titles = page.locator(".result h2").all_inner_texts()
    assert all(page.locator("mark").count() > 0 for _ in [0])
    # Paging.
    page.click("a[rel=next]")
    page.wait_for_selector("#meta")
    assert "page 2 of 3" in page.inner_text("#meta")
    second_titles = page.locator(".result h2").all_inner_texts()
    assert set(first_titles).isdisjoint(second_titles)
    # The page with markup in its text: shown as text, not run.
    page.goto(server.url + "/?q=pwned+search")
    page.wait_for_selector(".result")
    assert "<script>window.__pwned = 1</script>" in page.inner_text(".result .snippet")
    assert page.evaluate("() => window.__pwned === undefined")
    # A javascript: URL is never a link; an HTML title is text.
    page.goto(server.url + "/?q=evil")
    assert page.locator("a[href^='javascript']").count() == 0
    assert "<b>search</b> evil" in page.inner_text(".result h2")
    # Explain.
    page.goto(server.url + "/?q=search")
    page.click(".result >> nth=0 >> a.why")
    page.wait_for_selector("#explain")
    table = page.inner_text("#explain")
    assert "Score" in table and "Rank by word match" in table
    parts = page.locator("#score-parts")
    added = sum(
        float(v) for v in parts.locator("tr[data-part]").evaluate_all("rs => rs.map(r => r.dataset.part)")
    )
    assert abs(added - float(parts.get_attribute("data-score"))) <= 1e-6
    assert page.evaluate("() => window.__pwned === undefined")
    assert dialogs == []
    page.close()


def test_filters_in_the_form(server: ServerThread, browser: object) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(server.url + "/")
    page.fill("input[name=q]", "search")
    page.fill("input[name=site]", "site1.example")
    page.click("button[type=submit]")
    page.wait_for_selector("#meta")
    urls = page.locator(".result .url").all_inner_texts()
    assert urls and all("site1.example" in u for u in urls)
    page.close()
