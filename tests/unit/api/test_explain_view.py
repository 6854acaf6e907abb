"""The explain view's arrangement of a hit's signals: parts that add up to the score shown."""

from __future__ import annotations

import math

from api.explain_view import ScorePart, explain_view


def _adds_up(parts: list[ScorePart], total: float | None) -> bool:
    return total is not None and abs(math.fsum(p.amount for p in parts) - total) <= 1e-9


def test_explain_parts_add_up_to_the_learned_score_in_words_a_person_reads() -> None:
    info = {
        "shard": 0, "bm25": 7.5, "field_bm25": {"title": 0.0, "body": 3.0}, "cosine": None,
        "lexical_rank": 2, "vector_rank": None, "final_score": 1.25, "position": 3,
        "ltr": {"model": "m1", "score": 1.25, "bias": 0.1,
                "features": {"bm25": 7.5, "coverage_title": 1.0, "pagerank": 0.2, "phrase_match": None},
                "contributions": {"bm25": 0.4, "coverage_title": 0.75, "phrase_match": -0.000007}},
    }  # fmt: skip
    view = explain_view("ltr", info, {"loop": {"body": 2.0, "title": 1.0}})
    rows = [(p.label, p.identifier, p.value) for p in view.score_parts]
    assert rows[:3] == [
        ("Starting point (the model's average)", "bias", ""),
        ("Share of the query's words in the title", "coverage_title", "1"),
        ("Word match (BM25), whole page", "bm25", "7.5"),
    ]
    assert rows[3][0] == "1 more signal, too small to show"  # not "phrase_match missing -0.0000"
    assert _adds_up(view.score_parts, view.score_total) and view.score_total == 1.25
    assert view.fields == ["title", "text"]
    # The words' rows, what the words leave over, and the column totals: they add up to the BM25.
    assert view.terms == [
        ("loop", ["1.0000", "2.0000"], "3.0000"),
        ("not broken down by word", ["", ""], "4.5000"),
        ("total", ["1.0000", "2.0000"], "7.5000"),
    ]
    assert view.vector == [] and view.other == []


def test_fusions_and_bm25_add_up_too() -> None:
    rrf = explain_view(
        "hybrid-rrf", {"rrf": 1 / 61 + 1 / 64, "rrf_k": 60, "lexical_rank": 1, "vector_rank": 4}, {}
    )
    assert [p.label for p in rrf.score_parts] == [
        "Word match: 1 / (60 + rank 1)",
        "Meaning match: 1 / (60 + rank 4)",
    ]
    assert _adds_up(rrf.score_parts, rrf.score_total)
    convex = {"convex": 0.7 * 0.5 + 0.3 * 1.0, "cosine_weight": 0.7, "bm25_scaled": 1.0, "cosine_scaled": 0.5}
    view = explain_view("hybrid", {**convex, "final_score": convex["convex"], "cosine": 0.61}, {})
    assert _adds_up(view.score_parts, view.score_total) and len(view.score_parts) == 2
    assert view.vector == [("Meaning match (cosine similarity)", "0.6100")]
    bm25 = {"bm25": 3.5, "final_score": 3.5}
    words = explain_view("bm25", bm25, {"loop": {"body": 2.0}, "path": {"title": 1.0}})
    assert [p.label for p in words.score_parts] == [
        "the word loop",
        "the word path",
        "Not broken down (phrases, proximity, synonyms)",
    ]
    assert _adds_up(words.score_parts, words.score_total)
