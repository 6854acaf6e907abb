"""report(name) on hand-built logs: A/B metrics by hand, SRM, interleaving preference and sign test."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from scipy import stats as sps

from online.book import INTERLEAVED, Assignment, ExperimentBook
from online.logs import ExperimentLogs
from online.runtime import ExperimentRuntime
from training.experiments.analysis import report

BOOK = ExperimentBook.from_mapping(
    {
        "experiments": {
            "t": {
                "salt": "t",
                "stop": datetime(2026, 1, 1),
                "variants": [
                    {"name": "control", "ranker": "bm25"},
                    {"name": "treat", "ranker": "bm25-notitle"},
                ],
            },
            "il": {
                "mode": "interleave",
                "salt": "il",
                "start": datetime(2026, 1, 1),
                "variants": [{"name": "a", "ranker": "bm25"}, {"name": "b", "ranker": "bm25-notitle"}],
            },
        }
    }
)
DOCS = [10, 11, 12]


def runtime(log_dir: Path) -> ExperimentRuntime:
    return ExperimentRuntime(BOOK, ExperimentLogs(log_dir, flush_interval_s=None))


def ab(variant: str) -> Assignment:
    return Assignment("t", "ab", variant, ("bm25",))


def test_ab_metrics_by_hand(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    plan = [  # (variant, user, clicked positions)
        ("control", "u1", [2]),
        ("control", "u1", []),
        ("control", "u2", [1, 3, 1]),  # the repeated click on 1 counts once
        ("treat", "u3", [1]),
        ("treat", "u4", [1]),
        ("treat", "u4", [2]),
    ]
    for variant, user, clicks in plan:
        imp = rt.record_impression(query="q", doc_ids=DOCS, assignment=ab(variant), unit_id=user)
        for pos in clicks:
            rt.record_click(impression_id=imp, doc_id=DOCS[pos - 1], position=pos)
    rt.record_impression(query="q", doc_ids=DOCS)  # outside any experiment: ignored
    rt.close()
    result = report("t", log_dir=tmp_path, book=BOOK)
    got = {v.variant: (v.users, v.impressions, v.clicks) for v in result.variants}
    assert got == {"control": (2, 3, 3), "treat": (2, 3, 3)}
    values = {v.variant: {m: round(x.value, 6) for m, x in v.metrics.items()} for v in result.variants}
    assert values == {
        "control": {"ctr": 0.333333, "clicks_per_query": 1.0, "abandonment": 0.333333, "mrr_clicks": 0.5},
        "treat": {"ctr": 0.333333, "clicks_per_query": 1.0, "abandonment": 0.0, "mrr_clicks": 0.833333},
    }
    deltas = {c.metric: round(c.delta, 6) for c in result.comparisons}
    assert deltas == {"ctr": 0.0, "clicks_per_query": 0.0, "abandonment": -0.333333, "mrr_clicks": 0.333333}
    assert result.srm is not None and result.srm.users == {"control": 2, "treat": 2}
    assert result.srm.p_value == pytest.approx(1.0) and not result.srm.mismatch
    assert result.to_json()["comparisons"][3]["metric"] == "mrr_clicks"
    assert "| mrr_clicks | treat − control | +0.3333" in result.to_markdown()


def test_sample_ratio_mismatch_is_flagged(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    for i in range(500):
        rt.record_impression(
            query="q", doc_ids=DOCS, assignment=ab("control" if i < 300 else "treat"), unit_id=f"u{i}"
        )
    rt.close()
    result = report("t", log_dir=tmp_path, book=BOOK)
    assert result.srm is not None and result.srm.users == {"control": 300, "treat": 200}
    assert result.srm.p_value == pytest.approx(sps.chisquare([300, 200]).pvalue)
    assert result.srm.mismatch


def test_interleaving_preference_per_impression_and_query(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    il = Assignment("il", "interleave", INTERLEAVED, ("bm25", "bm25-notitle"))
    docs = [1, 2, 3, 4]
    teams = ("a", "b", "a", "b")
    plan = [("Wing Flutter", [2]), ("wing flutter ", [1, 2]), ("heat", [1]), ("heat", []), ("shock", [2, 4])]
    for query, clicks in plan:
        imp = rt.record_impression(query=query, doc_ids=docs, assignment=il, unit_id="u", teams=teams)
        for pos in clicks:
            rt.record_click(impression_id=imp, doc_id=docs[pos - 1], position=pos)
    rt.close()
    r = report("il", log_dir=tmp_path, book=BOOK).interleaving
    assert r is not None
    assert (r.impressions, r.wins_a, r.wins_b, r.ties) == (5, 1, 2, 2)
    assert r.delta_ab == pytest.approx(0.2) and r.preferred == "b"
    assert r.p_sign == pytest.approx(sps.binomtest(2, 3).pvalue)
    assert (r.queries, r.query_wins_a, r.query_wins_b, r.query_ties) == (3, 1, 2, 0)


def test_unknown_or_empty_experiment_is_an_error(tmp_path: Path) -> None:
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match="Unknown experiment 'nope'"):
        report("nope", log_dir=tmp_path, book=BOOK)
    with pytest.raises(ConfigError, match="No impressions of experiment 't'"):
        report("t", log_dir=tmp_path, book=BOOK)
