"""HTML to a parsed page: text for the index, links for the frontier, directives for the loop.

selectolax (lexbor) parses ~900 pages/s per core here, 3× resiliparse's main-content
extraction and 45× trafilatura (``shared/PERFORMANCE.md``), so boilerplate removal is
done with cheap structural rules instead: links are taken from the whole page first
(navigation links are real links), then navigation, headers, footers, asides, forms,
scripts and styles are removed and the text of ``<main>``/``<article>`` (or the body)
is kept. lexbor follows the HTML5 parsing algorithm, so broken markup parses the way
a browser would.

Text keeps inline markup together: ``<span>asyncio.</span><span>set_event_loop</span>``
reads ``asyncio.set_event_loop`` as a browser shows it. lexbor's ``text()`` knows no
block/inline distinction, so before parsing one regex pass (C speed, no per-node
Python) puts a space in front of every block-level tag; text is then joined with no
separator and whitespace runs collapse. Permalink anchors (Sphinx's ``a.headerlink``
"¶", GitHub-style heading anchors) are removed with the boilerplate, and stray
permalink glyphs are dropped from the text.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser, LexborNode

from crawl.sitemaps import parse_lastmod
from crawl.urls import canonicalize_url

logger = logging.getLogger(__name__)

__all__ = ["Link", "ParsedPage", "parse_html"]

_BOILERPLATE = [
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "nav",
    "footer",
    "header",
    "aside",
    "form",
    "iframe",
    "button",
]
_BOILERPLATE_ROLES = (
    '[role="navigation"], [role="banner"], [role="contentinfo"], [role="complementary"], [aria-hidden="true"]'
)
_PERMALINKS = "a.headerlink, a.anchor, a.anchorjs-link, a.heading-anchor, a.header-anchor, a.permalink"
"""Heading/definition self-links that generators add (Sphinx, MkDocs, Jekyll, VuePress)."""
_BOILERPLATE_SELECTOR = ", ".join(_BOILERPLATE) + ", " + _BOILERPLATE_ROLES + ", " + _PERMALINKS
"""One selector, one tree walk, instead of ``strip_tags`` plus a second query."""
_BEFORE_BLOCK = re.compile(
    r"<(?=/?(?:a(?:ddress|rticle|side)|b(?:lockquote|ody|r)|caption|d(?:[dlt]|etails|ialog|iv)"
    r"|f(?:ieldset|igcaption|igure|ooter|orm)|h(?:[1-6r]|eader)|img|li|main|nav|o(?:l|ption)|p(?:re)?"
    r"|s(?:ection|ummary)|t(?:able|body|[dhr]|foot|head)|ul)\b)"
)
"""Where a block starts or ends the text gets a word break; inline tags get none.

Written as a trie of lower-case names: the regex engine then tries one branch per
``<`` instead of forty, and the pass costs ~0.7 ms on an 86 kB page (a plain
case-insensitive alternation costs 2.9 ms, most of the parse)."""
_BEFORE_BLOCK_ANY_CASE = re.compile(_BEFORE_BLOCK.pattern, re.IGNORECASE)
_UPPER_CASE_TAGS = ("<HTML", "<HEAD", "<BODY", "<TITLE", "<META", "<P>", "<DIV", "<TABLE", "<BR")
"""Probes, on the page's first kilobytes, for pages written in upper-case tags (old HTML)."""
_GLYPHS = ("\u00b6", "\U0001f517")
"""Permalink glyphs (pilcrow, link symbol) that are not content wherever they appear."""
_TIME_META = {
    "article:published_time": "published",
    "og:published_time": "published",
    "datepublished": "published",
    "date": "published",
    "dc.date": "published",
    "dc.date.issued": "published",
    "article:modified_time": "modified",
    "og:updated_time": "modified",
    "datemodified": "modified",
    "last-modified": "modified",
}


@dataclass(frozen=True, slots=True)
class Link:
    url: str
    """Absolute canonical URL."""
    anchor_text: str
    nofollow: bool = False


@dataclass(frozen=True, slots=True)
class ParsedPage:
    title: str
    body: str
    headings: tuple[str, ...] = ()
    description: str = ""
    lang: str = ""
    published_at: float | None = None
    modified_at: float | None = None
    links: tuple[Link, ...] = ()
    canonical_url: str = ""
    """Canonical form of ``<link rel=canonical>``; ``""`` when absent or unusable."""
    noindex: bool = False
    nofollow: bool = False


def _clean(text: str | None) -> str:
    """Collapse whitespace runs (``str.split`` is ~3× faster than a regex here)."""
    return " ".join(text.split()) if text else ""


