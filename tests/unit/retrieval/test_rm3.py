"""RM3: the relevance model's words and weights, from feedback documents."""

from __future__ import annotations

import pytest

from core.types import Query
from retrieval.index.lexical import StoredDoc
from retrieval.index.lexical_query import analysed
from retrieval.query.rm3 import Rm3


def _doc(doc_id: int, title: str, body: str) -> StoredDoc:
    return StoredDoc(doc_id, f"http://h/{doc_id}", title, body, (), "", "", "h", "en", "html")


QUERY = Query("wing", terms=("wing",))


def test_the_words_the_feedback_shares_weigh_by_score_and_frequency() -> None:
    feedback = [
        (3.0, _doc(1, "Wing design", "the wing airfoil and the airfoil camber")),
        (1.0, _doc(2, "Wings", "airfoil stall at the wing root")),
        (0.0, _doc(3, "Unrelated", "zebra zebra zebra")),  # no BM25 score: no vote
    ]
    expanded = Rm3(feedback_terms=3, original_weight=0.5).expand(QUERY, feedback)
    words = dict(expanded.expansions)
    assert set(words) <= {"wing", "airfoil", "design", "camber", "wings", "stall", "root"}
    assert "zebra" not in words and "airfoil" in words
    # (1 - λ) / λ × |q| = 1: the expansions share the original term's weight.
    assert sum(words.values()) == pytest.approx(1.0)
    # airfoil: 3/4 × 2/6 + 1/4 × 1/5 beats camber: 3/4 × 1/6 (document 2 says nothing of it).
    assert words["airfoil"] > words.get("camber", 0.0)
    assert expanded.terms == QUERY.terms and expanded.raw == QUERY.raw
    for word in words:
        assert len(analysed(word)) == 1  # each goes back to the shards as one stem


def test_the_original_weight_sets_the_expansions_share() -> None:
    feedback = [(2.0, _doc(1, "Heat", "heat transfer convection convection"))]
    two_terms = Query("heat flux", terms=("heat", "flux"))
    light = Rm3(feedback_terms=2, original_weight=0.8).expand(two_terms, feedback)
    assert sum(w for _, w in light.expansions) == pytest.approx(0.25 * 2)


def test_nothing_to_learn_from_leaves_the_query_alone() -> None:
    rm3 = Rm3()
    assert rm3.expand(QUERY, []) is QUERY
    assert rm3.expand(QUERY, [(0.0, _doc(1, "t", "words here"))]) is QUERY
    assert rm3.expand(Query("", terms=()), [(1.0, _doc(1, "t", "words"))]).expansions == ()
    assert rm3.expand(QUERY, [(1.0, _doc(1, "", "the and of 123"))]) is QUERY  # stopwords, numbers


@pytest.mark.parametrize("kwargs", [{"feedback_docs": 0}, {"feedback_terms": 0}, {"original_weight": 0.0}])
def test_settings_that_cannot_work_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Rm3(**kwargs)  # type: ignore[arg-type]
