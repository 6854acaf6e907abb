"""HTML to a parsed page: text for the index, links for the frontier, directives for the loop.

selectolax (lexbor) parses many times faster than main-content extractors (DECISIONS 56,
``docs/performance.md``), so boilerplate removal is done with cheap structural rules
instead: links are taken from the whole page first (navigation links are real links),
then navigation, headers, footers, asides, forms, scripts and styles are removed and the
text of ``<main>``/``<article>`` (or the body) is kept. lexbor follows the HTML5 parsing
algorithm, so broken markup parses the way a browser would.

Text keeps inline markup together: ``<span>asyncio.</span><span>set_event_loop</span>``
reads ``asyncio.set_event_loop`` as a browser shows it. lexbor's ``text()`` knows no
block/inline distinction, so one regex pass before parsing puts a space in front of every
block-level tag; text is then joined with no separator and whitespace runs collapse.
Permalink anchors (Sphinx's ``a.headerlink``, GitHub-style heading anchors) go with the
boilerplate, and stray permalink glyphs are dropped from the text.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from selectolax.lexbor import LexborHTMLParser, LexborNode

from core.types import Section
from crawl.extraction.language import language_tag, page_language
from crawl.extraction.sections import SECTION_TAGS, mark_sections, unmark
from crawl.extraction.sitemaps import parse_lastmod
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
_BOILERPLATE_TAGS = frozenset(_BOILERPLATE)
_BOILERPLATE_ROLE_VALUES = frozenset({"navigation", "banner", "contentinfo", "complementary"})
"""``role`` values of boilerplate, compared exactly; so is ``aria-hidden="true"``."""
_PERMALINK_CLASSES = frozenset(
    {"headerlink", "anchor", "anchorjs-link", "heading-anchor", "header-anchor", "permalink"}
)
"""Classes of the heading/definition self-links that generators add (Sphinx, MkDocs, Jekyll, VuePress)."""
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
_UPPER_CASE_TAG = re.compile(r"</?[A-Z]")
"""Probe, on the page's first kilobytes, for pages written in upper-case tags (old HTML):
one regex search, ~3 µs, where nine substring probes cost ~14 µs (5% of a small page)."""
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
    lang_source: str = ""
    """Where ``lang`` came from: ``html`` (``<html lang>``), ``meta`` (``http-equiv``), ``header``
    (Content-Language), ``text`` (identified); ``""`` when there is no language."""
    published_at: float | None = None
    modified_at: float | None = None
    links: tuple[Link, ...] = ()
    canonical_url: str = ""
    """Canonical form of ``<link rel=canonical>``; ``""`` when absent or unusable."""
    alternates: tuple[tuple[str, str], ...] = ()
    """``(hreflang, canonical URL)`` of each ``<link rel=alternate hreflang>`` (``x-default`` left
    out): the page's translations as it declares them, the page itself usually among them."""
    sections: tuple[Section, ...] = ()
    """Where each heading of the main content starts in ``body`` (``crawl.extraction.sections``)."""
    link_words: int = 0
    """Words of ``body`` inside links (its link density: ``link_words`` / words of ``body``)."""
    noindex: bool = False
    nofollow: bool = False


def _clean(text: str | None) -> str:
    """Collapse whitespace runs (``str.split`` is ~3× faster than a regex here)."""
    return " ".join(text.split()) if text else ""


def _with_block_breaks(html: str) -> str:
    upper = _UPPER_CASE_TAG.search(html, 0, 4096) is not None
    return (_BEFORE_BLOCK_ANY_CASE if upper else _BEFORE_BLOCK).sub(" <", html)


def _clean_content(text: str | None) -> str:
    """Like :func:`_clean`, and drop permalink glyphs (``str.replace`` runs at memchr speed)."""
    if not text:
        return ""
    for glyph in _GLYPHS:
        if glyph in text:
            text = text.replace(glyph, " ")
    return " ".join(text.split())


def _robots_directives(values: list[str]) -> tuple[bool, bool]:
    """``(noindex, nofollow)`` from the X-Robots-Tag header and robots/trawlbot ``<meta>`` values."""
    joined = ",".join(values)
    tokens = {t.strip() for t in re.split(r"[,\s]+", joined) if t.strip()}
    noindex = "noindex" in tokens or "none" in tokens
    nofollow = "nofollow" in tokens or "none" in tokens
    return noindex, nofollow


_ATTRIBUTE_SELECTOR = "[role], [aria-hidden]"
"""The nodes whose ``role``/``aria-hidden`` may make them the main content or boilerplate.

Everything else extraction needs is found by tag in one ``traverse()`` of the tree, in
document order: lexbor hands over each element as a Python node for ~0.1 µs, and a
frozenset lookup of its tag costs less than lexbor's CSS matching, whose cost is per
node *and* selector (the earlier single walk matched 27 selectors: 28 µs of a 3 kB
benchmark page where this costs 17, 660 µs of a Python-docs page where this costs
500). Attribute values are read only for the few nodes this selector returns and
compared exactly, as a ``[role="main"]`` selector would. Permalink classes are read
from the attributes ``_links`` fetches for every anchor anyway."""
_HEADINGS = frozenset({"h1", "h2", "h3"})
"""The headings indexed as the ``headings`` field; sections start at any of ``SECTION_TAGS``."""
_PAGE_TAGS = frozenset({"base", "title", "meta", "link", "time", "a", "main", "article"}) | SECTION_TAGS