def _with_block_breaks(html: str) -> str:
    head = html[:4096]
    upper = any(probe in head for probe in _UPPER_CASE_TAGS)
    return (_BEFORE_BLOCK_ANY_CASE if upper else _BEFORE_BLOCK).sub(" <", html)


def _clean_content(text: str | None) -> str:
    """Like :func:`_clean`, and drop permalink glyphs (``str.replace`` runs at memchr speed)."""
    if not text:
        return ""
    for glyph in _GLYPHS:
        if glyph in text:
            text = text.replace(glyph, " ")
    return " ".join(text.split())


def _robots_directives(tree: LexborHTMLParser, header: str) -> tuple[bool, bool]:
    values = [header.lower()]
    for meta in tree.css("meta[name]"):
        name = (meta.attributes.get("name") or "").lower()
        if name in ("robots", "trawlbot"):
            values.append((meta.attributes.get("content") or "").lower())
    joined = ",".join(values)
    tokens = {t.strip() for t in re.split(r"[,\s]+", joined) if t.strip()}
    noindex = "noindex" in tokens or "none" in tokens
    nofollow = "nofollow" in tokens or "none" in tokens
    return noindex, nofollow


def parse_html(html: str, url: str, *, x_robots_tag: str = "", max_links: int = 10_000) -> ParsedPage:
    """Extract a page; ``url`` is the canonical URL it was fetched from (base for links)."""
    tree = LexborHTMLParser(_with_block_breaks(html))
    head_base = tree.css_first("base[href]")
    base = canonicalize_url(head_base.attributes.get("href") or "", base=url) if head_base else ""
    base = base or url

    title_node = tree.css_first("title")
    title = _clean(title_node.text()) if title_node else ""
    description = ""
    published_at: float | None = None
    modified_at: float | None = None
    for meta in tree.css("meta[content]"):
        attrs = meta.attributes
        key = (attrs.get("name") or attrs.get("property") or attrs.get("itemprop") or "").lower()
        content = attrs.get("content") or ""
        if key in ("description", "og:description") and not description:
            description = _clean(content)
        elif key in ("og:title",) and not title:
            title = _clean(content)
        kind = _TIME_META.get(key)
        if kind == "published" and published_at is None:
            published_at = parse_lastmod(content)
        elif kind == "modified" and modified_at is None:
            modified_at = parse_lastmod(content)
    if published_at is None:
        time_node = tree.css_first("time[datetime]")
        if time_node is not None:
            published_at = parse_lastmod(time_node.attributes.get("datetime") or "")

    html_node = tree.css_first("html")
    lang = (html_node.attributes.get("lang") or "") if html_node is not None else ""
    if not lang:
        meta_lang = tree.css_first('meta[http-equiv="content-language"]')
        lang = (meta_lang.attributes.get("content") or "") if meta_lang else ""
    lang = lang.strip().split("-")[0].split("_")[0].lower()[:8]

    canonical = ""
    for link in tree.css("link[rel][href]"):
        rels = (link.attributes.get("rel") or "").lower().split()
        if "canonical" in rels:
            canonical = canonicalize_url(link.attributes.get("href") or "", base=base)
            break

    noindex, nofollow = _robots_directives(tree, x_robots_tag)
    links: list[Link] = []
    if not nofollow:
        seen: set[str] = set()
        hrefs_done: set[str] = set()  # the same href repeats (navigation, indexes)
        for anchor in tree.css("a[href]"):
            anchor_attrs = anchor.attrs
            href = anchor_attrs.get("href") or ""
            if href in hrefs_done:
                continue
            hrefs_done.add(href)
            target = canonicalize_url(href, base=base)
            if not target or target == url or target in seen:
                continue
            seen.add(target)
            rel = (anchor_attrs.get("rel") or "").lower()
            links.append(Link(target, _clean(anchor.text()), "nofollow" in rel))
            if len(links) >= max_links:
                break

    for node in tree.css(_BOILERPLATE_SELECTOR):
        node.decompose()
    headings = tuple(text for text in (_clean_content(h.text()) for h in tree.css("h1, h2, h3")) if text)
    main = _main_node(tree)
    body = _clean_content(main.text()) if main is not None else ""
    if not title and headings:
        title = headings[0]
    return ParsedPage(
        title=title,
        body=body,
        headings=headings,
        description=description,
        lang=lang,
        published_at=published_at,
        modified_at=modified_at,
        links=tuple(links),
        canonical_url=canonical,
        noindex=noindex,
        nofollow=nofollow,
    )


def _main_node(tree: LexborHTMLParser) -> LexborNode | None:
    for selector in ("main", '[role="main"]', "article"):
        nodes = tree.css(selector)
        if len(nodes) == 1:
            return nodes[0]
    return tree.body
