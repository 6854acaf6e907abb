"""Query-dependent snippets: about two lines around the densest cluster of query terms.

The page text is HTML-escaped piece by piece and only our own ``<mark>`` tags are
added, so no markup from a crawled page can reach a result page. Matching uses the
same analysis as the index (a word matches when its stem is a query stem). A
:class:`SnippetMatcher` is built once per query: one compiled regex finds candidate
words by prefix at C speed, and a per-query cache confirms each distinct word once.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass

from retrieval.text.tokenizer import CJK_RUN, ENGLISH_STOPWORDS, fold, stem

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
MAX_SCAN_CHARS = 200_000
"""Beyond this, a page's tail is not searched for snippet matches (cost stays bounded)."""


@dataclass(frozen=True, slots=True)
class Match:
    """A query word found in a text: ``[start, end)`` and the query stem it matched."""

    start: int
    end: int
    stem: str
    more: tuple[str, ...] = ()
    """The other stems of a merged CJK run ("档案库基础": 案库 库基 基础 beside 档案)."""

    @property
    def stems(self) -> tuple[str, ...]:
        return (self.stem, *self.more)


class SnippetMatcher:
    """Finds the words of a text whose stem is one of the query's stems."""

    def __init__(self, stems: Iterable[str], surfaces: Iterable[str] = ()) -> None:
        self.stems = frozenset(s for s in stems if s)
        self._cjk = tuple(sorted(s for s in self.stems if CJK_RUN.fullmatch(s)))
        """Character bigrams of Chinese, Japanese and Korean: found anywhere in a run, not at word starts."""
        # Stopwords are not indexed, so they are never highlighted; as prefixes they
        # would only make every word starting with "a" a candidate.
        folded = {fold(w) for w in surfaces if w}
        prefixes = set(self.stems) - set(self._cjk)
        prefixes |= {w for w in folded if w not in ENGLISH_STOPWORDS and len(w) > 1 and not CJK_RUN.search(w)}
        prefixes.discard("")
        self._prefixes = _shortest_prefixes(prefixes)
        self._seen: dict[str, str | None] = {}

    def _stem_if_match(self, word: str) -> str | None:
        if word not in self._seen:
            token_stem = stem(fold(word).replace("'", "").replace("’", ""))
            self._seen[word] = token_stem if token_stem in self.stems else None
        return self._seen[word]

    def _candidate_starts(self, scan: str) -> list[int]:
        """Offsets where a word begins with a query prefix.

        ``str.find`` on the lower-cased text runs at memchr speed, far faster than a
        case-insensitive regex alternation. Offsets in the lower-cased text are the
        text's own: the one character whose lower case is two (U+0130, ``İ``, to ``i̇``)
        is lower-cased as ``i`` (the regex this replaced cost 3 ms on such a page).
        """
        low = scan.lower()
        if len(low) != len(scan):
            low = scan.replace("\u0130", "i").lower()
        starts: set[int] = set()
        for prefix in self._prefixes:
            i = low.find(prefix)
            while i != -1:
                if i == 0 or not low[i - 1].isalnum():
                    starts.add(i)
                i = low.find(prefix, i + 1)
        return sorted(starts)

    def matches(self, text: str) -> list[Match]:
        scan = text[:MAX_SCAN_CHARS]
        words = self._word_matches(scan)
        return sorted(words + self._cjk_matches(scan), key=lambda m: m.start) if self._cjk else words

    def _cjk_matches(self, scan: str) -> list[Match]:
        """Runs of the query's CJK bigrams in ``scan``, overlapping ones merged into one mark."""
        spans: list[tuple[int, int, str]] = []
        for piece in self._cjk:
            i = scan.find(piece)
            while i != -1:
                spans.append((i, i + len(piece), piece))
                i = scan.find(piece, i + 1)
        merged: list[Match] = []
        for start, end, piece in sorted(spans):
            if merged and start < merged[-1].end:
                last = merged[-1]
                more = last.more if piece in last.stems else (*last.more, piece)
                merged[-1] = Match(last.start, max(last.end, end), last.stem, more)
            else:
                merged.append(Match(start, end, piece))
        return merged

    def _word_matches(self, scan: str) -> list[Match]:
        if not self._prefixes:
            return []
        found: list[Match] = []
        last_end = -1
        for start in self._candidate_starts(scan):
            if start < last_end:
                continue
            word = _WORD.match(scan, start)
            if word is None:
                continue
            last_end = word.end()
            token_stem = self._stem_if_match(word.group(0))
            if token_stem is not None:
                found.append(Match(word.start(), word.end(), token_stem))
        return found


