"""Extraction: text without boilerplate, metadata, links and robots directives."""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path

import pytest

from crawl.extraction.page import Link, parse_html
from retrieval.query.snippets import make_snippet
from retrieval.text.tokenizer import stem

PAGE = """<!doctype html><html lang="en-GB"><head>
<title> The  Title </title>
<meta name="description" content="A short  description.">
<meta property="article:published_time" content="2024-01-02T03:04:05Z">
<meta property="article:modified_time" content="2024-02-01T00:00:00+01:00">
<link rel="canonical" href="/canonical?utm_source=x">
<style>.x{color:red}</style><script>var tracking = 1;</script>
</head><body>
<header><h1>Site name</h1></header>
<nav><a href="/docs/">Docs</a> <a href="/about">About</a></nav>
<main><h2>Section</h2><p>Main text <b>bold</b> here.</p>
<a href="other.html#frag">Other page</a> <a href="/spam" rel="nofollow sponsored">Spam</a>
<a href="mailto:x@y.z">Mail</a> <a href="other.html">Again</a></main>
<aside>Sidebar ad</aside><footer>Copyright footer</footer>
</body></html>"""


def test_text_metadata_and_links() -> None:
    page = parse_html(PAGE, "http://example.com/dir/page.html")
    assert page.title == "The Title"
    assert page.body == "Section Main text bold here. Other page Spam Mail Again"
    assert page.headings == ("Section",)
    assert page.description == "A short description."
    assert page.lang == "en"
    assert page.published_at == 1704164645.0
    assert page.modified_at == 1706742000.0
    assert page.canonical_url == "http://example.com/canonical"
    assert page.links == (
        Link("http://example.com/docs/", "Docs"),
        Link("http://example.com/about", "About"),
        Link("http://example.com/dir/other.html", "Other page"),
        Link("http://example.com/spam", "Spam", nofollow=True),
    )
    assert (page.noindex, page.nofollow) == (False, False)


def test_meta_robots_and_header_directives() -> None:
    html = (
        '<html><head><meta name="robots" content="noindex, nofollow"></head>'
        '<body><a href="/x">x</a></body></html>'
    )
    page = parse_html(html, "http://a.com/")
    assert (page.noindex, page.nofollow, page.links) == (True, True, ())
    page = parse_html("<p><a href='/x'>x</a>", "http://a.com/", x_robots_tag="noindex")
    assert (page.noindex, page.nofollow, len(page.links)) == (True, False, 1)
    page = parse_html('<meta name="robots" content="none"><p>t', "http://a.com/")
    assert (page.noindex, page.nofollow) == (True, True)


def test_base_href_and_broken_markup() -> None:
    html = (
        "<html><head><base href='http://cdn.example.org/root/'><title>Broken</title>"
        "<body><p>Unclosed <div>text<a href='a'>A"
    )
    page = parse_html(html, "http://a.com/page")
    assert page.links == (Link("http://cdn.example.org/root/a", "A"),)
    assert "Unclosed" in page.body and "text" in page.body


def test_title_falls_back_to_first_heading() -> None:
    assert parse_html("<h1>Heading</h1><p>t</p>", "http://a.com/").title == "Heading"


def test_link_budget() -> None:
    html = "".join(f"<a href='/p{i}'>p{i}</a>" for i in range(50))
    assert len(parse_html(html, "http://a.com/", max_links=10).links) == 10


def test_inline_markup_stays_together_and_blocks_break() -> None:
    html = (
        "<main><h2>Loops<a class='headerlink' href='#loops'>¶</a></h2>"
        "<dl><dt><span class='pre'>asyncio.</span><span class='n'>set_event_loop</span>"
        "<span>(</span><em>loop</em><span>)</span><a class='headerlink' href='#x'>¶</a></dt>"
        "<dd><p>Set <em>loop</em> as current.</p></dd></dl><P>Upper</P><div>a</div><div>b<br>c</div>"
        "<table><tr><td>1</td><td>2</td></tr></table><p>Glyph ¶ gone</p></main>"
    )
    page = parse_html(html, "http://a.com/")
    assert page.body == "Loops asyncio.set_event_loop(loop) Set loop as current. Upper a b c 1 2 Glyph gone"
    assert page.headings == ("Loops",)


