"""Extraction: text without boilerplate, metadata, links and robots directives."""

from __future__ import annotations

from crawl.extract import Link, parse_html

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
