"""Team-draft interleaving (Radlinski, Kurup and Joachims, CIKM 2008) and click credit.

Interleaving shows one user one merged list and lets their clicks vote between the
two rankers, so each query is its own paired comparison: it needs far fewer
impressions than an A/B split, where user-to-user variance swamps small differences.

Team draft works like picking teams in a playground: each round, the team with
fewer picks so far (a coin flip on a tie) adds its highest-ranked document not
already shown. Every shown document remembers its team; a click credits that team.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from core.types import Hit, SearchResponse

Team = Literal["a", "b"]
Preference = Literal["a", "b", "tie"]
T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Interleaved:
    """The merged list and, aligned with it, the team that contributed each document."""

    doc_ids: tuple[Hashable, ...]
    teams: tuple[Team, ...]


def team_draft(a: Sequence[T], b: Sequence[T], *, k: int, rng: random.Random) -> Interleaved:
    """Merge rankings ``a`` and ``b`` into at most ``k`` documents by team draft.

    When one list runs out, the other keeps contributing, so the merged list is as
    long as the union allows.

    >>> team_draft([1, 2, 3], [3, 2, 1], k=3, rng=random.Random(0)).doc_ids
    (3, 1, 2)
    """
    shown: list[T] = []
    teams: list[Team] = []
    seen: set[T] = set()
    ia = ib = 0
    count_a = count_b = 0
    while len(shown) < k:
        while ia < len(a) and a[ia] in seen:
            ia += 1
        while ib < len(b) and b[ib] in seen:
            ib += 1
        has_a, has_b = ia < len(a), ib < len(b)
        if not has_a and not has_b:
            break
        a_turn = count_a < count_b or (count_a == count_b and rng.random() < 0.5)
        if (a_turn and has_a) or not has_b:
            doc, team = a[ia], "a"
            count_a += 1
        else:
            doc, team = b[ib], "b"
            count_b += 1
        shown.append(doc)
        teams.append(team)  # type: ignore[arg-type]
        seen.add(doc)
    return Interleaved(tuple(shown), tuple(teams))


def interleave_rng(key: str) -> random.Random:
    """The coin flips of one merged list: random across keys, reproducible from the log.

    The service keys them by user, query, generation and rankers (``draw_key``), not by
    impression: page 2 must continue the very list page 1 started, so it draws page 1's
    flips again, and a reload shows the same page."""
    seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    return random.Random(seed)


def draw_key(unit_id: str, query: str, generation: str, rankers: Sequence[str]) -> str:
    """What one user's merged list for one query depends on (all of it in the impression log)."""
    return "\x1f".join((unit_id, query, generation, *rankers))


def page_of(a: Sequence[T], b: Sequence[T], *, page: int, size: int, rng: random.Random) -> Interleaved:
    """Page ``page`` (1-based, ``size`` long) of the team-draft merge of ``a`` and ``b``.

    The merge of the whole lists, sliced: following pages never repeat a document and
    never skip one, and each document keeps the team that picked it. ``a`` and ``b``
    need their first ``page * size`` documents (a merged prefix takes no more of either).
    """
    merged = team_draft(a, b, k=page * size, rng=rng)
    start = (page - 1) * size
    return Interleaved(merged.doc_ids[start:], merged.teams[start:])


def interleave_responses(
    a_pages: Sequence[SearchResponse], b_pages: Sequence[SearchResponse], *, key: str
) -> tuple[SearchResponse, tuple[Team, ...]]:
    """Page ``len(a_pages)`` of the team-draft merge of two rankers' lists for one query.

    ``a_pages`` and ``b_pages`` are each ranker's pages 1 to that page (one size): the
    merge of the lists they make, sliced, so page 2 continues exactly where page 1 ended
    (no document twice, none skipped). ``key`` (``draw_key``) fixes the coin flips.
    Returns the last page of ``a`` with the merged hits, and their teams.
    """
    a, b = a_pages[-1], b_pages[-1]
    by_id: dict[int, Hit] = {int(h.doc_id): h for r in (*b_pages, *a_pages) for h in r.hits}
    merged = page_of(
        [int(h.doc_id) for r in a_pages for h in r.hits],
        [int(h.doc_id) for r in b_pages for h in r.hits],
        page=len(a_pages),
        size=a.size,
        rng=interleave_rng(key),
    )
    hits = tuple(by_id[int(d)] for d in merged.doc_ids)  # type: ignore[call-overload]
    return replace(a, hits=hits, ranker=f"{a.ranker}|{b.ranker}"), merged.teams


@dataclass(frozen=True, slots=True)
class Credit:
    a: int
    b: int

    @property
    def preference(self) -> Preference:
        return "a" if self.a > self.b else "b" if self.b > self.a else "tie"


def credit(teams: Sequence[Team], clicked_positions: Iterable[int]) -> Credit:
    """Count clicks per team; positions are 1-based ranks in the shown list, repeats count once.

    >>> credit(("a", "b", "a"), [1, 3, 3])
    Credit(a=2, b=0)
    """
    a = b = 0
    for position in set(clicked_positions):
        if not 1 <= position <= len(teams):
            raise ValueError(f"click position {position} is outside the shown list (1..{len(teams)})")
        if teams[position - 1] == "a":
            a += 1
        else:
            b += 1
    return Credit(a, b)