DEMO = Path("/usr/share/doc/python3.11/html")


@pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")
def test_demo_pages_have_clean_body_text_and_snippets() -> None:
    """Real Sphinx pages: no pilcrows, signatures read as written, in body and snippet."""
    signatures = {
        "library/asyncio-eventloop.html": ["asyncio.set_event_loop(loop)", "asyncio.get_running_loop()"],
        "library/json.html": ["json.dumps(obj,"],
        "library/pathlib.html": ["Path.glob(pattern)"],
    }
    for page_path in sorted(DEMO.rglob("*.html"))[:400]:
        page = parse_html(
            page_path.read_text(encoding="utf-8", errors="replace"), f"http://h/{page_path.name}"
        )
        assert "¶" not in page.body and all("¶" not in h for h in page.headings), page_path
    for relative, expected in signatures.items():
        page = parse_html((DEMO / relative).read_text(encoding="utf-8"), f"http://h/{relative}")
        for text in expected:
            assert text in page.body, (relative, text)
            words = re.findall(r"[^\W_]+", text.split("(")[0].rsplit(".", 1)[-1])
            marked = make_snippet(page.body, {stem(w) for w in words}, words, max_chars=400)
            snippet = html_lib.unescape(marked.replace("<mark>", "").replace("</mark>", ""))
            assert "¶" not in snippet and " ( " not in snippet
            assert text.split("(")[0] + "(" in snippet, (relative, snippet)
        assert " ( " not in page.body and " . " not in page.body.replace(" . . ", "")


def test_boilerplate_by_role_aria_hidden_and_permalink_class() -> None:
    """Roles and classes are compared exactly, as the selectors they replace would; the links
    of removed navigation stay links, and a node matched more than once is removed once."""
    html = (
        "<body><div role='navigation'><a href='/nav'>Nav link</a></div>"
        "<nav role='navigation'>Both nav and role</nav><div role='banner'>Banner</div>"
        "<div aria-hidden='true'>Hidden</div><div aria-hidden='false'>Shown</div>"
        "<div role='navigationx'>Not a role</div><div role='search'>Search box</div>"
        "<div role='main'><h2>Kept<a class='anchor' href='#kept'>#</a></h2>"
        "<p>Body <a class='reference permalink' href='#p'>link</a><a class='Permalink' href='/cap'>Cap</a>"
        "<a class='headerlinkish' href='/other'>Other</a></p>"
        "<header role='main'><h3>Header heading</h3></header></div>"
        "<aside aria-hidden='true' role='complementary'>Aside</aside></body>"
    )
    page = parse_html(html, "http://a.com/page")
    assert page.body == "Kept Body CapOther"
    assert page.headings == ("Kept",)
    assert [link.url for link in page.links] == [
        "http://a.com/nav",
        "http://a.com/cap",
        "http://a.com/other",
    ]
    # Without the role="main" node, the body is everything that is not boilerplate.
    page = parse_html(html.replace("role='main'", ""), "http://a.com/page")
    assert page.body == "Shown Not a role Search box Kept Body CapOther"


def test_the_main_role_and_element_are_chosen_only_when_unique() -> None:
    one = "<body><p>Outside</p><main role='main'><p>Inside</p></main></body>"
    assert parse_html(one, "http://a.com/").body == "Inside"
    two = "<body><p>Outside</p><div role='main'>A</div><div role='main'>B</div><article>C</article></body>"
    assert parse_html(two, "http://a.com/").body == "C"
    none = "<body><p>Outside</p><div role='main'>A</div><div role='main'>B</div></body>"
    assert parse_html(none, "http://a.com/").body == "Outside A B"
