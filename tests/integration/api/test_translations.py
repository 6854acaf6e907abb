"""Translations shown once: a real crawl on loopback (the Debian Reference's appendix in five
languages, hreflang pages, language directories and look-alikes), indexed by the build and by
in-place updates, served over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings, SearchSettings
from crawl.run.loop import Crawler
from retrieval.index.build import build_index
from retrieval.index.docs_source import crawled_documents
from retrieval.index.incremental import IncrementalIndexer
from retrieval.index.lexical import LexicalShard
from retrieval.index.root import IndexRoot
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.demo_site import demo_site
from tests.fixtures.serving import api_client

BOOK = Path("/usr/share/debian-reference")
BOOK_LANGS = ("en", "de", "fr", "ja", "zh-cn")
pytestmark = pytest.mark.skipif(
    not all((BOOK / f"apa.{lang}.html").exists() for lang in BOOK_LANGS),
    reason="debian-reference-{en,de,fr,ja,zh-cn} are not installed",
)
CRAWL = CrawlSettings(allow_loopback=True, min_delay_s=0.0, response_time_factor=0.0, max_depth=1)
AUTHORS = "goerzen othman"
"""Words of the appendix's credits, in every language's edition and nowhere else."""
TRIO = {"en": "intro/welcome.html", "de": "intro/willkommen.html", "fr": "intro/bienvenue.html"}
TEXT = {
    "en": "Welcome to the zyxoflux handbook. This guide explains how the tool is installed, how it is "
    "configured for a small office and what to do when the network does not answer.",
    "de": "Willkommen im Handbuch von zyxoflux. Diese Anleitung erklärt, wie das Werkzeug installiert "
    "und für ein kleines Büro eingerichtet wird und was zu tun ist, wenn das Netz nicht antwortet.",
    "fr": "Bienvenue dans le manuel de zyxoflux. Ce guide explique comment installer l'outil, comment "
    "le configurer pour un petit bureau et que faire lorsque le réseau ne répond plus.",
}
SETUP = {
    "en": "Setting up zyxoflux takes three steps: unpack the archive, run the installer as root and "
    "answer its questions about the mail server and the printer.",
    "de": "Die Einrichtung von zyxoflux braucht drei Schritte: das Archiv entpacken, das "
    "Installationsprogramm als root starten und seine Fragen zum Mailserver und zum Drucker beantworten.",
    "fr": "L'installation de zyxoflux se fait en trois étapes : décompresser l'archive, lancer "
    "l'installateur en root et répondre à ses questions sur le serveur de courrier et l'imprimante.",
}
LOOKALIKES = {
    "it/guide/setup.html": "The IT department keeps zyxoflux running on every desk: ask the help desk "
    "before changing printers, passwords or the office network.",
    "v1/guide/setup.html": "Version one of zyxoflux read its settings from a single file in the home "
    "directory and had no plugins at all.",
    "v2/guide/setup.html": "The second major release of zyxoflux moved configuration into a database, "
    "added plugins and dropped support for old operating systems.",
}


def _page(lang: str, title: str, body: str, head: str = "") -> str:
    return f'<html lang="{lang}"><head><title>{title}</title>{head}</head><body><p>{body}</p></body></html>'


def _write_site(root: Path) -> list[str]:
    """The site's pages (paths); the start page links them all."""
    paths = []
    for lang in BOOK_LANGS:
        shutil.copy(BOOK / f"apa.{lang}.html", root / f"apa.{lang}.html")  # no lang attribute: identified
        paths.append(f"apa.{lang}.html")
    alternates = "".join(f'<link rel="alternate" hreflang="{lang}" href="/{p}">' for lang, p in TRIO.items())
    alternates += '<link rel="alternate" hreflang="x-default" href="/">'
    (root / "intro").mkdir()
    for lang, path in TRIO.items():
        (root / path).write_text(_page(lang, f"zyxoflux {lang}", TEXT[lang], alternates), encoding="utf-8")
        paths.append(path)
    # A site-wide language switcher on an unrelated page: its set of versions is not the trio's.
    switcher = "".join(
        f'<link rel="alternate" hreflang="{lang}" href="/{TRIO[lang]}">' for lang in ("de", "fr")
    )
    switcher += '<link rel="alternate" hreflang="en" href="/news.html">'
    news = (
        "News: zyxoflux 3.2 is out, with faster start-up, a new icon set and many small repairs to the tools."
    )
    (root / "news.html").write_text(_page("en", "News", news, switcher), encoding="utf-8")
    paths.append("news.html")
    for lang in ("en", "de", "fr"):
        (root / lang / "guide").mkdir(parents=True)
        path = f"{lang}/guide/setup.html"
        (root / path).write_text(_page(lang, f"Setup {lang}", SETUP[lang]), encoding="utf-8")
        paths.append(path)
    for path, text in LOOKALIKES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(_page("en", path, text), encoding="utf-8")
        paths.append(path)
    links = "".join(f'<li><a href="/{p}">page {i}</a></li>' for i, p in enumerate(paths))
    (root / "index.html").write_text(f"<html><title>Start</title><body><ul>{links}</ul></body></html>")
    return paths


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """(crawl directory, site URL, index of the build) after a real crawl of the site."""
    tmp = tmp_path_factory.mktemp("translations")
    root = tmp / "site"
    root.mkdir()
    with demo_site(root, pages=()) as (seed, _):
        _write_site(root)
        asyncio.run(Crawler(tmp / "data", CRAWL, seeds=[seed]).run())
    build_index(crawled_documents(tmp / "data"), tmp / "index", shards=2)
    return tmp / "data", seed, tmp / "index"


