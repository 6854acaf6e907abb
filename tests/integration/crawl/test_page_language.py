"""A crawled page without a ``lang`` attribute gets the language of its text, stored with the
document and shown by ``trawl inspect`` (real pages: the Python docs and the Debian Reference)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from tests.fixtures.demo_site import DEMO, PAGES, demo_site

GERMAN = Path("/usr/share/debian-reference/ch01.de.html")
pytestmark = pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")
SETTINGS = CrawlSettings(allow_loopback=True, min_delay_s=0.0, response_time_factor=0.0, max_depth=1)


def test_pages_without_lang_are_stored_with_their_identified_language(tmp_path: Path) -> None:
    root = tmp_path / "site"
    with demo_site(root) as (seed, _):
        hidden = root / PAGES[0]
        html = hidden.read_text(encoding="utf-8")
        assert '<html lang="en">' in html
        hidden.write_text(html.replace('<html lang="en">', "<html>"), encoding="utf-8")
        (root / "kapitel.html").write_text(
            "<html><head><title>Kapitel 1. GNU/Linux-Lehrstunde</title></head><body><h1>Kapitel 1</h1>"
            "<p>Ich denke, dass das Erlernen eines Rechnersystems wie das Erlernen einer neuen "
            "Fremdsprache ist. Obwohl Anleitungen und Dokumentation hilfreich sind, "
            "müssen Sie es selbst üben.</p></body></html>",
            encoding="utf-8",
        )
        (root / "kurz.html").write_text("<html><body><p>Danke schön!</p></body></html>", encoding="utf-8")
        if GERMAN.exists():
            shutil.copy(GERMAN, root / "ch01.de.html")
        index = root / "index.html"
        links = "".join(
            f'<li><a href="{p}">{p}</a></li>' for p in ("kapitel.html", "kurz.html", "ch01.de.html")
        )
        index.write_text(index.read_text().replace("</ul>", links + "</ul>"))
        asyncio.run(Crawler(tmp_path / "data", SETTINGS, seeds=[seed]).run())

    docs = {
        d.url.removeprefix(seed): d.lang for d in DocStore(CrawlDir(tmp_path / "data").docs).iter_documents()
    }
    assert docs[PAGES[0]] == "en", "identified: its lang attribute was removed"
    assert docs[PAGES[1]] == "en"
    assert docs["kapitel.html"] == "de"
    assert docs["kurz.html"] == "", "two words: too little text to call"
    if GERMAN.exists():
        assert docs["ch01.de.html"] == "de"

    runner = CliRunner()
    shown = runner.invoke(app, ["inspect", seed + "kapitel.html", "--data", str(tmp_path / "data"), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["lang"] == "de"
    table = runner.invoke(
        app, ["inspect", seed + "kurz.html", "--data", str(tmp_path / "data")], env={"COLUMNS": "200"}
    )
    assert table.exit_code == 0, table.output
    assert "Language" in table.output and "too little text" in table.output
