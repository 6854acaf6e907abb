"""Team-draft interleaving and click credit on hand-built lists."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from online.interleaving import Credit, credit, draw_key, interleave_rng, page_of, team_draft


class Coins(random.Random):
    """A real ``random.Random`` whose draws are given: < 0.5 means team A picks first."""

    def __init__(self, draws: Iterable[float]) -> None:
        super().__init__(0)
        self._draws = list(draws)

    def random(self) -> float:
        return self._draws.pop(0)


def test_team_draft_by_hand() -> None:
    # Round 1: coin -> A picks 1, B picks its best unshown (2). Round 2: coin -> B picks 5
    # (1 and 2 are shown), then A picks 3.
    merged = team_draft([1, 2, 3, 4], [2, 1, 5, 6], k=4, rng=Coins([0.1, 0.9]))
    assert merged.doc_ids == (1, 2, 5, 3)
    assert merged.teams == ("a", "b", "b", "a")


def test_exhausted_list_lets_the_other_team_fill() -> None:
    merged = team_draft([1], [2, 3, 4], k=4, rng=Coins([0.1, 0.1, 0.1]))
    assert merged.doc_ids == (1, 2, 3, 4)
    assert merged.teams == ("a", "b", "b", "b")


def test_k_caps_and_union_bounds_the_length() -> None:
    assert team_draft([1, 2], [2, 1], k=10, rng=random.Random(1)).doc_ids in {(1, 2), (2, 1)}
    disjoint = team_draft(list(range(50)), list(range(50, 100)), k=10, rng=random.Random(1))
    assert len(disjoint.doc_ids) == 10
    assert (disjoint.teams.count("a"), disjoint.teams.count("b")) == (5, 5)


@pytest.mark.parametrize(
    ("clicked", "expected", "preference"),
    [
        ([2, 3], Credit(a=0, b=2), "b"),
        ([1, 4], Credit(a=2, b=0), "a"),
        ([1, 2], Credit(a=1, b=1), "tie"),
        ([], Credit(a=0, b=0), "tie"),
        ([3, 3, 3, 1], Credit(a=1, b=1), "tie"),  # a repeated click counts once
    ],
)
def test_clicks_credit_the_contributing_team(clicked: list[int], expected: Credit, preference: str) -> None:
    teams = team_draft([1, 2, 3, 4], [2, 1, 5, 6], k=4, rng=Coins([0.1, 0.9])).teams
    got = credit(teams, clicked)
    assert got == expected
    assert got.preference == preference


def test_click_outside_the_list_is_an_error() -> None:
    with pytest.raises(ValueError, match="click position 5 is outside the shown list"):
        credit(("a", "b", "a", "b"), [5])


def test_every_document_is_credited_to_the_list_that_placed_it() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a = rng.sample(range(30), 10)
        b = rng.sample(range(30), 10)
        merged = team_draft(a, b, k=10, rng=rng)
        shown: set[int] = set()
        for doc, team in zip(merged.doc_ids, merged.teams, strict=True):
            source = a if team == "a" else b
            # The team's highest-ranked document not shown before it.
            assert doc == next(d for d in source if d not in shown)
            shown.add(doc)


def test_first_pick_is_fair_and_reproducible_per_impression() -> None:
    firsts = [team_draft([1, 2], [3, 4], k=2, rng=interleave_rng(f"imp-{i}")).teams[0] for i in range(4000)]
    assert firsts.count("a") / 4000 == pytest.approx(0.5, abs=0.03)
    again = [team_draft([1, 2], [3, 4], k=2, rng=interleave_rng(f"imp-{i}")).teams[0] for i in range(4000)]
    assert firsts == again


def test_pages_slice_one_merge_with_the_same_draws() -> None:
    """Page p of the merge, drawn again from the same key, continues page p - 1 exactly."""
    a = list(range(0, 40))
    b = list(range(39, -1, -1))
    key = draw_key("user-1", "alpha", "g1", ("bm25", "hybrid"))
    pages = [page_of(a[: p * 10], b[: p * 10], page=p, size=10, rng=interleave_rng(key)) for p in (1, 2, 3)]
    whole = team_draft(a, b, k=30, rng=interleave_rng(key))
    assert [d for p in pages for d in p.doc_ids] == list(whole.doc_ids)
    assert [t for p in pages for t in p.teams] == list(whole.teams)
    assert len(set(whole.doc_ids)) == 30