@pytest.fixture(scope="module")
def client(site: tuple[Path, str, Path]) -> Iterator[httpx.Client]:
    with api_client(site[2]) as c:
        yield c


def _groups(index: Path, seed: str) -> dict[str, str]:
    """path → stored translation group, over every shard of ``index``."""
    out: dict[str, str] = {}
    for shard in sorted(index.glob("shard-*")):
        for doc in LexicalShard(shard / "lexical").iter_stored():
            out[doc.url.removeprefix(seed)] = doc.translation_group
    return out


def test_translations_share_a_group_and_look_alikes_do_not(site: tuple[Path, str, Path]) -> None:
    _, seed, index = site
    groups = _groups(index, seed)
    book = {groups[f"apa.{lang}.html"] for lang in BOOK_LANGS}
    assert len(book) == 1 and next(iter(book)).startswith("p"), "ch.LANG.html markers, languages identified"
    trio = {groups[path] for path in TRIO.values()}
    assert len(trio) == 1 and next(iter(trio)).startswith("h"), "the same declared hreflang set"
    guides = {groups[f"{lang}/guide/setup.html"] for lang in ("en", "de", "fr")}
    assert len(guides) == 1 and next(iter(guides)).startswith("p"), "a language directory"
    assert len(book | trio | guides) == 3
    assert groups["news.html"] not in book | trio | guides, "a switcher's set is not the trio's"
    assert groups["it/guide/setup.html"] == "", "/it/ on an English page is no language marker"
    assert groups["v1/guide/setup.html"] == groups["v2/guide/setup.html"] == ""
    assert groups[""] == "", "the start page"


@pytest.mark.parametrize(
    ("header", "shown"),
    [
        ({"Accept-Language": "ja"}, "ja"),
        ({"Accept-Language": "de-CH, fr;q=0.9, en;q=0.5"}, "de"),
        ({"Accept-Language": "en;q=0.2, zh-CN"}, "zh-cn"),
        ({}, "en"),  # rank.user_lang
    ],
)
def test_a_page_in_five_languages_is_one_result_in_the_readers_language(
    client: httpx.Client, site: tuple[Path, str, Path], header: dict[str, str], shown: str
) -> None:
    seed = site[1]
    body = client.get("/v1/search", params={"q": AUTHORS, "ranker": "bm25"}, headers=header).json()
    assert body["total"] == 5, "every edition matches: total counts documents"
    [hit] = body["results"]
    assert hit["url"] == f"{seed}apa.{shown}.html"
    others = [lang for lang in BOOK_LANGS if lang != shown]
    assert hit["translations"] == sorted(
        ({"lang": lang.split("-")[0], "url": f"{seed}apa.{lang}.html"} for lang in others),
        key=lambda t: (t["lang"], t["url"]),
    )


def test_lang_filter_shows_one_language_without_translations(client: httpx.Client) -> None:
    body = client.get("/v1/search", params={"q": f"{AUTHORS} lang:fr", "ranker": "bm25"}).json()
    assert [(h["lang"], h["translations"]) for h in body["results"]] == [("fr", [])]


