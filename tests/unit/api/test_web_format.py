"""Crawl values written for people, and the explain view's arrangement of a hit's signals."""

from __future__ import annotations

from api.explain_view import explain_view
from api.web_format import duration, readable, size, timestamp


def test_times_sizes_and_durations() -> None:
    assert timestamp(1796109490.1565) == "2026-12-01 07:18:10 UTC"
    assert (duration(0.0042), duration(1.5), duration(90), duration(86_400), duration(3 * 86_400)) == (
        "4 ms", "1.5 s", "1.5 min", "1 day", "3 days",
    )  # fmt: skip
    assert (size(812), size(107_870), size(5 * 1024**2)) == ("812 B", "105.3 KB", "5.0 MB")
    assert readable("last_fetch", 1796109490.1565) == "2026-12-01 07:18:10 UTC"
    assert readable("interval_s", 86_400.0) == "1 day"
    assert readable("mean_response_ms", 12.0) == "12 ms"
    assert [readable("cluster", []), readable("dup_of", ""), readable("lease_until", None)] == ["", "", ""]
    assert readable("indexed", True) == "yes"


def test_explain_view_sorts_ltr_by_effect_and_hides_empty_rows() -> None:
    info = {
        "shard": 0, "bm25": 7.5, "field_bm25": {"title": 0.0, "body": 3.0}, "cosine": None,
        "lexical_rank": 2, "vector_rank": None, "final_score": 1.25, "position": 3,
        "ltr": {"model": "m1", "score": 1.25, "bias": 0.1,
                "features": {"bm25": 7.5, "title_cover": 1.0, "pagerank": 0.2},
                "contributions": {"bm25": 0.4, "title_cover": -0.9}},
    }  # fmt: skip
    view = explain_view("ltr", info, {"loop": {"body": 2.0, "title": 1.0}})
    assert [(r.name, r.value) for r in view.ltr] == [("title_cover", "1"), ("bm25", "7.5")]
    assert view.ltr[0].share == 1.0 and round(view.ltr[1].share, 3) == round(0.4 / 0.9, 3)
    assert ("features with no effect (hidden)", "1") in view.ltr_summary
    assert view.fields == ["title", "body"] and view.terms == [("loop", ["1.0000", "2.0000"], "3.0000")]
    assert view.field_totals == [("body", "3.0000")]
    assert view.vector == [] and view.fusion == [] and view.other == []
    rrf = explain_view("hybrid-rrf", {"rrf": 0.03, "rrf_k": 60, "lexical_rank": 1, "vector_rank": 4}, {})
    assert rrf.fusion[1:] == [("  lexical: 1 / (60 + 1)", "0.01639"), ("  vector: 1 / (60 + 4)", "0.01562")]
    assert rrf.vector == [("vector rank", "4")]
