"""Query-dependent snippets: about two lines around the densest cluster of query terms.

The page text is HTML-escaped piece by piece and only our own ``<mark>`` tags are
added, so no markup from a crawled page can reach a result page. Matching uses the
same analysis as the index (a word matches when its stem is a query stem), found fast
by a C-level regex over candidate prefixes and then confirmed by stemming.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass

from retrieval.tokenizer import fold, stem

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
MAX_SCAN_CHARS = 200_000
"""Beyond this, a page's tail is not searched for snippet matches (cost stays bounded)."""


@dataclass(frozen=True, slots=True)
class _Match:
    start: int
    end: int
    stem: str


def _matches(text: str, stems: frozenset[str], surfaces: Iterable[str]) -> list[_Match]:
    prefixes = {s for s in stems if s} | {fold(w) for w in surfaces if w}
    if not prefixes:
        return []
    # Word starting with a stem or a query word; confirmed by stemming below.
    pattern = re.compile(
        r"\b(?:" + "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True)) + r")",
        re.IGNORECASE,
    )
    found: list[_Match] = []
    scan = text[:MAX_SCAN_CHARS]
    for hit in pattern.finditer(scan):
        word = _WORD.match(scan, hit.start())
        if word is None:
            continue
        token = fold(word.group(0)).replace("'", "").replace("’", "")
        token_stem = stem(token)
        if token_stem in stems:
            found.append(_Match(word.start(), word.end(), token_stem))
    return found


def _best_window(matches: list[_Match], width: int) -> int:
    """Start offset of the window of ``width`` chars with most distinct, then most, matches."""
    best_start, best_key = 0, (-1, -1)
    right = 0
    for left, first in enumerate(matches):
        while right < len(matches) and matches[right].end - first.start <= width:
            right += 1
        inside = matches[left:right]
        key = (len({m.stem for m in inside}), len(inside))
        if key > best_key:
            best_start, best_key = first.start, key
    return best_start


def make_snippet(
    text: str, stems: Iterable[str], surfaces: Iterable[str] = (), *, max_chars: int = 220
) -> str:
    """An HTML-safe snippet of ``text`` with query matches in ``<mark>``.

    >>> make_snippet("Air <b>flows</b> over a wing.", {"flow"}, max_chars=40)
    'Air &lt;b&gt;<mark>flows</mark>&lt;/b&gt; over a wing.'
    """
    text = " ".join(text.split()) if len(text) < 4 * MAX_SCAN_CHARS else text
    stem_set = frozenset(stems)
    matches = _matches(text, stem_set, surfaces)
    if not matches:
        return _escape_cut(text, 0, max_chars)
    first = _best_window(matches, max_chars)
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
    for m in (m for m in matches if m.start >= start and m.end <= end):
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
