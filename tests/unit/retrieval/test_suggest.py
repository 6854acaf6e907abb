"""Completions of typed text: word prefixes with context, one typo on the last word, ranking, size."""

from __future__ import annotations

import pytest

from retrieval.query.suggest import MAX_SIZE, Phrase, Suggester, Typed, one_typo

PHRASES = (
    Phrase("asyncio — Asynchronous I/O", "title", "https://d.test/asyncio.html", 3.0),
    Phrase("asyncore — Asynchronous socket handler", "title", "https://d.test/asyncore.html", 0.5),
    Phrase("Event Loop", "title", "https://d.test/asyncio-eventloop.html", 2.0),
    Phrase("Coroutines and Tasks", "title", "https://d.test/asyncio-task.html", 2.0),
    Phrase("Asynchronous generator functions", "heading", "https://d.test/expressions.html", 0.5),
    Phrase("asyncio event loop", "query", None, 1.4),
)
DF = {"asyncio": 60, "asyncore": 2, "asynchronous": 40, "event": 30, "loop": 35, "coroutines": 20}


@pytest.fixture(scope="module")
def suggester() -> Suggester:
    return Suggester.build(PHRASES, DF)


def texts(suggester: Suggester, typed: str, size: int = 8) -> list[str]:
    return [s.text for s in suggester.suggest(typed, size)]


def test_a_word_prefix_completes_titles_headings_and_queries(suggester: Suggester) -> None:
    found = suggester.suggest("asy")
    assert {s.kind for s in found} == {"title", "heading", "query"}
    assert found[0].text == "asyncio — Asynchronous I/O"
    assert found[0].url == "https://d.test/asyncio.html"
    assert texts(suggester, "ASY") == texts(suggester, "asy")  # folded as the index folds


def test_a_prefix_matches_any_word_of_a_phrase_not_only_the_first(suggester: Suggester) -> None:
    assert texts(suggester, "loop") == ["Event Loop", "asyncio event loop"]
    assert texts(suggester, "tas") == ["Coroutines and Tasks"]
    assert "Coroutines and Tasks" not in texts(suggester, "and")  # no key starts at a stopword inside


def test_earlier_words_are_context(suggester: Suggester) -> None:
    assert texts(suggester, "asyncio ev", 1) == ["asyncio event loop"]
    assert texts(suggester, "coroutines and t", 1) == ["Coroutines and Tasks"]
    assert texts(suggester, "asyncio loo", 1) == ["asyncio event loop"]  # not adjacent: a word set


def test_after_the_phrases_the_typed_words_are_completed_by_document_frequency(suggester: Suggester) -> None:
    found = suggester.suggest("asyncio ev")
    assert [(s.text, s.kind, s.url) for s in found] == [
        ("asyncio event loop", "query", None),
        ("asyncio event", "completion", None),
    ]
    assert texts(suggester, "bread as") == ["bread asyncio", "bread asynchronous", "bread asyncore"]
    assert texts(suggester, "bread asyncio ") == ["bread asyncio"]
    assert texts(suggester, "bread asyncoi") == ["bread asyncio", "bread asyncore"]  # one typo
    assert texts(suggester, "evemt l") == ["evemt loop"]  # the context is kept as typed


def test_a_space_completes_the_last_word(suggester: Suggester) -> None:
    assert texts(suggester, "event ") == ["Event Loop", "asyncio event loop"]
    assert texts(suggester, "asyncio ") == ["asyncio — Asynchronous I/O", "asyncio event loop"]
    assert texts(suggester, "asyncor ") == []  # a finished word that no phrase holds


def test_one_typo_in_the_last_word_is_forgiven(suggester: Suggester) -> None:
    assert texts(suggester, "coru")[0] == "Coroutines and Tasks"  # a letter dropped
    assert texts(suggester, "croo") == ["Coroutines and Tasks"]  # two swapped
    assert texts(suggester, "asyncio evemt")[0] == "asyncio event loop"  # a letter replaced


def test_typos_are_tried_only_when_nothing_matches_as_typed(suggester: Suggester) -> None:
    assert texts(suggester, "asynco") == ["asyncore — Asynchronous socket handler"]
    assert texts(suggester, "asyncoi")[0] == "asyncio — Asynchronous I/O"  # two letters swapped
    assert texts(suggester, "tas") == ["Coroutines and Tasks"]  # not "as…" with the t dropped


def test_ranking_weighs_importance_and_how_many_documents_hold_the_word() -> None:
    rare = Phrase("asyncore — Asynchronous socket handler", "title", "https://d.test/a", 1.0)
    common = Phrase("asyncio — Asynchronous I/O", "title", "https://d.test/b", 1.0)
    assert texts(Suggester.build([rare, common], DF), "asy")[0] == common.text
    loud = Phrase(rare.text, "title", rare.url, 10.0)
    assert texts(Suggester.build([loud, common], DF), "asy")[0] == loud.text


def test_a_match_at_the_start_beats_one_inside_a_phrase() -> None:
    phrases = [
        Phrase("More on structures", "title", "u1", 1.0),
        Phrase("Structures of data", "title", "u2", 1.0),
    ]
    assert texts(Suggester.build(phrases, {}), "struct") == ["Structures of data", "More on structures"]


def test_the_same_text_is_one_suggestion_shown_as_its_page_says() -> None:
    phrases = [
        Phrase("Event loop", "heading", "https://d.test/low", 0.1),
        Phrase("event   LOOP", "query", None, 5.0),
        Phrase("Event Loop", "title", "https://d.test/high", 2.0),
        Phrase("Event Loop", "title", "https://d.test/higher", 2.5),
    ]
    first, second = Suggester.build([*phrases, Phrase("Event horizon", "title", "u", 5.2)], {}).suggest("eve")
    assert (first.text, first.kind, first.url) == ("Event Loop", "title", "https://d.test/higher")
    assert second.text == "Event horizon"  # below the query's 5.0 and three more sources
    assert [s.text for s in Suggester.build(phrases[1:2], {}).suggest("eve")] == ["event LOOP"]


def test_size_is_bounded() -> None:
    phrases = [Phrase(f"topic {i:03d}", "title", f"u{i}", i / 100) for i in range(100)]
    suggester = Suggester.build(phrases, {})
    assert len(suggester.suggest("top", 5)) == 5
    assert len(suggester.suggest("top", 1_000)) == MAX_SIZE
    assert suggester.suggest("top", 0) == []
    assert [s.text for s in suggester.suggest("topic", 3)] == ["topic 099", "topic 098", "topic 097"]


def test_long_phrases_and_text_without_words_are_left_out() -> None:
    long = Phrase(" ".join(["word"] * 30), "heading", "u", 5.0)
    suggester = Suggester.build([long, Phrase("—", "title", "u", 1.0)], {})
    assert len(suggester) == 0
    assert suggester.suggest("wo") == []
    assert Suggester.build([], {}).suggest("a") == []


def test_typed_text_is_parsed_into_context_and_last_word() -> None:
    assert Typed.parse("  Asyncio  EV") == Typed(("asyncio",), "ev", False)
    assert Typed.parse("i/o ") == Typed(("i",), "o", True)
    assert Typed.parse(" — ") is None


def test_one_typo_variants() -> None:
    variants = one_typo("ab", "abc")
    assert {"a", "b", "ba", "cb", "ac", "cab", "acb"} <= variants
    assert "ab" not in variants and "abc" not in variants  # adding at the end is a longer prefix