@dataclass(slots=True)
class _PageNodes:
    """The nodes of one walk over the page, by the query they answer, in document order."""

    base: LexborNode | None = None
    title: LexborNode | None = None
    time: LexborNode | None = None
    metas: list[LexborNode] = field(default_factory=list)
    links: list[LexborNode] = field(default_factory=list)
    anchors: list[LexborNode] = field(default_factory=list)
    mains: list[LexborNode] = field(default_factory=list)
    role_mains: list[LexborNode] = field(default_factory=list)
    articles: list[LexborNode] = field(default_factory=list)
    sections: list[LexborNode] = field(default_factory=list)
    """Headings ``h1``–``h6`` and ``<dt>`` elements (the ``headings`` field takes ``h1``–``h3``)."""
    boilerplate: list[LexborNode] = field(default_factory=list)
    """Removed once links, metadata and headings are read (navigation links are real links)."""


def _page_nodes(tree: LexborHTMLParser) -> _PageNodes:
    found = _PageNodes()
    root = tree.root
    if root is None:
        return found
    for node in root.traverse():
        tag = node.tag
        if tag in _BOILERPLATE_TAGS:
            found.boilerplate.append(node)
        elif tag not in _PAGE_TAGS:
            continue
        elif tag == "a":
            found.anchors.append(node)
        elif tag in SECTION_TAGS:
            found.sections.append(node)
        elif tag == "meta":
            found.metas.append(node)
        elif tag == "link":
            found.links.append(node)
        elif tag == "main":
            found.mains.append(node)
        elif tag == "article":
            found.articles.append(node)
        elif tag == "title":
            if found.title is None:
                found.title = node
        elif tag == "base":
            if found.base is None and "href" in node.attributes:
                found.base = node
        elif found.time is None and "datetime" in node.attributes:
            found.time = node
    for node in tree.css(_ATTRIBUTE_SELECTOR):
        _classify_by_attributes(node, found)
    return found


def _classify_by_attributes(node: LexborNode, found: _PageNodes) -> None:
    """``[role="main"]``, or a boilerplate ``role``/``aria-hidden`` (exact values, as the selectors)."""
    attrs = node.attributes
    role = attrs.get("role")
    if role == "main":
        found.role_mains.append(node)
    elif node.tag not in _BOILERPLATE_TAGS and (
        role in _BOILERPLATE_ROLE_VALUES or attrs.get("aria-hidden") == "true"
    ):
        found.boilerplate.append(node)


def parse_html(
    html: str, url: str, *, x_robots_tag: str = "", content_language: str = "", max_links: int = 10_000
) -> ParsedPage:
    """Extract a page; ``url`` is the canonical URL it was fetched from (base for links),
    ``content_language`` its Content-Language response header."""
    tree = LexborHTMLParser(_with_block_breaks(html))
    found = _page_nodes(tree)
    head_base = found.base
    base = canonicalize_url(head_base.attributes.get("href") or "", base=url) if head_base else ""
    base = base or url

    title = _clean(found.title.text()) if found.title is not None else ""
    description = ""
    published_at: float | None = None
    modified_at: float | None = None
    robots = [x_robots_tag.lower()]
    for meta in found.metas:
        attrs = meta.attributes
        name = attrs.get("name")
        if name is not None and name.lower() in ("robots", "trawlbot"):
            robots.append((attrs.get("content") or "").lower())
        if "content" not in attrs:
            continue
        key = (name or attrs.get("property") or attrs.get("itemprop") or "").lower()
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
    if published_at is None and found.time is not None:
        published_at = parse_lastmod(found.time.attributes.get("datetime") or "")

    lang, lang_source = _declared_language(tree, found.metas, content_language)

    canonical, alternates = _head_links(found.links, base)

    noindex, nofollow = _robots_directives(robots)
    permalinks: list[LexborNode] = []
    links = _links(found.anchors, url, base, max_links, follow=not nofollow, permalinks=permalinks)

    for node in found.boilerplate:
        node.decompose()
    for node in permalinks:
        node.decompose()
    # A node inside a removed subtree is itself detached (``decompose`` unlinks every
    # node of the subtree), so ``parent`` tells the nodes still in the page.
    titled = [
        (node, _clean_content(node.text()))
        for node in found.sections
        if node.parent is not None and (node.tag != "dt" or node.id)  # only an entry with an id
    ]
    headings = tuple(text for node, text in titled if text and node.tag in _HEADINGS)
    main = _main_node(tree, found)
    marked = mark_sections(html, titled) if main is not None else []
    body, sections = unmark(_clean_content(main.text()) if main is not None else "", marked)
    link_words = _link_words(main) if main is not None and body else 0
    if not title and headings:
        title = headings[0]
    if not lang:
        lang = page_language(title, headings, body)
        lang_source = "text" if lang else ""
    return ParsedPage(
        title=title,
        body=body,
        headings=headings,
        description=description,
        lang=lang,
        lang_source=lang_source,
        published_at=published_at,
        modified_at=modified_at,
        links=tuple(links),
        canonical_url=canonical,
        alternates=alternates,
        sections=sections,
        link_words=link_words,
        noindex=noindex,
        nofollow=nofollow,
    )


