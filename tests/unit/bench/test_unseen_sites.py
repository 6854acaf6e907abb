"""The unseen-sites bench: its table shows each ranker's means, deltas and the adjusted p-values."""

from __future__ import annotations

from pathlib import Path

from bench.relevance.unseen_sites import report_rows
from training.crawl_sets import CrawlSite


def _comparison(b: str, mean_a: float, mean_b: float, p: float, p_holm: float | None) -> dict[str, object]:
    out: dict[str, object] = {"b": b, "mean_a": mean_a, "mean_b": mean_b, "delta": mean_b - mean_a}
    out["p_randomization"] = p
    if p_holm is not None:
        out["p_randomization_holm"] = p_holm
    return out


def test_rows_hold_both_metrics_and_prefer_the_holm_adjusted_p() -> None:
    result = {
        "ndcg@10": {
            "a": "bm25",
            "comparisons": [
                _comparison("hybrid", 0.9, 0.8, 0.001, 0.002),
                _comparison("ltr:v4", 0.9, 0.95, 0.01, 0.02),
            ],
        },
        "mrr@10": {
            "a": "bm25",
            "comparisons": [
                _comparison("hybrid", 0.85, 0.75, 0.003, None),
                _comparison("ltr:v4", 0.85, 0.9, 0.04, 0.08),
            ],
        },
    }
    rows = report_rows(CrawlSite("pgdocs", Path("/nowhere"), "postgresql-doc-15"), 12, result)
    assert rows[0] == "| pgdocs (12 queries) | bm25 | 0.9000 / 0.8500 | — | — |"
    assert rows[1] == "| | hybrid | 0.8000 / 0.7500 | -0.1000 / -0.1000 | 0.002 / 0.003 |"
    assert rows[2] == "| | ltr:v4 | 0.9500 / 0.9000 | +0.0500 / +0.0500 | 0.02 / 0.08 |"
