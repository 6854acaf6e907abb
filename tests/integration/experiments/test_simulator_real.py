"""On a real collection, simulated users prefer the ranker the judgments prefer, in both designs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.settings import Settings
from tests.integration.experiments.conftest import SHUFFLED
from training.experiments.simulator import (
    PRESETS,
    interleaved_lists,
    pooled_runs,
    relevance_lists,
    run_ab,
    run_interleaving,
    size_experiment,
)


def test_interleaving_and_ab_agree_with_the_qrels(eval_dir: Path, exp_data_dir: Path) -> None:
    runs_a, runs_b, rel = pooled_runs(
        "bm25", SHUFFLED, [eval_dir / "cisi"], settings=Settings(data_dir=exp_data_dir)
    )
    qids = sorted(rel)
    assert len(qids) == 76 and all(q.startswith("cisi/") for q in qids)
    rng = np.random.default_rng(0)
    model = PRESETS["navigational"]
    inter = run_interleaving(
        interleaved_lists(runs_a, runs_b, rel, qids, draws=16, seed=0), impressions=2000, model=model, rng=rng
    )
    assert inter.wins_a > inter.wins_b and inter.p_value < 0.05  # A is bm25, the better one
    ab = run_ab(
        relevance_lists(runs_a, rel, qids),
        relevance_lists(runs_b, rel, qids),
        impressions=4000,
        model=model,
        rng=rng,
    )
    mrr_a, mrr_b, p = ab.metrics["mrr_clicks"]
    assert mrr_a > mrr_b and p < 0.05
    sizing = size_experiment(
        runs_a, runs_b, rel, model=model, pilot=40_000, max_pilot=200_000, reps=20, seed=1
    )
    assert sizing.interleaving_effect < 0 and sizing.ab_agrees["mrr_clicks"]
    assert 0 < sizing.interleaving_impressions < 2000 and 0 < sizing.ab_impressions["mrr_clicks"] < 4000