def _link_words(main: LexborNode) -> int:
    """Words of the main content inside links: an index or listing page is mostly that
    (``retrieval.index.page_quality``)."""
    return sum(len(text.split()) for node in main.css("a[href]") if (text := node.text()))


MAX_ALTERNATES = 64
"""hreflang alternates a page keeps: a translated site lists a few dozen languages at most."""


def _head_links(links: list[LexborNode], base: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``(canonical URL, hreflang alternates)`` from the page's ``<link>`` elements, in one pass
    over the attributes already read: the first ``rel=canonical``, and every ``rel=alternate``
    with an ``hreflang`` but ``x-default`` (a language chooser, not a translation)."""
    canonical: str | None = None
    alternates: list[tuple[str, str]] = []
    for link in links:
        attrs = link.attributes
        rel = attrs.get("rel")
        if not rel or "href" not in attrs:
            continue
        href = attrs.get("href") or ""
        rels = rel.lower().split()
        if "canonical" in rels:
            if canonical is None:
                canonical = canonicalize_url(href, base=base)
        elif "alternate" in rels and len(alternates) < MAX_ALTERNATES:
            hreflang = (attrs.get("hreflang") or "").strip().lower()
            if hreflang and hreflang != "x-default" and (target := canonicalize_url(href, base=base)):
                alternates.append((hreflang, target))
    return canonical or "", tuple(alternates)


def _declared_language(tree: LexborHTMLParser, metas: list[LexborNode], header: str) -> tuple[str, str]:
    """``(language, where it was said)`` as the page declares it, in HTML's order: ``<html lang>``,
    then the ``http-equiv`` pragma, then the Content-Language header; ``("", "")`` when none does."""
    html_node = tree.root
    if html_node is None or html_node.tag != "html":
        html_node = tree.css_first("html")
    lang = language_tag((html_node.attributes.get("lang") or "") if html_node is not None else "")
    if lang:
        return lang, "html"
    for meta in metas:
        attrs = meta.attributes
        if (attrs.get("http-equiv") or "").lower() == "content-language":
            lang = language_tag(attrs.get("content") or "")
            if lang:
                return lang, "meta"
            break
    lang = language_tag(header)
    return (lang, "header") if lang else ("", "")


def _links(
    anchors: list[LexborNode],
    url: str,
    base: str,
    max_links: int,
    *,
    follow: bool,
    permalinks: list[LexborNode],
) -> list[Link]:
    """The page's links (none unless ``follow``); anchors with a permalink class go to ``permalinks``.

    One pass, because both need each anchor's attributes (building them is most of the
    per-anchor cost); the permalink check goes on past the link budget."""
    links: list[Link] = []
    taken = {"", url}  # unusable, the page itself, and targets already linked
    resolved: dict[str, str] = {}  # the same href repeats (navigation, indexes)
    # Resolution ignores the fragment: ``a.html#x`` and ``a.html#y`` (and every
    # ``#anchor`` of the page) are canonicalized once.
    by_key: dict[str, str] = {}
    for anchor in anchors:
        attrs = anchor.attributes
        classes = attrs.get("class")
        if classes and not _PERMALINK_CLASSES.isdisjoint(classes.split()):
            permalinks.append(anchor)
        if not follow or len(links) >= max_links:
            continue
        href = attrs.get("href")
        if href is None:
            if "href" not in attrs:
                continue
            href = ""  # a bare ``href`` attribute
        target = resolved.get(href)
        if target is None:
            cut = href.find("#")
            key = href if cut < 0 else href[: cut + 1]
            target = by_key.get(key)
            if target is None:
                target = by_key[key] = canonicalize_url(href, base=base)
            resolved[href] = target
        if target in taken:
            continue
        taken.add(target)
        rel = (attrs.get("rel") or "").lower()
        links.append(Link(target, _clean(anchor.text()), "nofollow" in rel))
    return links


def _main_node(tree: LexborHTMLParser, found: _PageNodes) -> LexborNode | None:
    for candidates in (found.mains, found.role_mains, found.articles):
        live = [node for node in candidates if node.parent is not None]
        if len(live) == 1:
            return live[0]
    return tree.body
