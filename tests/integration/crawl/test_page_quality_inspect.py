"""A crawled listing page is stored with its link words and shown demoted by ``trawl inspect``;
a real page of the Python docs is shown at full quality (a real crawl on loopback)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from tests.fixtures.demo_site import DEMO, PAGES, demo_site

pytestmark = pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")
SETTINGS = CrawlSettings(allow_loopback=True, min_delay_s=0.0, response_time_factor=0.0, max_depth=1)


def test_inspect_shows_a_listing_page_demoted_and_a_reference_page_not(tmp_path: Path) -> None:
    with demo_site(tmp_path / "site") as (seed, _):
        asyncio.run(Crawler(tmp_path / "data", SETTINGS, seeds=[seed]).run())
    runner = CliRunner()

    def quality(url: str) -> dict[str, object]:
        shown = runner.invoke(app, ["inspect", url, "--data", str(tmp_path / "data"), "--json"])
        assert shown.exit_code == 0, shown.output
        found: dict[str, object] = json.loads(shown.output)["quality"]
        return found

    start = quality(seed)  # the start page: a list of links to the pages
    assert float(str(start["score"])) < 1.0 and float(str(start["link_density"])) > 0.5
    reasons = start["reasons"]
    assert isinstance(reasons, list) and any("links" in str(r) for r in reasons)
    page = quality(seed + PAGES[1])
    assert page["score"] == 1.0 and page["reasons"] == []
    table = runner.invoke(app, ["inspect", seed, "--data", str(tmp_path / "data")], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "Page quality" in table.output and "are links" in table.output
