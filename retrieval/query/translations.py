"""Translations shown once: the hits of one page in several languages folded into one result.

Hits sharing a translation group (``retrieval.index.translations``) in different languages
are one result, at the place of the best-ranked of them, shown in the reader's language
(``lang:``, else the request's ``Accept-Language``, else ``rank.user_lang``) when that one
is among them, else as the best-ranked; the others become its ``translations``. Folding
works within a page, as near-duplicates do: pages stay slices of one ranked list, so no
result reappears on a later page and ``total`` still counts matching documents. It runs on
every response, after the cache (the reader's language is not part of the cached answer),
and costs a dictionary pass over the page's hits; hits without a group are never touched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from core.types import Hit, SearchResponse

__all__ = ["fold_translations", "reader_language", "with_translations"]


def reader_language(accept_language: str | None, default: str = "") -> str:
    """The primary language of the highest-weighted range of an ``Accept-Language`` header
    (``de-CH, fr;q=0.9`` → ``de``; first listed wins a tie), else ``default``."""
    best, best_q = "", 0.0
    for item in (accept_language or "").split(",")[:20]:
        tag, _, params = item.partition(";")
        lang = tag.strip().split("-")[0].split("_")[0].lower()
        if not lang.isalpha() or len(lang) > 8:
            continue  # ``*`` and garbage
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > best_q:
            best, best_q = lang, q
    return best or default


def fold_translations(hits: Sequence[Hit], preferred: str) -> list[Hit]:
    """``hits`` with each translation group among them shown once (module doc).

    Only members with a language fold, one per language (the best-ranked): a second page of
    the same language in a group is a separate result, not a translation."""
    groups: dict[str, list[int]] = {}
    for position, hit in enumerate(hits):
        if hit.translation_group and hit.lang:
            groups.setdefault(hit.translation_group, []).append(position)
    shown_at: dict[int, Hit] = {}
    folded: set[int] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        first_of: dict[str, int] = {}
        for position in members:
            first_of.setdefault(hits[position].lang, position)
        if len(first_of) < 2:
            continue
        shown = first_of.get(preferred, members[0])
        others = [position for position in first_of.values() if position != shown]
        translations = tuple(sorted((hits[p].lang, hits[p].url) for p in others))
        shown_at[members[0]] = dataclasses.replace(hits[shown], translations=translations)
        folded.update(p for p in (*others, shown) if p != members[0])
    if not shown_at:
        return list(hits)
    return [shown_at.get(p, hit) for p, hit in enumerate(hits) if p not in folded]


def with_translations(response: SearchResponse, reader_lang: str | None) -> SearchResponse:
    """``response`` with its page's translations folded, in the query's ``lang:`` if it has one,
    else in ``reader_lang`` (None or ``""``: the best-ranked member's language)."""
    if not any(hit.translation_group for hit in response.hits):
        return response
    preferred = (response.query.lang or reader_lang or "").lower()
    hits = fold_translations(response.hits, preferred)
    return response if len(hits) == len(response.hits) else dataclasses.replace(response, hits=tuple(hits))
