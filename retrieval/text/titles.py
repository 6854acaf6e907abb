"""A host's site-name title suffix ("Event Loop — Python 3.11.2 documentation"), found and removed.

Most sites end every title with their own name after a separator. Shown on a result
page it is noise, and indexed in the title field it makes the site name match every
page of the host. The suffix is detected per host, not configured: it is the
separator-led tail that the most distinct titles of the host end with, and it must
end at least ``MIN_SHARE`` of them (and two), so a host whose titles share nothing
keeps them whole. Removal happens when documents are read for index build, so the
docstore keeps the page's title as crawled.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

__all__ = ["MIN_SHARE", "site_suffix", "without_suffix"]

MIN_SHARE = 0.5
"""Share of a host's distinct titles that must end with a tail for it to be the site name."""
_SEPARATOR = re.compile(r"\s+[—–\-|·:»]\s+")


def site_suffix(titles: Iterable[str], *, min_share: float = MIN_SHARE) -> str:
    """The separator-led tail (separator included) most distinct titles end with; "" if none.

    >>> site_suffix(["A — Docs", "B — Docs", "C"])
    ' — Docs'
    """
    distinct = {t.strip() for t in titles}
    distinct.discard("")
    tails: Counter[str] = Counter()
    for title in distinct:
        tails.update({title[m.start() :] for m in _SEPARATOR.finditer(title) if m.start() > 0})
    if not tails:
        return ""
    needed = max(2.0, min_share * len(distinct))
    best_count, _, best = max((n, len(tail), tail) for tail, n in tails.items())
    return best if best_count >= needed else ""


def without_suffix(title: str, suffix: str) -> str:
    """``title`` without ``suffix``; a title that is only the site name stays as it is."""
    title = title.strip()
    if suffix and title.endswith(suffix) and len(title) > len(suffix):
        return title[: -len(suffix)].rstrip()
    return title
