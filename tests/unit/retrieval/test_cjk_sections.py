"""Chinese and Japanese results open at the heading that spells the query, marked on its characters.

On the Debian Reference's package chapter: a merged run of the query's bigrams counted as one
stem, so "档案库基础" chose a heading holding only 基础; and kana lost their voiced marks, so
"パッケージ" marked ッケー inside パッケージ名. These tests fail on that code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.types import DocId, Section
from crawl.extraction.page import parse_html
from retrieval.index.lexical import StoredDoc
from retrieval.index.lexical_schema import read_sections, stored_sections
from retrieval.query.sections import SectionQuery, snippet_and_section
from retrieval.query.snippets import SnippetMatcher
from retrieval.text.analyzer import parse_query
from retrieval.text.tokenizer import analyze

BOOK = Path("/usr/share/debian-reference")
pytestmark = pytest.mark.skipif(
    not (BOOK / "ch02.ja.html").exists() or not (BOOK / "ch02.zh-cn.html").exists(),
    reason="debian-reference-{ja,zh-cn} are not installed",
)


def _choose(name: str, text: str) -> tuple[str, Section | None]:
    url = f"http://book.test/{name}"
    page = parse_html((BOOK / name).read_text(encoding="utf-8"), url)
    body = " ".join(page.body.split())
    sections = read_sections(stored_sections(page.sections, page.body, body))
    doc = StoredDoc(DocId(1), url, page.title, body, page.headings, "", "", "book.test", "", "html",
                    sections=sections)  # fmt: skip
    query = parse_query(text)
    matcher = SnippetMatcher({t for w in query.terms for t in analyze(w)}, query.terms)
    return snippet_and_section(doc, SectionQuery.of(query, matcher), matcher, max_chars=220, snippets=True)


@pytest.mark.parametrize(
    ("name", "text", "heading"),
    [
        ("ch02.zh-cn.html", "档案库基础", "2.1.4. Debian 档案库基础"),
        ("ch02.zh-cn.html", "软件包配置", "2.1.1. 软件包配置"),
        ("ch02.ja.html", "パッケージ設定", "2.1.1. パッケージ設定"),
        ("ch02.ja.html", "基本的な注意事項", "2.1.2. 基本的な注意事項"),
    ],
)
def test_the_heading_that_spells_the_query_is_chosen(name: str, text: str, heading: str) -> None:
    _, section = _choose(name, text)
    assert section is not None and section.heading == heading


@pytest.mark.parametrize(
    ("name", "text"), [("ch02.zh-cn.html", "软件包配置"), ("ch02.ja.html", "パッケージ設定")]
)
def test_marks_cover_the_query_characters_and_no_others(name: str, text: str) -> None:
    snippet, _ = _choose(name, text)
    marked = re.findall(r"<mark>(.*?)</mark>", snippet)
    assert text in marked, snippet  # the whole query, marked as one run
    assert all(m in text for m in marked), marked  # parts of it only (パッケージ, 設定), never ッケー alone
    assert all(not m.startswith(("ッ", "ー")) for m in marked)