def _shortest_prefixes(prefixes: set[str]) -> tuple[str, ...]:
    """The prefixes no other one starts: every word a longer one finds, its own prefix finds
    too (a stem and its surface forms: ``flow`` finds ``flows``), and on a long page each
    occurrence costs a ``str.find`` call (a quarter of the snippet time on the demo site)."""
    kept: list[str] = []
    for prefix in sorted(prefixes, key=len):
        if not prefix.startswith(tuple(kept)):
            kept.append(prefix)
    return tuple(sorted(kept))


def _best_window(matches: list[Match], width: int) -> int:
    """Start offset of the window of ``width`` chars with most distinct, then most, matches.

    One pass with a count per stem in the window (a long page has hundreds of matches;
    counting each window's distinct stems afresh cost a tenth of a snippet)."""
    best_start, best_key = 0, (-1, -1)
    counts: dict[str, int] = {}
    right = 0
    for left, first in enumerate(matches):
        right = max(right, left)  # a match longer than the window left it empty
        while right < len(matches) and matches[right].end - first.start <= width:
            stem = matches[right].stem
            counts[stem] = counts.get(stem, 0) + 1
            right += 1
        key = (len(counts), right - left)
        if key > best_key:
            best_start, best_key = first.start, key
        if right > left:  # the first match leaves the window
            if counts[first.stem] == 1:
                del counts[first.stem]
            else:
                counts[first.stem] -= 1
    return best_start


def make_snippet(
    text: str,
    stems: Iterable[str] | SnippetMatcher,
    surfaces: Iterable[str] = (),
    *,
    max_chars: int = 220,
) -> str:
    """An HTML-safe snippet of ``text`` with query matches in ``<mark>``.

    >>> make_snippet("Air <b>flows</b> over a wing.", {"flow"}, max_chars=40)
    'Air &lt;b&gt;<mark>flows</mark>&lt;/b&gt; over a wing.'
    """
    matcher = stems if isinstance(stems, SnippetMatcher) else SnippetMatcher(stems, surfaces)
    return snippet_of(text, matcher.matches(text), max_chars=max_chars)


def snippet_of(text: str, matches: list[Match], *, max_chars: int = 220, opening: bool = False) -> str:
    """:func:`make_snippet` from the matches :meth:`SnippetMatcher.matches` found in ``text``
    (a caller that needed them anyway: ``retrieval.query.sections``); ``opening``: the text's
    first ``max_chars``, matches marked, rather than its densest window (a section's summary)."""
    if not matches:
        return _escape_cut(text, 0, max_chars)
    first = 0 if opening else _best_window(matches, max_chars)
    # Open a little before the first match so it reads in context.
    start = max(0, min(first - max_chars // 6, len(text) - max_chars))
    if start > 0:
        space = text.find(" ", start, first)
        start = space + 1 if space >= 0 else start
    end = min(len(text), start + max_chars)
    if end < len(text):
        space = text.rfind(" ", start, end)
        end = space if space > start + max_chars // 2 else end
    pieces: list[str] = ["… " if start > 0 else ""]
    cursor = start
    for m in matches:
        if m.start < start or m.end > end:
            continue
        pieces.append(html.escape(text[cursor : m.start], quote=True))
        pieces.append("<mark>" + html.escape(text[m.start : m.end], quote=True) + "</mark>")
        cursor = m.end
    pieces.append(html.escape(text[cursor:end], quote=True))
    if end < len(text):
        pieces.append(" …")
    return "".join(pieces)


def _escape_cut(text: str, start: int, max_chars: int) -> str:
    piece = text[start : start + max_chars]
    if len(text) > start + max_chars:
        space = piece.rfind(" ")
        piece = (piece[:space] if space > max_chars // 2 else piece) + " …"
    return html.escape(piece, quote=True)


def plain_snippet(snippet: str) -> tuple[str, list[tuple[int, int]]]:
    """The text of a snippet made by :func:`make_snippet` and its highlights as ``[start, end)``
    offsets in code points, for API clients that render their own way.

    >>> plain_snippet('Air &lt;b&gt;<mark>flows</mark>&lt;/b&gt; over')
    ('Air <b>flows</b> over', [(7, 12)])
    """
    text: list[str] = []
    ranges: list[tuple[int, int]] = []
    length = 0
    for number, piece in enumerate(snippet.split("<mark>")):
        marked, _, rest = piece.partition("</mark>") if number else ("", "", piece)
        if marked:
            word = html.unescape(marked)
            ranges.append((length, length + len(word)))
            text.append(word)
            length += len(word)
        tail = html.unescape(rest)
        text.append(tail)
        length += len(tail)
    return "".join(text), ranges
