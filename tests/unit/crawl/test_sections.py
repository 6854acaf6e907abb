"""A page's sections: headings and API entries with their anchors and their offsets into the
stored body (real pages of Debian's python3.11-doc, and pages without ids); the body itself is
the same as without sections; stored with the document, older segments read as none."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.docstore import DocStore
from core.types import Section
from crawl.extraction.documents import page_document
from crawl.extraction.page import parse_html
from crawl.extraction.sections import _NUMBER_BASE, MARK, unmark

DEMO = Path("/usr/share/doc/python3.11/html")
REAL = pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")
NO_MARK = "<!-- \ufdd0 -->"
"""A comment holding the mark character: the page then gets no sections (and the same body)."""


def _real(path: str) -> tuple[str, str]:
    return (DEMO / path).read_text(encoding="utf-8"), f"https://docs.python.org/3.11/{path}"


def _by_anchor(sections: tuple[Section, ...]) -> dict[str, Section]:
    return {s.anchor: s for s in sections if s.anchor}


@REAL
def test_an_api_entry_is_a_section_at_its_dt_id() -> None:
    html, url = _real("library/functions.html")
    page = parse_html(html, url)
    zip_entry = _by_anchor(page.sections)["zip"]
    assert zip_entry.heading == "zip(*iterables, strict=False)"
    text = page.body[zip_entry.start : zip_entry.end]
    assert text.startswith("zip(*iterables, strict=False) Iterate over several iterables in parallel")
    assert "zip() is lazy" in text and "zipapp" not in text
    following = page.sections[page.sections.index(zip_entry) + 1]
    assert following.start == zip_entry.end and following.heading.startswith("__import__(")
    opening = page.sections[0]
    assert (opening.heading, opening.anchor, opening.start) == ("Built-in Functions", "built-in-functions", 0)


@REAL
def test_a_heading_takes_the_id_of_the_section_it_opens() -> None:
    html, url = _real("library/collections.html")
    page = parse_html(html, url)
    anchors = _by_anchor(page.sections)
    objects = anchors["defaultdict-objects"]
    assert objects.heading == "defaultdict objects"
    entry = anchors["collections.defaultdict"]
    assert entry.heading == "class collections.defaultdict(default_factory=None, /[, ...])"
    assert objects.end == entry.start, "the h2's own text is its heading; the class entry follows"
    opening = f"{entry.heading} Return a new dictionary-like object"
    assert page.body[entry.start : entry.end].startswith(opening)
    assert "defaultdict Examples" in {s.heading for s in page.sections}


@REAL
@pytest.mark.parametrize(
    "path",
    [
        "library/functions.html",
        "library/collections.html",
        "library/os.html",
        "tutorial/inputoutput.html",
        "glossary.html",
        "genindex-Z.html",
        "whatsnew/3.11.html",
    ],
)
def test_every_section_starts_at_its_heading_in_an_unchanged_body(path: str) -> None:
    html, url = _real(path)
    page = parse_html(html, url)
    plain = parse_html(html.replace("</body>", NO_MARK + "</body>"), url)
    assert plain.sections == () and plain.body == page.body and plain.headings == page.headings
    assert page.sections, "every page of these docs has ids on its headings"
    for section, after in zip(page.sections, page.sections[1:] + (None,), strict=True):
        assert page.body.startswith(section.heading, section.start), section
        assert section.end == (after.start if after else len(page.body))
        assert section.anchor and section.anchor in html


def test_a_page_without_ids_has_sections_without_anchors() -> None:
    html = (
        "<html><head><title>Notes</title></head><body><nav><h2>Menu</h2></nav>"
        "<h1>Notes</h1><p>Intro text.</p><h2>First part</h2><p>One\n  two.</p>"
        "<h3>Deep</h3><p>Three.</p><dl><dt>term</dt><dd>no id, no section</dd></dl></body></html>"
    )
    page = parse_html(html, "http://a.test/notes")
    assert page.body == "Notes Intro text. First part One two. Deep Three. term no id, no section"
    assert page.sections == (
        Section("Notes", "", 0, 18),
        Section("First part", "", 18, 38),
        Section("Deep", "", 38, len(page.body)),
    )
    assert page.headings == ("Notes", "First part", "Deep"), "the headings field is unchanged: h1-h3"


def test_anchors_from_named_links_and_containers_only_where_they_name_the_heading() -> None:
    html = (
        "<html><body><main>"
        '<a name="old-style"></a><h2>Named before</h2><p>a</p>'
        '<h2><a id="inside"></a>Named inside</h2><p>b</p>'
        '<div id="block"><h3>Opens its div</h3><p>c</p></div>'
        '<div id="wrapper"><p>text first</p><h4>Inside a div it does not open</h4></div>'
        '<h5 id="own">Own id <a class="headerlink" href="#own">¶</a></h5>'
        '<h6><a href="/elsewhere" id="">Linked, no id</a></h6>'
        "</main><aside><h2 id='aside'>Outside the main content</h2></aside></body></html>"
    )
    page = parse_html(html, "http://a.test/")
    assert [(s.heading, s.anchor) for s in page.sections] == [
        ("Named before", "old-style"),
        ("Named inside", "inside"),
        ("Opens its div", "block"),
        ("Inside a div it does not open", ""),
        ("Own id", "own"),
        ("Linked, no id", ""),
    ]
    for section in page.sections:
        assert page.body.startswith(section.heading, section.start)


WORD = st.text(alphabet="ab\u00a0", min_size=1, max_size=3)
BASE = _NUMBER_BASE


def _expected(raw: str) -> tuple[str, dict[int, int]]:
    """The collapsed text without marks, and each mark's section start, word by word: a mark
    before a character of its word starts there; a mark ending its word, at the next word."""
    body, starts, pending = "", {}, []
    for token in raw.split():
        chars: list[str] = []
        marks: list[tuple[int, int]] = []  # (characters of the word before it, section number)
        i = 0
        while i < len(token):
            if token[i] == MARK:
                marks.append((len(chars), ord(token[i + 1]) - BASE))
                i += 2
            else:
                chars.append(token[i])
                i += 1
        word = "".join(chars)
        if not word:
            pending.extend(number for _, number in marks)
            continue
        start = len(body) + (1 if body else 0)
        starts.update(dict.fromkeys(pending, start))
        starts.update({number: start + at for at, number in marks if at < len(word)})
        pending = [number for at, number in marks if at == len(word)]
        body = f"{body} {word}" if body else word
    starts.update(dict.fromkeys(pending, len(body)))
    return body, starts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(WORD, st.sampled_from([" ", "\n ", "M"])), max_size=12))
def test_unmark_gives_the_text_without_marks_and_where_each_mark_stood(pieces: list[str]) -> None:
    """Marks anywhere in collapsed text (glued to words, alone, in runs, at the ends) leave exactly
    the collapsed text without them, and each section starts where its heading's first word does."""
    raw, numbers = "", 0
    for piece in pieces:
        if piece == "M":
            raw += MARK + chr(BASE + numbers)
            numbers += 1
        else:
            raw += piece
    body, sections = unmark(" ".join(raw.split()), [(f"h{i}", f"a{i}") for i in range(numbers)])
    expected_body, starts = _expected(raw)
    assert body == expected_body
    assert [(s.anchor, s.start) for s in sections] == [(f"a{i}", starts[i]) for i in range(numbers)]
    assert [s.end for s in sections] == [s.start for s in sections[1:]] + [len(body)] * bool(sections)


