"""A page's static quality: how much of it is links, and whether it says anything at all.

An index, a table of contents or a listing page ("File and Directory Access", Sphinx's
``genindex-F.html``) names every topic and answers none: it wins word matches against the
page it links to. Its main content is almost all link text (link density .6 to 1.0 on the
Python docs, where the median page has .04), so a page's quality falls from 1 at density
.3 to .55 at .8 and above; a crawled page of fewer than :data:`NEAR_EMPTY_WORDS` words
is near empty and is worth .7 at most. The score, one of a few tiers, is stored with the
document (the forward index's ``quality`` static) and multiplies its BM25 wherever a shard
scores it (``retrieval.index.lexical``), so hybrid and LTR see the demoted score too.
Thresholds were read off the Python docs' link densities, not tuned on any judged query.
Corpus records without links (cranfield, cisi) score 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.types import Document

TIERS: tuple[float, ...] = (0.85, 0.7, 0.55)
"""The demoted tiers, best first; a page at none of them has quality 1."""
DENSE_FROM = 0.3
"""Link density up to which a page keeps full quality (content pages with many cross-references)."""
DENSE_TO = 0.8
"""Link density from which a page is at the lowest tier (index pages are .84 to .99)."""
NEAR_EMPTY_WORDS = 20
"""A crawled page of fewer words says next to nothing (a stub, a redirect notice, a search form)."""


@dataclass(frozen=True, slots=True)
class PageQuality:
    score: float
    """1, or the tier (one of :data:`TIERS`) the page is demoted to."""
    link_density: float
    """Words of the main content inside links over its words (0 for a page without words)."""
    reasons: tuple[str, ...] = ()


def describe(score: float, reasons: tuple[str, ...]) -> str:
    """A page's quality as ``trawl inspect`` and the web inspector show it."""
    return f"{score:g} ({', '.join(reasons) or 'not an index, listing or near-empty page'})"


def quality_of(doc: Document) -> PageQuality:
    """The quality of a stored document: a crawled page (an http URL, or words inside links:
    a crawl-derived collection's page) may be near empty; a corpus record may not."""
    crawled = doc.link_words > 0 or doc.url.startswith(("http://", "https://"))
    return page_quality(len(doc.body.split()), doc.link_words, crawled=crawled)


def page_quality(words: int, link_words: int, *, crawled: bool) -> PageQuality:
    """The quality of a page of ``words`` words, ``link_words`` of them inside links."""
    density = min(link_words / words, 1.0) if words else 0.0
    by_links = _tier(1.0 - 0.45 * min(max((density - DENSE_FROM) / (DENSE_TO - DENSE_FROM), 0.0), 1.0))
    score, reasons = by_links, [f"{density:.0%} of its words are links"] if by_links < 1.0 else []
    if crawled and words < NEAR_EMPTY_WORDS:
        score = min(score, 0.7)
        reasons.append(f"near empty ({words} words)")
    return PageQuality(score, round(density, 4), tuple(reasons))


def _tier(raw: float) -> float:
    """``raw`` rounded to the nearest tier (1 when nearer 1 than the first tier)."""
    return min((1.0, *TIERS), key=lambda tier: abs(tier - raw))
