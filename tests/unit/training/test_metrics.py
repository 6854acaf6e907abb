"""Our pytrec_eval wrapper against metrics computed by hand from their definitions."""

from __future__ import annotations

import math

import pytest

from training.ir_metrics import evaluate_run

QRELS = {"q1": {"d1": 2, "d3": 1}, "q2": {"d9": 1}, "q3": {"d5": 1}}
RUN = {
    "q1": {"d2": 3.0, "d1": 2.0, "d4": 1.5, "d3": 1.0},
    "q2": {f"x{i}": 100.0 - i for i in range(12)} | {"d9": 1.0},
    # q3 has no result at all
}


def test_metrics_match_hand_computation() -> None:
    report = evaluate_run(RUN, QRELS)
    # trec_eval's nDCG uses the grade itself as the gain.
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    q1 = report.per_query["q1"]
    assert q1["ndcg@10"] == pytest.approx(dcg / idcg, abs=1e-4)
    assert q1["mrr@10"] == pytest.approx(0.5)
    assert q1["map"] == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert q1["recall@100"] == pytest.approx(1.0)
    q2 = report.per_query["q2"]
    assert q2["mrr@10"] == 0.0  # first relevant at rank 13: outside the cut
    assert q2["map"] == pytest.approx(1 / 13)
    assert report.per_query["q3"] == {"ndcg@10": 0.0, "map": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    assert report.means["mrr@10"] == pytest.approx(0.5 / 3)
