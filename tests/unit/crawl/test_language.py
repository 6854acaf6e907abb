"""A page's language: declared by the page or its Content-Language header, else identified from its text."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawl.extraction.language import identify_language, language_tag, page_language
from crawl.extraction.page import parse_html

BOOK = Path("/usr/share/debian-reference")
PYDOCS = Path("/usr/share/doc/python3.11/html")

# Sentences of the Debian Reference's six editions (debian-reference 2.100).
PARAGRAPHS = {
    "de": "Obwohl der aptitude-Befehl reichhaltige Funktionen mit sich bringt, wie z.B. seinen "
    "erweiterten Paketabhängigkeitsauflöser",
    "en": "It is generally a good idea not to create complicated symbolic links or hardlinks at all "
    "unless you have a very good reason.",
    "es": "No establezca de esta manera privilegios para cuentas de usuarios no privilegiados en una "
    "estación de trabajo multiusuario.",
    "fr": "Vous pouvez configurer le matériel au moment du démarrage pour activer les fonctionnalités "
    "désirées de ce matériel.",
    "ja": "依存関係の問題を最小限とすべく、できるだけ多くのパッケージを削除 "
    "(remove で、完全削除 purge ではありません!) します。",
    "zh": "在 testing 版里面,软件包更新比较及时，大家如果在 apt 源里面设置了 testing 源,"
    "则可以直接用 apt-get install debian-reference-zh-cn 命令安装该软件包。",
}


@pytest.mark.parametrize("lang", sorted(PARAGRAPHS))
def test_a_short_real_paragraph_is_identified(lang: str) -> None:
    assert identify_language(PARAGRAPHS[lang]) == lang


@pytest.mark.parametrize(
    "text", ["", "Hello world", "Danke schön, Herr Müller", "日本語", "GNU/Linux 12.04 -- x86_64"]
)
def test_too_little_text_is_not_called(text: str) -> None:
    assert identify_language(text) == ""


def test_title_and_headings_count_when_the_body_is_empty() -> None:
    assert (
        page_language(
            "Kapitel 2. Debian-Paketmanagement", ["Voraussetzungen für die Debian-Paketverwaltung"], ""
        )
        == "de"
    )
    assert page_language("Debian", [], "") == ""


def test_language_tags_keep_the_primary_language() -> None:
    assert [language_tag(t) for t in ("zh-CN", "pt_BR", " EN ", "de", "")] == ["zh", "pt", "en", "de", ""]
    assert language_tag("de, en") == "", "a header naming two languages says neither"


FRENCH = f"<p>{PARAGRAPHS['fr']}</p>"


def test_the_html_lang_attribute_wins_over_the_header_and_the_text() -> None:
    page = parse_html(
        f"<html lang='es-MX'><body>{FRENCH}</body></html>", "http://a.test/", content_language="de"
    )
    assert (page.lang, page.lang_source) == ("es", "html")


def test_the_meta_pragma_comes_before_the_header() -> None:
    html = f'<html><head><meta http-equiv="Content-Language" content="it"></head><body>{FRENCH}</body></html>'
    page = parse_html(html, "http://a.test/", content_language="de")
    assert (page.lang, page.lang_source) == ("it", "meta")


def test_the_header_comes_before_identification() -> None:
    page = parse_html(f"<html><body>{FRENCH}</body></html>", "http://a.test/", content_language="de-AT")
    assert (page.lang, page.lang_source) == ("de", "header")


def test_without_a_declaration_the_text_says() -> None:
    page = parse_html(f"<html><body>{FRENCH}</body></html>", "http://a.test/", content_language="fr, en")
    assert (page.lang, page.lang_source) == ("fr", "text")
    tiny = parse_html("<html><title>Start</title><body><a href='x'>x</a></body></html>", "http://a.test/")
    assert (tiny.lang, tiny.lang_source) == ("", "")


@pytest.mark.skipif(not BOOK.exists(), reason="debian-reference is not installed")
@pytest.mark.parametrize(
    "edition,lang", [("de", "de"), ("es", "es"), ("fr", "fr"), ("ja", "ja"), ("zh-cn", "zh")]
)
def test_a_book_page_without_lang_gets_its_language(edition: str, lang: str) -> None:
    path = BOOK / f"ch02.{edition}.html"
    if not path.exists():
        pytest.skip(f"debian-reference-{edition} is not installed")
    page = parse_html(path.read_text(encoding="utf-8"), f"http://a.test/{path.name}")
    assert (page.lang, page.lang_source) == (lang, "text")


@pytest.mark.skipif(not PYDOCS.exists(), reason="python3.11-doc is not installed")
def test_a_python_docs_page_with_its_lang_removed_is_english() -> None:
    html = (PYDOCS / "library" / "json.html").read_text(encoding="utf-8")
    assert '<html lang="en">' in html
    page = parse_html(html.replace('<html lang="en">', "<html>"), "http://a.test/json.html")
    assert (page.lang, page.lang_source) == ("en", "text")
