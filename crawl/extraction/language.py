"""The language a page is written in, from its text, for pages that do not say (DECISIONS 71).

The identifier is :mod:`core.language_id` (fastText's lid.176). The sample is the title and
headings, then windows spread over the body rather than its first kilobytes: those are often
a table of contents or an untranslated table, and a spread sample was right on pages a
prefix got wrong. Too little text, or a call the model is unsure of, gives ``""``: no
language is better than a wrong one for ``lang:``.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.language_id import MIN_CONFIDENCE, identify_language

__all__ = ["MIN_CONFIDENCE", "SAMPLE_CHARS", "identify_language", "language_tag", "page_language"]

SAMPLE_CHARS = 1000
"""Characters of a page the identifier reads (~0.2 ms): 2,000 cost twice as much, right no more often."""
_WINDOWS = 4
"""Body windows the sample takes, spread from the start of the body to its end."""
_HEADING_CHARS = 300
"""Of the sample, at most this much from the title and headings (they also open the body)."""


def language_tag(value: str) -> str:
    """The primary language of a BCP 47 tag, lower case (``zh-CN`` → ``zh``, ``pt_BR`` → ``pt``).

    A value naming several languages (``de, en``, as Content-Language may) says none: ``""``."""
    value = value.strip()
    if "," in value:
        return ""
    return value.split("-")[0].split("_")[0].lower()[:8]


def page_language(title: str, headings: Sequence[str], body: str) -> str:
    """The language of a parsed page's text as an ISO 639-1 code; ``""`` when it cannot say."""
    return identify_language(_sample(title, headings, body))


def _sample(title: str, headings: Sequence[str], body: str) -> str:
    """Title and headings, then ``_WINDOWS`` equal windows from the start of the body to its end."""
    head = " ".join([title, *headings])[:_HEADING_CHARS]
    room = SAMPLE_CHARS - len(head)
    if len(body) <= room:
        return f"{head} {body}"
    width = room // _WINDOWS
    starts = [i * (len(body) - width) // (_WINDOWS - 1) for i in range(_WINDOWS)]
    return " ".join([head, *(body[start : start + width] for start in starts)])
