"""The section of a result that answers the query: the hit links to its anchor and quotes it.

Chosen when a page of results is made, from the page's stored sections (heading, anchor and
offsets into the stored body, ``crawl.extraction.sections``) and one scan of the body for the
query's words (:class:`SnippetMatcher`: the snippet's analysis, so stems match), with nothing
from the index: ranking is untouched. Each query stem counts once per place, weighted (a typed
word 1, a compound or synonym spelling its expansion weight): a section scores
:data:`HEADING_WEIGHT` × its heading's stems + its text's stems. The page top (the title as its
heading, and the text before the first anchored section, or that section when it opens the
page) scores the same way. A section is taken only when its heading holds a query word and it
beats the top by :data:`MARGIN` (DECISIONS 75); the best is the highest score, then the most
query words its heading spells as asked, then the first (a parent heading before its entries).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from core.types import Query, Section
from retrieval.index.lexical import StoredDoc
from retrieval.index.lexical_query import analysed
from retrieval.query.snippets import Match, SnippetMatcher, make_snippet, snippet_of
from retrieval.text.tokenizer import fold, words

__all__ = [
    "HEADING_WEIGHT",
    "MARGIN",
    "MIN_OWN_TEXT_CHARS",
    "SectionQuery",
    "best_section",
    "snippet_and_section",
]

HEADING_WEIGHT = 2.0
"""A query word in a section's heading says the section is about it; in its text, only that it is used."""
MARGIN = 2.0
"""How much better than the page top a section must score: one more query word in its heading
than the title has. Less, and a page about the query (``json`` on json.html, whose every entry
says json) would open at some entry; a result that opens mid-page must be plainly about the query."""


MIN_OWN_TEXT_CHARS = 60
"""A section with less text after its heading is quoted reading on into the next one."""


@dataclass(frozen=True, slots=True)
class SectionQuery:
    """What choosing sections needs of one query, built once for a page of results."""

    weights: dict[str, float]
    """Query stem → weight: typed words 1, an expansion's stems its weight (the larger wins)."""
    matcher: SnippetMatcher
    """Finds every stem of ``weights`` (the snippet's own matcher when expansions add none)."""
    words: frozenset[str]
    """The query's words as typed (folded), and its expansions': a heading that spells one as
    asked wins a tie (``dumps`` picks ``json.dumps()`` over ``json.dump()``, one stem)."""

    @classmethod
    def of(cls, query: Query, snippet_matcher: SnippetMatcher) -> SectionQuery:
        weights = dict.fromkeys(snippet_matcher.stems, 1.0)
        added: list[str] = []
        for text, weight in query.expansions:
            for stem in analysed(text):
                if stem not in weights:
                    added.append(text)
                weights[stem] = max(weights.get(stem, 0.0), weight)
        asked = (*query.terms, *query.phrases, *(text for text, _ in query.expansions))
        typed = frozenset(word for text in asked for word in words(text))
        if not added:
            return cls(weights, snippet_matcher, typed)
        surfaces = [w for t in (*query.terms, *query.phrases, *added) for w in t.split()]
        return cls(weights, SnippetMatcher(weights, surfaces), typed)


def snippet_and_section(
    doc: StoredDoc, sections: SectionQuery, matcher: SnippetMatcher, *, max_chars: int, snippets: bool
) -> tuple[str, Section | None]:
    """The hit's snippet (``""`` without ``snippets``) and the section it quotes and links to, if any.

    A page without sections gets the snippet it always got; with sections, the body is scanned
    once for both the choice and (when the snippet matcher finds the same words) the snippet."""
    text = doc.body or doc.description
    if not doc.sections or not sections.weights:
        return (make_snippet(text, matcher, max_chars=max_chars) if snippets else ""), None
    found = sections.matcher.matches(doc.body)
    section = best_section(doc.title, doc.body, doc.sections, found, sections)
    if not snippets:
        return "", section
    if section is not None:
        return _opening(doc.body, section, sections.matcher, max_chars), section
    if sections.matcher is matcher:
        return snippet_of(doc.body, found, max_chars=max_chars), None
    return make_snippet(doc.body, matcher, max_chars=max_chars), None


def _opening(body: str, section: Section, matcher: SnippetMatcher, max_chars: int) -> str:
    """The snippet of a chosen section: how its text opens after the heading (the page shows the
    heading beside it), with the query's words marked, the compound spellings that chose it too.
    An API entry's first sentence is its summary; the densest window of a long entry is often
    an example. A section with almost no text of its own (a heading over its first entry)
    reads on into the next."""
    after = section.start + len(section.heading)
    end = section.end if section.end - after >= MIN_OWN_TEXT_CHARS else after + max_chars
    text = body[after : min(end, after + 2 * max_chars)].lstrip()
    if not text:
        text = body[section.start : section.end]
    return snippet_of(text, matcher.matches(text), max_chars=max_chars, opening=True)


def best_section(
    title: str, body: str, sections: Sequence[Section], found: list[Match], query: SectionQuery
) -> Section | None:
    """The section that answers the query clearly better than the page top (module doc), or None.

    ``sections`` are the page's anchored ones in body order; ``found`` the query's matches in
    the body, in order (:meth:`SnippetMatcher.matches`)."""
    if not sections or not found:
        return None
    weights = query.weights
    starts = [m.start for m in found]
    first = sections[0]
    opens = first.start == 0 or first.heading.casefold() in title.casefold()
    top_end = first.end if opens else first.start
    top = HEADING_WEIGHT * _weight(query.matcher.matches(title), weights)
    top += _weight(found[: bisect_left(starts, top_end)], weights)
    best: Section | None = None
    best_key = (top + MARGIN, -1)
    for section in sections[1:] if opens else sections:
        lo = bisect_left(starts, section.start)
        hi = bisect_left(starts, section.end, lo)
        if lo == hi:
            continue
        head = bisect_left(starts, section.start + len(section.heading), lo, hi)
        in_heading = _weight(found[lo:head], weights)
        if not in_heading:
            continue
        score = HEADING_WEIGHT * in_heading + _weight(found[lo:hi], weights)
        key = (score, sum(fold(body[m.start : m.end]) in query.words for m in found[lo:head]))
        if key > best_key:  # the bar starts at (top + MARGIN, -1): a tie with it passes
            best, best_key = section, key
    return best


def _weight(matches: Sequence[Match], weights: dict[str, float]) -> float:
    """The weight of the distinct stems ``matches`` found (each bigram of a merged CJK run too)."""
    return sum(weights.get(stem, 0.0) for stem in {s for m in matches for s in m.stems})
