from __future__ import annotations

from retrieval.text.tokenizer import analyze, term_frequencies


def test_stems_folds_and_drops_stopwords() -> None:
    assert analyze("The Flows of AIR over Cafés") == ["flow", "air", "cafe"]


def test_apostrophes_join_words_on_both_sides() -> None:
    assert analyze("can't") == analyze("cant") == ["cant"]


def test_repeated_query_words_are_counted() -> None:
    assert term_frequencies("flow flows flowing heat")["flow"] == 3


def test_junk_tokens_are_dropped() -> None:
    assert analyze("a" * 65 + " ok") == ["ok"]
