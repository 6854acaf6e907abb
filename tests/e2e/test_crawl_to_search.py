"""Crawl a local site with ``trawl crawl``, index it with ``trawl index --data``, search it.

The whole user path through the real CLI: what robots.txt forbids and what a page
marks ``noindex`` must not be found; a duplicate is indexed once; a page is found by
the anchor text of the links pointing to it even when its own text lacks the word.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

pytestmark = pytest.mark.e2e


HOME = (
    "<!doctype html><html lang='en'><head><title>Aardvark home</title></head><body><nav>"
    "<a href='/manual'>zebrafish manual</a> <a href='/copy'>copy</a> <a href='/hidden'>hidden</a> "
    f"<a href='/secret'>secret</a></nav><main><p>aardvark {prose(1)}</p></main></body></html>"
)


def _site() -> Site:
    site = Site()
    site.raw("/robots.txt", b"User-agent: *\nDisallow: /secret\n", content_type="text/plain")
    site.page("/", HOME)
    site.page("/copy", HOME)  # an exact duplicate: indexed once
    site.page("/manual", html_page("Operating guide", "quokka " + prose(2)))
    site.page(
        "/hidden", html_page("Hidden", "wombat " + prose(3), head='<meta name="robots" content="noindex">')
    )
    site.page("/secret", html_page("Secret", "platypus " + prose(4)))
    return site


@pytest.fixture(scope="module")
def server() -> Iterator[HostServer]:
    running = HostServer(_site(), "127.0.0.16").start()
    yield running
    running.stop()


def _search(index: Path, query: str) -> list[str]:
    result = CliRunner().invoke(app, ["search", query, "--index", str(index), "--json"])
    assert result.exit_code == 0, result.output
    return [hit["url"] for hit in json.loads(result.stdout)["results"]]


def test_crawl_index_search(server: HostServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAWL_CRAWL__MIN_DELAY_S", "0")
    data, index = tmp_path / "crawl", tmp_path / "index"
    runner = CliRunner()
    crawled = runner.invoke(
        app, ["crawl", server.url("/"), "--data", str(data), "--allow-private", "--no-progress", "--json"]
    )
    assert crawled.exit_code == 0, crawled.output
    summary = json.loads(crawled.stdout.strip().splitlines()[-1])
    assert (summary["indexed"], summary["duplicates"]) == (2, 1)
    assert "/secret" not in server.recorder.paths()

    built = runner.invoke(app, ["index", "--data", str(data), "--index", str(index)])
    assert built.exit_code == 0, built.output

    assert _search(index, "aardvark") == [server.url("/")]
    assert _search(index, "quokka") == [server.url("/manual")]
    assert _search(index, "zebrafish") == [server.url("/manual")]  # only in inbound anchor text
    assert _search(index, "wombat") == []  # noindex
    assert _search(index, "platypus") == []  # disallowed by robots.txt, never fetched
