"""A page's sections: each heading (``h1``–``h6``, and the ``<dt id>`` of an API entry as Sphinx
writes ``<dt id="zip">``) with the anchor a link can name and where it starts in the body text.

The offsets must be the stored body's, character for character, and the body must not change.
So before the body's text is taken, a mark (a noncharacter and the section's number) goes into
the tree in front of each heading; the whitespace-collapsed text then says where every heading
landed, and :func:`unmark` removes the marks (with the space a mark-only word leaves) by the
same rule ``" ".join(text.split())`` would have applied without them. Marks outside the main
content never reach the text, so those headings are no sections. A page that holds the mark
character itself (never seen) gets no sections rather than wrong ones. About 0.3 ms (6–8%) of
a Python-docs page's parse (``docs/DECISIONS.md`` 75).

The anchor is the heading's own ``id``, else the ``id`` of a ``<section>``/``<div>`` the heading
opens, else that of an empty ``<a name>``/``<a id>``/``<span id>`` just before it, or of an
``<a>`` first inside it; ``""`` when none.
"""

from __future__ import annotations

from collections.abc import Sequence

from selectolax.lexbor import LexborNode

from core.types import Section

__all__ = ["MARK", "SECTION_TAGS", "mark_sections", "unmark"]

MARK = "\ufdd0"
"""A noncharacter: no page text holds it, and it is no whitespace, so it survives ``str.split``."""
_NUMBER_BASE = 0xE000
"""The section's number follows the mark as one character of the Private Use Area: in the Basic
Multilingual Plane, so the text stays two bytes a character (an astral character made it four
and cost 0.1 ms a page)."""
_SPACED_MARK = " " + MARK
SECTION_TAGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "dt"})
MAX_SECTIONS = 2_000
"""More are left out (the largest Python-docs page, os.html, has ~450; numbers go to 6,400)."""
MAX_HEADING_CHARS = 200
"""A heading is cut to this for display: a long API signature says enough by then."""
_CONTAINERS = frozenset({"section", "div", "article"})
_EMPTY_ANCHORS = frozenset({"a", "span"})


def mark_sections(html: str, nodes: Sequence[tuple[LexborNode, str]]) -> list[tuple[str, str]]:
    """Put a numbered mark before each ``(node, heading text)`` with text; the ``(heading,
    anchor)`` of each, by number. None when ``html`` holds the mark itself."""
    if MARK in html:
        return []
    marked: list[tuple[str, str]] = []
    for node, text in nodes:
        if len(marked) >= MAX_SECTIONS:
            break
        if not text:
            continue
        anchor = _anchor(node)  # before the mark goes in: it would stand between
        node.insert_before(MARK + chr(_NUMBER_BASE + len(marked)))
        marked.append((text[:MAX_HEADING_CHARS], anchor))
    return marked


def unmark(text: str, marked: Sequence[tuple[str, str]]) -> tuple[str, tuple[Section, ...]]:
    """``text`` (whitespace already collapsed) without its marks, and the marked headings that
    reached it as sections. A run of marks is one word or touches one: it is dropped with a space
    where it stood between two words alone, and its sections start at the next word.

    Runs are found with ``str.find`` (a regex that may start with a space tries every position:
    0.8 ms a page). A mark the page itself held (an ``&#xfdd0;``) shows as a run whose numbers
    are not ours in order: the text is then given back without any mark, and no sections."""
    if not marked or MARK not in text:
        return text, ()
    size = len(text)
    pieces: list[str] = []
    starts: list[tuple[int, int]] = []
    removed = last = 0
    previous = -1
    at = text.find(MARK)
    while at >= 0:
        lo = at - 1 if at > last and text[at - 1] == " " else at
        hi = at
        numbers: list[int] = []
        while True:
            number = ord(text[hi + 1]) - _NUMBER_BASE if hi + 1 < size else -1
            if not previous < number < len(marked):
                return " ".join(_without_marks(text, len(marked)).split()), ()
            numbers.append(number)
            previous = number
            hi += 2
            if text.startswith(MARK, hi):
                continue
            if text.startswith(_SPACED_MARK, hi):
                hi += 1
                continue
            break
        if hi < size and text[hi] == " ":
            hi += 1
        keep = " " if lo > 0 and hi < size and " " in text[lo:hi] else ""
        pieces.append(text[last:lo])
        pieces.append(keep)
        begins = lo - removed + len(keep)
        starts.extend((begins, number) for number in numbers)
        removed += hi - lo - len(keep)
        last = hi
        at = text.find(MARK, hi)
    pieces.append(text[last:])
    body = "".join(pieces)
    ends = [start for start, _ in starts[1:]] + [len(body)]
    sections = tuple(
        Section(heading=marked[number][0], anchor=marked[number][1], start=start, end=end)
        for (start, number), end in zip(starts, ends, strict=True)
    )
    return body, sections


def _without_marks(text: str, count: int) -> str:
    for number in range(count):
        text = text.replace(MARK + chr(_NUMBER_BASE + number), "")
    return text


def _anchor(node: LexborNode) -> str:
    own = node.attributes.get("id")
    if own:
        return own
    # Empty <a>/<span> elements just before the heading are anchors of it (Sphinx puts its
    # cross-reference labels there: <span id="built-in-funcs"></span><h1>); anything else
    # before it means the heading does not open its container.
    named = ""
    opens = True
    sibling = node.prev
    while sibling is not None:
        if sibling.is_element_node:
            if sibling.tag not in _EMPTY_ANCHORS or (sibling.text() or "").strip():
                opens = False
                break
            attrs = sibling.attributes
            named = named or attrs.get("id") or attrs.get("name") or ""
        elif (sibling.text_content or "").strip():
            opens = False
            break
        sibling = sibling.prev
    parent = node.parent
    if opens and parent is not None and parent.tag in _CONTAINERS and (opened := parent.attributes.get("id")):
        return opened
    if named:
        return named
    first = _first_element(node)
    if first is not None and first.tag == "a":
        attrs = first.attributes
        return attrs.get("id") or attrs.get("name") or ""
    return ""


def _first_element(node: LexborNode) -> LexborNode | None:
    child = node.first_child
    while child is not None and not child.is_element_node:
        if (child.text_content or "").strip():
            return None
        child = child.next
    return child
