"""The cascade simulator: clicks follow relevance; a better ranker wins interleaving and A/B alike."""

from __future__ import annotations

import random

import numpy as np
import pytest

from training.experiments.simulator import (
    PRESETS,
    ab_metrics,
    exact_moments,
    interleaved_lists,
    relevance_from_qrels,
    relevance_lists,
    run_ab,
    run_interleaving,
    simulate_clicks,
)

QIDS = [f"q{i}" for i in range(40)]


def synthetic() -> tuple[dict, dict, dict]:
    """40 queries, 3 relevant documents each among 20; B ranks them first, A buries two of them."""
    rng = random.Random(0)
    qrels, good, worse = {}, {}, {}
    for q in QIDS:
        docs = [f"{q}-d{i}" for i in range(20)]
        relevant = rng.sample(docs, 3)
        qrels[q] = {d: 2 for d in relevant}
        rest = [d for d in docs if d not in relevant]
        good[q] = relevant + rest
        worse[q] = [relevant[0], *rest[:6], *relevant[1:], *rest[6:]]
    return qrels, worse, good


def test_perfect_users_click_exactly_the_relevant_documents() -> None:
    qrels, _, good = synthetic()
    lists = relevance_lists(good, relevance_from_qrels(qrels), QIDS)
    clicks = simulate_clicks(lists.relevance, lists.valid, PRESETS["perfect"], np.random.default_rng(0))
    assert clicks.tolist() == (lists.relevance > 0).tolist()


def test_stopping_after_a_satisfying_click() -> None:
    relevance = np.array([[1.0, 1.0, 1.0]] * 2000)
    valid = np.ones_like(relevance, dtype=bool)
    clicks = simulate_clicks(relevance, valid, PRESETS["navigational"], np.random.default_rng(1))
    # Click at 1 with 0.95, stop after it with 0.9: the second is clicked with 0.95 * (1 - 0.95 * 0.9).
    assert clicks[:, 0].mean() == pytest.approx(0.95, abs=0.015)
    assert clicks[:, 1].mean() == pytest.approx(0.95 * (1 - 0.95 * 0.9), abs=0.015)


@pytest.mark.parametrize("model", ["navigational", "informational"])
def test_interleaving_prefers_the_better_ranker_and_ab_agrees(model: str) -> None:
    qrels, worse, good = synthetic()
    rel = relevance_from_qrels(qrels)
    rng = np.random.default_rng(2)
    inter = run_interleaving(
        interleaved_lists(worse, good, rel, QIDS, draws=16, seed=2),
        impressions=3000,
        model=PRESETS[model],
        rng=rng,
    )
    assert inter.wins_b > inter.wins_a and inter.p_value < 0.05
    ab = run_ab(
        relevance_lists(worse, rel, QIDS),
        relevance_lists(good, rel, QIDS),
        impressions=6000,
        model=PRESETS[model],
        rng=rng,
    )
    mrr_a, mrr_b, p = ab.metrics["mrr_clicks"]
    assert mrr_b > mrr_a and p < 0.05


def test_identical_rankers_tie_every_impression() -> None:
    qrels, _, good = synthetic()
    rel = relevance_from_qrels(qrels)
    inter = run_interleaving(
        interleaved_lists(good, good, rel, QIDS, draws=8, seed=0),
        impressions=2000,
        model=PRESETS["perfect"],
        rng=np.random.default_rng(0),
    )
    # Perfect users click every relevant result; with identical lists the teams split them
    # by coin flips, so preferences cancel out on average and the test finds nothing.
    assert inter.p_value > 0.01
    assert abs(inter.wins_b - inter.wins_a) < 0.1 * inter.impressions


@pytest.mark.parametrize("model", ["navigational", "informational"])
def test_exact_moments_match_simulation(model: str) -> None:
    qrels, worse, _ = synthetic()
    rel = relevance_from_qrels(qrels)
    rel = {
        q: {d: g * (0.5 if i % 2 else 1.0) for i, (d, g) in enumerate(docs.items())}
        for q, docs in rel.items()
    }
    lists = relevance_lists(worse, rel, QIDS)
    # Some lists shorter than 10, so CTR's denominator varies by query.
    lists = type(lists)(lists.relevance, lists.valid & (np.arange(10) < 8 + np.arange(40)[:, None] % 3))
    exact = exact_moments(lists, PRESETS[model])
    rng = np.random.default_rng(5)
    q = rng.integers(0, len(QIDS), size=200_000)
    simulated = ab_metrics(
        simulate_clicks(lists.relevance[q], lists.valid[q], PRESETS[model], rng), lists.valid[q]
    )
    for metric, (mean, var) in exact.items():
        est = simulated[metric]
        assert est.value == pytest.approx(mean, abs=4 * np.sqrt(var / 200_000) + 1e-9), metric
        if metric != "abandonment":  # a Bernoulli: its variance is p(1 - p), and p is checked above
            assert est.variance * 200_000 == pytest.approx(var, rel=0.03), metric