def test_pages_hold_each_document_once(client: httpx.Client) -> None:
    """Size 3 over 10 matching documents (two groups of three, four singles): every document is on
    exactly one page, as a result or as a translation, through page numbers and through cursors."""
    params = {"q": "zyxoflux", "ranker": "bm25", "size": 3}
    french = {"Accept-Language": "fr"}
    first = client.get("/v1/search", params=params, headers=french).json()
    total = first["total"]
    assert total == 10
    by_page: list[str] = []
    for number in range(1, math.ceil(total / 3) + 1):
        body = client.get("/v1/search", params={**params, "page": number}, headers=french).json()
        for hit in body["results"]:
            by_page.extend([hit["url"], *(t["url"] for t in hit["translations"])])
    by_cursor: list[str] = []
    body = first
    while True:
        for hit in body["results"]:
            by_cursor.extend([hit["url"], *(t["url"] for t in hit["translations"])])
        if not body["next_cursor"]:
            break
        body = client.get("/v1/search", params={"cursor": body["next_cursor"]}, headers=french).json()
    for seen in (by_page, by_cursor):
        assert len(seen) == len(set(seen)) == total, seen
    assert by_page == by_cursor


def test_one_page_of_everything_folds_both_groups(client: httpx.Client, site: tuple[Path, str, Path]) -> None:
    params = {"q": "zyxoflux", "ranker": "bm25", "size": 10}
    body = client.get("/v1/search", params=params, headers={"Accept-Language": "fr"}).json()
    folded = {h["url"].removeprefix(site[1]): [t["lang"] for t in h["translations"]] for h in body["results"]}
    assert folded == {
        "intro/bienvenue.html": ["de", "en"],  # hreflang
        "fr/guide/setup.html": ["de", "en"],  # a language directory
        "news.html": [],
        **{path: [] for path in LOOKALIKES},
    }


def test_search_page_links_the_other_languages(client: httpx.Client, site: tuple[Path, str, Path]) -> None:
    seed = site[1]
    html = client.get("/", params={"q": AUTHORS}, headers={"Accept-Language": "fr"}).text
    assert html.count('class="result"') == 1 and f"{seed}apa.fr.html" in html
    assert "Also in: " in html
    for lang in ("de", "en", "ja", "zh"):
        assert f'hreflang="{lang}"' in html
    assert f'href="{seed}apa.zh-cn.html" hreflang="zh"' in html


def test_an_index_built_without_groups_serves_every_version(
    site: tuple[Path, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index built before groups were kept (no key in its stored documents) opens and serves
    each edition as its own result."""
    monkeypatch.setattr("retrieval.index.lexical_writer.translation_group", lambda *_: "")
    build_index(crawled_documents(site[0]), tmp_path / "old")
    monkeypatch.undo()
    assert set(_groups(tmp_path / "old", site[1]).values()) == {""}
    service = SearchService.open(tmp_path / "old", SearchSettings(use_vectors=False, cache_entries=0))
    try:
        response = service.search(SearchRequest(AUTHORS, ranker="bm25", reader_lang="ja"))
    finally:
        service.close()
    assert len(response.hits) == 5 and all(not hit.translations for hit in response.hits)


def test_a_page_updated_in_place_keeps_its_group(site: tuple[Path, str, Path], tmp_path: Path) -> None:
    data, seed, _ = site
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    indexer = IncrementalIndexer(copy, tmp_path / "index", shards=1)
    generation = indexer.compact()
    store = DocStore(CrawlDir(copy).docs)
    german = store.documents_by_url([f"{seed}apa.de.html"])[f"{seed}apa.de.html"]
    later = (german.fetched_at or 0.0) + 1
    store.append([dataclasses.replace(german, body=german.body + " Nachtrag", fetched_at=later)])
    assert indexer.step() is not None
    served = IndexRoot(tmp_path / "index").path_of(generation)
    shard = LexicalShard(served / "shard-0000" / "lexical")
    [stored] = [d for d in shard.iter_stored() if d.url == german.url]
    assert stored.body.endswith("Nachtrag"), "replaced in place"
    groups = _groups(served, seed)
    assert groups["apa.de.html"] == groups["apa.en.html"] != ""
