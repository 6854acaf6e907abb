"""``trawl reprocess`` and ``trawl replay`` over real Sphinx pages served on loopback.

A crawl made with an older extractor (here: one that leaves pilcrows in titles and
bodies, as the old one did) is reprocessed from its WARC files; the documents must be
the ones a fresh crawl with today's extractor stores, and the site must see no request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.linkgraph import LinkGraphStore
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from crawl.run.reprocess import reprocess
from tests.fixtures.demo_site import DEMO, PAGES, demo_site

pytestmark = pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    with demo_site(tmp_path / "site") as running:
        yield running


SETTINGS = CrawlSettings(allow_loopback=True, min_delay_s=0.0, response_time_factor=0.0, max_depth=1)


def _as_old_extractor_left_it(data: Path) -> None:
    """Replace the crawl's docstore and link graph with what an older extractor stored.

    The crawl parses in spawned processes, so the old extraction is re-created from
    today's pages: pilcrows kept in titles, bodies and headings, spaces around inline
    markup, and no link edges.
    """
    layout = CrawlDir(data)
    docs = [
        dataclasses.replace(
            d,
            title=d.title + " ¶",
            body=d.body.replace("(", " ( ") + " ¶",
            headings=tuple(h + "¶" for h in d.headings),
        )
        for d in DocStore(layout.docs).iter_documents()
    ]
    shutil.rmtree(layout.docs)
    shutil.rmtree(layout.links)
    DocStore(layout.docs).append(docs)


def _documents(data: Path) -> dict[str, tuple[Any, ...]]:
    return {
        d.url: (
            d.doc_id,
            d.title,
            d.body,
            d.headings,
            d.description,
            d.lang,
            d.host,
            d.content_hash,
            d.simhash,
            d.outlinks,
        )
        for d in DocStore(CrawlDir(data).docs).iter_documents()
    }


def _edges(data: Path) -> list[tuple[str, str, str]]:
    frame = LinkGraphStore(CrawlDir(data).links).read_edges()
    return sorted(
        zip(
            frame["src_url"].to_list(),
            frame["dst_url"].to_list(),
            frame["anchor_text"].to_list(),
            strict=True,
        )
    )


def test_reprocess_of_an_old_crawl_equals_a_fresh_crawl_without_fetching(
    site: tuple[str, list[str]], tmp_path: Path
) -> None:
    seed, requests = site
    asyncio.run(Crawler(tmp_path / "fresh", SETTINGS, seeds=[seed]).run())
    shutil.copytree(tmp_path / "fresh", tmp_path / "old")
    _as_old_extractor_left_it(tmp_path / "old")
    old, fresh = _documents(tmp_path / "old"), _documents(tmp_path / "fresh")
    assert len(fresh) == len(PAGES) + 1 and old.keys() == fresh.keys() and old != fresh

    fetched = len(requests)
    summary = reprocess(tmp_path / "old", SETTINGS)
    assert len(requests) == fetched, "reprocess must not fetch"
    assert summary.documents == len(fresh)
    assert _documents(tmp_path / "old") == fresh
    assert _edges(tmp_path / "old") == _edges(tmp_path / "fresh")
    body = fresh[seed + PAGES[0]][2]
    assert "asyncio.set_event_loop(loop)" in body and "¶" not in body


def test_replay_shows_the_change_and_reprocess_cli_reports(
    site: tuple[str, list[str]], tmp_path: Path
) -> None:
    seed, requests = site
    asyncio.run(Crawler(tmp_path / "old", SETTINGS, seeds=[seed]).run())
    _as_old_extractor_left_it(tmp_path / "old")
    fetched = len(requests)
    runner = CliRunner()
    url = seed + PAGES[1]
    result = runner.invoke(app, ["replay", url, "--data", str(tmp_path / "old")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "indexed" in result.output
    assert any(line.startswith("-title: ") and line.endswith("¶") for line in result.output.splitlines())
    assert any(line.startswith("+title: ") and "¶" not in line for line in result.output.splitlines())
    result = runner.invoke(app, ["reprocess", "--data", str(tmp_path / "old")])
    assert result.exit_code == 0, result.output
    assert f"{len(PAGES) + 1} documents" in result.output
    result = runner.invoke(app, ["replay", url, "--data", str(tmp_path / "old")])
    assert "equals the stored one" in result.output
    assert len(requests) == fetched
    missing = runner.invoke(app, ["replay", seed + "never.html", "--data", str(tmp_path / "old")])
    assert missing.exit_code != 0
