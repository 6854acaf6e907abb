"""Chinese, Japanese and German readers in headless Chromium over a crawl of the Debian Reference.

Three chapters in four languages crawled on loopback; each reader's browser says its language
(``Accept-Language``). A query typed as that reader would finds its chapter first, opens at the
heading that spells it, and is marked on its own characters: the whole Chinese or Japanese run
(not ッケー inside パッケージ, as when kana lost their voiced marks), the German words but not the
function word "für" (DECISIONS 77, 79).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.app import create_app
from core.settings import ApiSettings, CrawlSettings, Settings
from crawl.run.loop import Crawler
from retrieval.index.build import build_index
from retrieval.index.docs_source import crawled_documents
from tests.conftest import ServerThread
from tests.fixtures.demo_site import demo_site

BOOK = Path("/usr/share/debian-reference")
PAGES = tuple(f"{c}.{lang}.html" for c in ("ch01", "ch02", "ch09") for lang in ("en", "de", "ja", "zh-cn"))
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not all((BOOK / p).exists() for p in PAGES),
        reason="debian-reference-{en,de,ja,zh-cn} are not installed",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("book")
    with demo_site(root / "site", PAGES, source=BOOK) as (seed, _requests):
        settings = CrawlSettings(allow_loopback=True, min_delay_s=0.0, response_time_factor=0.0, max_depth=1)
        asyncio.run(Crawler(root / "crawl", settings, seeds=[seed]).run())
        build_index(crawled_documents(root / "crawl"), root / "index")
        app = create_app(Settings(api=ApiSettings(crawl_data=root / "crawl")), index_dir=root / "index")
        with ServerThread(app) as served:
            yield served


@pytest.mark.parametrize(
    ("reader", "query", "page", "heading", "marked"),
    [
        ("zh-CN", "软件包配置", "ch02.zh-cn.html", "2.1.1. 软件包配置", {"软件包配置", "软件包", "配置"}),
        (
            "ja",
            "パッケージ設定",
            "ch02.ja.html",
            "2.1.1. パッケージ設定",
            {"パッケージ設定", "パッケージ", "設定"},
        ),
        (
            "de-DE",
            "Optionen für aptitude",
            "ch02.de.html",
            "2.2.6. Optionen für Suchmethoden mit aptitude",
            {"optionen", "aptitude"},
        ),
    ],  # fmt: skip
)
def test_a_reader_finds_the_chapter_first_marked_on_the_right_characters(
    server: ServerThread, browser: object, reader: str, query: str, page: str, heading: str, marked: set[str]
) -> None:
    tab = browser.new_page(extra_http_headers={"Accept-Language": reader})  # type: ignore[attr-defined]
    tab.goto(f"{server.url}/?q={query}")
    tab.wait_for_selector(".result")
    first = tab.locator(".result").first
    assert first.locator(".url").inner_text().split("why this result?")[0].endswith(page)
    assert first.locator(".section").inner_text() == f"Jump to: {heading}"
    marks = [m.casefold() for m in first.locator(".snippet mark").all_inner_texts()]
    assert marks and set(marks) <= marked, marks
    assert any(len(m) >= 2 for m in marks)
    tab.close()
