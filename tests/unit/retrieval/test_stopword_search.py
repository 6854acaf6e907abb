"""Which stopwords a query searches (in titles and headings) and which it ignores."""

from __future__ import annotations

import pytest

from retrieval.index.lexical_query import scoring_terms
from retrieval.text.analyzer import parse_query
from retrieval.text.stopword_search import MAX_QUERY_WORDS, ignored_stopwords, stopword_search


def test_a_short_query_searches_its_stopwords_as_terms_and_in_word_pairs() -> None:
    search = stopword_search(parse_query("for loop"))
    assert search.words == ("for",)
    assert search.terms == ("for",)
    assert search.phrases == (("for", "loop"),)
    assert ignored_stopwords(parse_query("for loop")) == ()


def test_pairs_are_stemmed_and_each_listed_once() -> None:
    search = stopword_search(parse_query("is not operators"))
    assert search.terms == ("is", "not")
    assert search.phrases == (("is", "not"), ("not", "oper"))


def test_a_query_of_stopwords_only_searches_them() -> None:
    search = stopword_search(parse_query("AND OR NOT"))
    assert search.terms == ("and", "or", "not")
    assert search.phrases == (("and", "or"), ("or", "not"))


def test_phrases_pair_only_their_own_words() -> None:
    # "statement" (a free term) and "the with" (a phrase) are not adjacent in the text searched.
    search = stopword_search(parse_query('statement "the with"'))
    assert ("statement", "the") not in search.phrases
    assert search.phrases == (("the", "with"),)


def test_a_query_without_stopwords_searches_nothing_more() -> None:
    assert not stopword_search(parse_query("list comprehension"))
    assert ignored_stopwords(parse_query("list comprehension")) == ()


@pytest.mark.parametrize("extra", [1, 3])
def test_a_sentence_ignores_its_stopwords(extra: int) -> None:
    text = "what is the meaning of " + " ".join(["life"] * extra)
    assert len(text.split()) > MAX_QUERY_WORDS
    query = parse_query(text)
    assert not stopword_search(query)
    assert ignored_stopwords(query) == ("what", "is", "the", "of")


def test_the_limit_counts_phrase_words_too() -> None:
    assert stopword_search(parse_query('for "x y z"'))
    assert not stopword_search(parse_query('for "x y z w"'))


def test_a_sentence_does_not_search_its_one_character_words() -> None:
    query = parse_query("what drugs were tried against SARS-CoV-2 in animal studies")
    assert "2" not in scoring_terms(query) and {"sar", "cov", "drug"} <= set(scoring_terms(query))
    assert ignored_stopwords(query)[-1] == "2"


def test_a_short_query_keeps_its_one_character_words() -> None:
    assert set(scoring_terms(parse_query("c api"))) == {"c", "api"}


def test_a_sentence_of_nothing_but_one_character_words_searches_them() -> None:
    assert set(scoring_terms(parse_query("x y z w v"))) == {"x", "y", "z", "w", "v"}


def test_a_phrase_keeps_its_one_character_words() -> None:
    query = parse_query('what is new in "python 3 11" and after')
    assert scoring_terms(query)["3"] == 1