def test_sections_are_stored_with_the_document_and_older_segments_read_as_none(tmp_path: Path) -> None:
    html = '<html><body><h1 id="top">Top</h1><p>x</p><h2 id="two">Two</h2><p>y</p></body></html>'
    page = parse_html(html, "http://a.test/")
    doc = page_document("http://a.test/", page, fetched_at=1.0, text_hash="h", fingerprint=1, max_links=10)
    assert doc.sections == (Section("Top", "top", 0, 6), Section("Two", "two", 6, 11))
    for store in (DocStore(tmp_path / "parquet"), DocStore(tmp_path / "rows", row_segments=True)):
        store.append([doc])
        assert list(store.iter_documents()) == [doc]
        assert store.documents_by_url([doc.url]) == {doc.url: doc}
    old = DocStore(tmp_path / "old-parquet")
    path = tmp_path / "old-parquet" / old.append([doc])
    pl.read_parquet(path).drop("sections").write_parquet(path)  # a segment of an older crawl
    rows = DocStore(tmp_path / "old-rows", row_segments=True)
    path = tmp_path / "old-rows" / rows.append([doc])
    records = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
    older = "".join(json.dumps({k: v for k, v in r.items() if k != "sections"}) + "\n" for r in records)
    path.write_bytes(gzip.compress(older.encode()))
    for store in (old, rows):
        [read] = list(store.iter_documents())
        assert read.sections == () and read.body == doc.body
    assert rows.documents_by_url([doc.url])[doc.url].sections == ()


def test_a_page_holding_the_mark_character_keeps_its_text_and_gets_no_sections() -> None:
    html = '<html><body><h1 id="a">A</h1><p>x &#xfdd0;y &#xFDD0; z</p><h2 id="b">B</h2><p>w</p></body></html>'
    page = parse_html(html, "http://a.test/")
    plain = parse_html(html.replace("</body>", NO_MARK + "</body>"), "http://a.test/")
    assert page.body == plain.body == "A x \ufdd0y \ufdd0 z B w"
    assert page.sections == ()
