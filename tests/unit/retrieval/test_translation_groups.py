"""Translation group keys (hreflang sets, language markers in URLs) and folding a page's hits."""

from __future__ import annotations

import pytest

from core.types import DocId, Hit
from retrieval.index.translations import translation_group
from retrieval.query.translations import fold_translations, reader_language

BOOK = "https://ref.test/debian-reference/"


def test_pages_declaring_the_same_hreflang_set_share_a_key() -> None:
    versions = ("https://a.test/en/", "https://a.test/de/", "https://a.test/fr/")
    keys = {
        translation_group(url, lang, versions) for url, lang in zip(versions, ("en", "de", "fr"), strict=True)
    }
    assert len(keys) == 1 and keys.pop().startswith("h")
    # Without the self-reference the declared set is the same.
    assert translation_group(versions[0], "en", versions[1:]) == translation_group(
        versions[1], "de", versions
    )
    # A site-wide language switcher points an unrelated page at the home pages: another set.
    assert translation_group("https://a.test/news", "en", versions[1:]) != translation_group(
        versions[1], "de", versions
    )


@pytest.mark.parametrize(
    "urls",
    [
        [(f"{BOOK}ch01.en.html", "en"), (f"{BOOK}ch01.de.html", "de"), (f"{BOOK}ch01.zh-cn.html", "zh")],
        [
            ("https://a.test/de/guide/x", "de"),
            ("https://a.test/fr/guide/x", "fr"),
            ("https://a.test/pt-br/guide/x", "pt"),
        ],
        [("https://a.test/x?a=1&lang=de", "de"), ("https://a.test/x?a=1&lang=ja", "ja")],
        [("https://a.test/index.html.en", "en"), ("https://a.test/index.html.fr", "fr")],
    ],
)
def test_the_same_path_with_a_language_marker_shares_a_key(urls: list[tuple[str, str]]) -> None:
    keys = {translation_group(url, lang) for url, lang in urls}
    assert len(keys) == 1 and keys.pop().startswith("p")


@pytest.mark.parametrize(
    ("url", "lang"),
    [
        ("https://a.test/it/jobs", "en"),  # a department, not Italian
        ("https://a.test/v1/guide", "en"),
        (f"{BOOK}ch01.min.html", "mi"),  # "min" is no language tag
        ("https://a.test/de-facto/x", "de"),  # a word that starts like one
        ("https://a.test/es6/x", "es"),
        (f"{BOOK}ch01.de.html", ""),  # no language identified: the marker names nothing known
        ("https://a.test/xx/guide", "xx"),  # not an ISO 639-1 code
    ],
)
def test_a_part_that_is_not_the_pages_language_is_no_marker(url: str, lang: str) -> None:
    assert translation_group(url, lang) == ""


def test_markers_of_other_paths_or_hosts_do_not_share_a_key() -> None:
    de = translation_group(f"{BOOK}ch01.de.html", "de")
    assert de != translation_group(f"{BOOK}ch02.en.html", "en")
    assert de != translation_group("https://mirror.test/debian-reference/ch01.en.html", "en")


def _hit(n: int, lang: str, group: str = "g") -> Hit:
    return Hit(DocId(n), f"https://a.test/{n}", f"t{n}", "", 10.0 - n, lang=lang, translation_group=group)


def test_a_group_is_shown_once_in_the_preferred_language_at_its_best_place() -> None:
    hits = [_hit(1, "en"), _hit(2, "x", group=""), _hit(3, "de"), _hit(4, "fr"), _hit(5, "en")]
    folded = fold_translations(hits, "de")
    assert [h.doc_id for h in folded] == [3, 2, 5]  # de at en's place; a second English page stays
    assert folded[0].translations == (("en", "https://a.test/1"), ("fr", "https://a.test/4"))
    assert [h.doc_id for h in fold_translations(hits, "ja")] == [1, 2, 5]  # none in ja: the best-ranked
    assert fold_translations(hits, "ja")[0].translations == (
        ("de", "https://a.test/3"),
        ("fr", "https://a.test/4"),
    )


def test_hits_without_a_group_or_a_language_are_left_alone() -> None:
    hits = [
        _hit(1, "en", group=""),
        _hit(2, "de", group=""),
        _hit(3, "", group="g"),
        _hit(4, "fr", group="g"),
    ]
    assert fold_translations(hits, "fr") == hits
    same_language = [_hit(1, "en"), _hit(2, "en")]
    assert fold_translations(same_language, "en") == same_language


@pytest.mark.parametrize(
    ("header", "wanted"),
    [
        ("de-CH, fr;q=0.9, en;q=0.8", "de"),
        ("en;q=0.3, ja", "ja"),
        ("fr;q=0.5, de;q=0.5", "fr"),
        ("*", "en"),
        ("", "en"),
        (None, "en"),
        ("zh_CN;q=abc, ko;q=0.1", "ko"),
    ],
)
def test_the_readers_language_is_the_weightiest_of_accept_language(header: str | None, wanted: str) -> None:
    assert reader_language(header, "en") == wanted
