"""The reported relevance figures still hold: each quick condition of
bench/relevance/conditions.toml, measured through the served path, equals its expected
scores to four decimals (``make relevance`` runs them all and rewrites docs/relevance.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.relevance.reproduce import METRICS, Condition, load_conditions, measure, moved

QUICK = [c for c in load_conditions() if c.quick]


def test_every_condition_names_its_four_scores() -> None:
    conditions = load_conditions()
    assert len({c.name for c in conditions}) == len(conditions)  # no condition twice
    assert all(set(c.expected) == set(METRICS) for c in conditions)
    assert QUICK  # the slow check below has something to check


@pytest.mark.slow
@pytest.mark.parametrize("condition", QUICK, ids=lambda c: c.name)
def test_a_reported_figure_has_not_moved(condition: Condition, eval_dir: Path) -> None:
    got = measure(condition, eval_dir)
    assert not moved(condition, got), f"{condition.name} moved: {moved(condition, got)}"
