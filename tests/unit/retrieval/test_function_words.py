"""A query read in German, Spanish or French: its function words searched as English stopwords are."""

from __future__ import annotations

from retrieval.index.lexical_query import scoring_terms, stat_terms
from retrieval.text.analyzer import parse_query
from retrieval.text.function_words import FUNCTION_WORDS, read_in
from retrieval.text.stopword_search import ignored_stopwords, stopword_search
from retrieval.text.tokenizer import ENGLISH_STOPWORDS


def test_a_query_is_read_in_its_lang_filter_else_the_readers_language() -> None:
    assert read_in(parse_query("Astuces pour"), "fr-CH").read_as == "fr"
    assert read_in(parse_query("Astuces pour lang:es"), "fr").read_as == "es"
    # English, and languages without a list, leave the query as it was: the same value.
    english = parse_query("Tips for")
    assert read_in(english, "en") is english
    assert read_in(english, None) is english
    assert read_in(parse_query("ヒント"), "ja").read_as == ""


def test_a_long_query_is_read_in_the_language_it_is_written_in() -> None:
    # An English reader's French question, a French reader's English one (five words and more).
    french = "comment configurer le réseau sans fil sur mon ordinateur portable"
    english = "how do I configure the wireless network on my laptop"
    assert read_in(parse_query(french), "en").read_as == "fr"
    assert read_in(parse_query(french), None).read_as == "fr"
    assert read_in(parse_query(english), "fr").read_as == ""
    assert (
        read_in(parse_query("wie richte ich das drahtlose Netzwerk auf dem Laptop ein"), "es").read_as == "de"
    )
    # lang: still names it, and a short query is the reader's: two words are too few to call.
    assert read_in(parse_query(f"{english} lang:fr"), "en").read_as == "fr"
    assert read_in(parse_query("réseau sans"), "en").read_as == ""
    assert read_in(parse_query("Astuces pour"), "es").read_as == "es"


def test_function_words_score_in_captions_only_like_english_stopwords() -> None:
    query = read_in(parse_query("Astuces pour"), "fr")
    assert dict(scoring_terms(query)) == {"astuc": 1}
    search = stopword_search(query)
    assert search.words == ("pour",)
    assert search.phrases == (("astuc", "pour"),)
    assert "pour" in stat_terms(query)  # its document frequency still scores the captions clause
    # The same words for an English reader: "pour" is a word like any other, searched everywhere.
    unread = parse_query("Astuces pour")
    assert dict(scoring_terms(unread)) == {"astuc": 1, "pour": 1}
    assert not stopword_search(unread)


def test_each_language_reads_only_its_own_function_words() -> None:
    german = read_in(parse_query("Leben mit den Aktualisierungen"), "de")
    assert set(scoring_terms(german)) == {"leben", "aktualisierungen"}
    assert set(stopword_search(german).words) == {"mit", "den"}
    spanish = read_in(parse_query("Leben mit den Aktualisierungen"), "es")
    assert set(scoring_terms(spanish)) == {"leben", "mit", "den", "aktualisierungen"}


def test_a_query_of_function_words_only_still_searches_them() -> None:
    query = read_in(parse_query("de la"), "fr")
    assert dict(scoring_terms(query)) == {"de": 1, "la": 1}
    assert stopword_search(query).terms == ("de", "la")


def test_phrases_keep_every_word_and_sentences_ignore_function_words() -> None:
    query = read_in(parse_query('"gestion des paquets" Debian'), "fr")
    assert scoring_terms(query)["des"] == 1  # a phrase is matched as written
    sentence = read_in(parse_query("comment configurer le réseau sans fil pour un portable"), "fr")
    assert "pour" not in scoring_terms(sentence)
    assert ignored_stopwords(sentence) == ("le", "pour", "un")


def test_the_lists_hold_no_english_content_word_and_are_folded() -> None:
    for listed in FUNCTION_WORDS.values():
        assert not listed & {"die", "son", "sin", "hat", "war", "man"}
        assert all(w == w.casefold() and w.isascii() for w in listed)
    assert "ou" in FUNCTION_WORDS["fr"]  # "où", folded as pages are
    assert not ENGLISH_STOPWORDS & {"pour", "des", "und", "los"}
