"""The pages people read, in headless Chromium over a crawl of real demo pages.

Result titles and snippets (no site-name suffix, no pilcrow, inline code kept
together), the explain view (per-term BM25, back to the page the user came from), the
hosts and inspect pages (readable, inside 1280 px, no raw floats or empty rows), the
site filter's placeholder, and ``/docs`` rendering with every non-loopback request
refused. Screenshots go to the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.app import create_app
from core.settings import ApiSettings, CrawlSettings, Settings
from crawl.run.loop import Crawler
from retrieval.index.build import build_index
from retrieval.index.docs_source import crawled_documents
from tests.conftest import ServerThread
from tests.fixtures.demo_site import DEMO, demo_site

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed"),
]
WIDTH = 1280
EPOCH_FLOAT = re.compile(r"\b1[6-9]\d{8}\.\d+")


class Served:
    def __init__(self, server: ServerThread, site: str, shots: Path) -> None:
        self.server, self.site, self.shots = server, site, shots

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("pages")
    with demo_site(root / "site") as (seed, _requests):
        settings = CrawlSettings(allow_loopback=True, min_delay_s=0.0, response_time_factor=0.0, max_depth=1)
        asyncio.run(Crawler(root / "crawl", settings, seeds=[seed]).run())
        build_index(crawled_documents(root / "crawl"), root / "index")
        app = create_app(Settings(api=ApiSettings(crawl_data=root / "crawl")), index_dir=root / "index")
        with ServerThread(app) as server:
            yield Served(server, seed, root / "screenshots")


def _page(browser: object) -> object:
    return browser.new_page(viewport={"width": WIDTH, "height": 900})  # type: ignore[attr-defined]


def test_results_show_clean_titles_and_snippets(served: Served, browser: object) -> None:
    page = _page(browser)
    page.goto(served.url + "/?q=set_event_loop")
    page.wait_for_selector(".result")
    titles = page.locator(".result h2").all_inner_texts()
    assert titles[0] == "asyncio — Event Loop" or titles[0].startswith("Event Loop"), titles
    assert not any("Python 3.11" in t and "documentation" in t for t in titles)
    snippets = " ".join(page.locator(".result .snippet").all_inner_texts())
    assert "¶" not in snippets
    # The first result opens at the function's entry: its heading under "Jump to", its text as the snippet.
    assert page.locator(".result .section").first.inner_text() == "Jump to: asyncio.set_event_loop(loop)"
    assert snippets.startswith("Set loop as the current event loop"), snippets
    host = served.site.split("/")[2]
    assert page.get_attribute("input[name=site]", "placeholder") == host
    page.goto(served.url + f"/?q=json&site={host}")
    assert page.locator(".result").count() > 0
    page.screenshot(path=str(served.shots / "results.png"), full_page=True)
    page.close()


def test_explain_reads_per_term_and_returns_to_the_page(served: Served, browser: object) -> None:
    page = _page(browser)
    page.goto(served.url + "/?q=path+loop+json&page=2")
    page.wait_for_selector("#meta")
    if page.locator(".result").count() == 0:  # fewer than a page of results: explain from page 1
        page.goto(served.url + "/?q=path+loop+json")
    came_from = page.url
    page.click(".result >> nth=0 >> a.why")
    page.wait_for_selector("#explain")
    terms = page.inner_text("#bm25-terms")
    assert "query word" in terms and "text" in terms and "_" not in terms
    rows = [line.split("\t") for line in terms.splitlines()]
    assert rows[-1][0] == "total"
    for column in range(1, len(rows[0])):  # each column's total is the sum of its words
        cells = [float(r[column]) for r in rows[1:-1] if r[column]]
        assert abs(sum(cells) - float(rows[-1][column])) <= 5e-4 * len(cells), (column, rows)
    cells = page.locator("#explain td, #vector td, #other td").all_inner_texts()
    assert cells and all(c.strip() not in ("", "—", "{}", "[]") for c in cells)
    page.screenshot(path=str(served.shots / "explain.png"), full_page=True)
    page.click("#back")
    page.wait_for_selector("#meta")
    assert page.url == came_from
    page.close()


def test_hosts_page_is_readable_and_fits(served: Served, browser: object) -> None:
    page = _page(browser)
    page.goto(served.url + "/hosts")
    page.wait_for_selector("#hosts")
    header = page.locator("#hosts tr >> nth=0").inner_text()
    assert "Backlog" in header and "_" not in header
    box = page.locator("#hosts").bounding_box()
    assert box is not None and box["x"] + box["width"] <= WIDTH
    assert page.evaluate("() => document.documentElement.scrollWidth") <= WIDTH
    text = page.inner_text("#hosts")
    assert not EPOCH_FLOAT.search(text) and " ms" in text
    # The host name on one line (it wrapped over three), and Done explained against Indexed.
    host = page.locator("#hosts tr >> nth=1 >> td >> nth=0").bounding_box()
    done = page.locator("#hosts tr >> nth=1 >> td >> nth=1").bounding_box()
    assert host is not None and done is not None and host["height"] <= done["height"] + 1
    names = page.locator("#hosts tr >> nth=0 >> th").all_inner_texts()
    row = page.locator("#hosts tr >> nth=1 >> td").all_inner_texts()
    assert 0 < int(row[names.index("Indexed")]) <= int(row[names.index("Done")])
    assert "duplicates of another page" in page.inner_text("#hosts-note")
    page.screenshot(path=str(served.shots / "hosts.png"), full_page=True)
    page.close()


def test_inspect_page_is_readable(served: Served, browser: object) -> None:
    page = _page(browser)
    page.goto(served.url + "/inspect?url=" + served.site + "library/json.html")
    page.wait_for_selector("#inspect")
    text = page.inner_text("#inspect")
    assert "Last fetched" in text and "UTC" in text and "In the index" in text
    assert not EPOCH_FLOAT.search(text) and "cluster []" not in text and "state." not in text
    cells = page.locator("#inspect td").all_inner_texts()
    assert cells and all(c.strip() for c in cells)
    history = page.inner_text("#history")
    assert "KB" in history and not EPOCH_FLOAT.search(history)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= WIDTH
    page.screenshot(path=str(served.shots / "inspect.png"), full_page=True)
    page.close()


def test_api_docs_render_with_the_network_refused(served: Served, browser: object) -> None:
    page = _page(browser)
    refused: list[str] = []

    def only_loopback(route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        if url.startswith("http://127.0.0.1:"):
            route.continue_()  # type: ignore[attr-defined]
        else:
            refused.append(url)
            route.abort()  # type: ignore[attr-defined]

    page.route("**/*", only_loopback)  # type: ignore[attr-defined]
    page.goto(served.url + "/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=20_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/v1/search" in paths and "/healthz" in paths
    page.screenshot(path=str(served.shots / "docs.png"), full_page=True)
    assert refused == []
    page.close()
