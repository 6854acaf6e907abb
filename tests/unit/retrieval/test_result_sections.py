"""The section a result links to and quotes (retrieval.query.sections), on real Python-docs pages:
taken where a section's heading answers the query clearly better than the page top, and the
snippet is then how the section opens; otherwise the page's snippet, exactly as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.types import DocId, Query, Section
from crawl.extraction.page import parse_html
from retrieval.index.lexical import StoredDoc
from retrieval.index.lexical_schema import read_sections, stored_sections
from retrieval.query.sections import SectionQuery, snippet_and_section
from retrieval.query.snippets import SnippetMatcher, make_snippet, plain_snippet
from retrieval.text.analyzer import parse_query
from retrieval.text.tokenizer import analyze

DEMO = Path("/usr/share/doc/python3.11/html")
pytestmark = pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")


def _stored(path: str) -> StoredDoc:
    """The page as a shard stores it: anchored sections within the stored body."""
    page = parse_html((DEMO / path).read_text(encoding="utf-8"), f"https://docs.python.org/3.11/{path}")
    body = " ".join(page.body.split())
    sections = read_sections(stored_sections(page.sections, page.body, body))
    return StoredDoc(DocId(1), f"https://docs.python.org/3.11/{path}", page.title, body, page.headings,
                     "", "", "docs.python.org", "en", "html", sections=sections)  # fmt: skip


def _choose(doc: StoredDoc, query: Query) -> tuple[str, Section | None, SnippetMatcher]:
    positive = (*query.terms, *query.phrases)
    matcher = SnippetMatcher(
        {t for p in positive for t in analyze(p)}, [w for p in positive for w in p.split()]
    )
    snippet, section = snippet_and_section(
        doc, SectionQuery.of(query, matcher), matcher, max_chars=220, snippets=True
    )
    return snippet, section, matcher


@pytest.mark.parametrize(
    ("path", "q", "anchor"),
    [
        ("library/functions.html", "zip", "zip"),
        ("library/functions.html", "zip two lists", "zip"),
        ("library/functions.html", "isinstance", "isinstance"),
        ("library/collections.html", "defaultdict", "defaultdict-objects"),  # before its class entry
        ("library/collections.html", "default dict", "collections.defaultdict"),  # default_factory=
        ("library/collections.html", "collections deque", "collections.deque"),
        ("library/json.html", "json dumps", "json.dumps"),  # json.dump() has the stem too, not the word
        ("tutorial/inputoutput.html", "f-string", "formatted-string-literals"),
    ],
)
def test_a_section_about_the_query_is_linked_and_quoted(path: str, q: str, anchor: str) -> None:
    doc = _stored(path)
    snippet, section, _ = _choose(doc, parse_query(q))
    assert section is not None and section.anchor == anchor, section
    text = plain_snippet(snippet)[0].removesuffix(" …")
    assert doc.body.startswith(text, section.start + len(section.heading) + 1), "how the section opens"
    assert len(text) > 100


def test_compound_spellings_the_query_was_expanded_with_count() -> None:
    """'ordered dict' finds the OrderedDict section through the spelling compounds add."""
    doc = _stored("library/collections.html")
    typed = parse_query("ordered dict")
    assert _choose(doc, typed)[1] is None, "neither typed word is in a heading"
    expanded = dataclasses.replace(typed, expansions=(("ordereddict", 1.0),))
    snippet, section, _ = _choose(doc, expanded)
    assert section is not None and section.anchor == "ordereddict-objects"
    assert plain_snippet(snippet)[0].startswith("Ordered dictionaries are just like regular dictionaries")


@pytest.mark.parametrize(
    ("path", "q"),
    [
        ("library/functions.html", "built-in functions"),
        ("library/json.html", "json"),
        ("library/collections.html", "collections container datatypes"),
        ("library/collections.html", "xyzzy"),
        ("library/zipfile.html", "zip"),
    ],
)
def test_a_page_about_the_query_keeps_its_top_and_its_snippet(path: str, q: str) -> None:
    doc = _stored(path)
    snippet, section, matcher = _choose(doc, parse_query(q))
    assert section is None
    assert snippet == make_snippet(doc.body, matcher, max_chars=220), "the page's snippet, exactly"


def test_a_page_without_sections_gets_the_snippet_it_always_got() -> None:
    doc = dataclasses.replace(_stored("library/functions.html"), sections=())
    snippet, section, matcher = _choose(doc, parse_query("zip"))
    assert section is None and snippet == make_snippet(doc.body, matcher, max_chars=220)
