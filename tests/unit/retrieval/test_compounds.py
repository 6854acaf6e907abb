"""Compound spellings found in a vocabulary: joined, hyphens dropped, unknown words split."""

from __future__ import annotations

from retrieval.text.analyzer import parse_query
from retrieval.text.compounds import best_split, compound_variants, with_compounds

DF = {
    "dataclass": 30,
    "defaultdict": 40,
    "default": 300,
    "dict": 500,
    "fstring": 3,
    "data": 900,
    "class": 800,
    "ordereddict": 2,
}


def test_adjacent_words_join_when_the_index_holds_the_compound() -> None:
    assert compound_variants(parse_query("default dict"), DF) == (("defaultdict", 1.0),)
    assert compound_variants(parse_query("use an ordered dict"), DF | {"ordered": 50}) == (
        ("ordereddict", 1.0),
    )
    assert compound_variants(parse_query("dict default"), DF) == ()  # "dictdefault" is no word of it
    assert (
        compound_variants(parse_query("pick from a list"), DF | {"alist": 5, "list": 90}) == ()
    )  # a stopword


def test_a_hyphenated_word_joins_and_a_rare_compound_is_not_enough() -> None:
    assert compound_variants(parse_query("f-string formatting"), DF) == (("fstring", 1.0),)
    assert compound_variants(parse_query("f-string"), DF, min_df=4) == ()


def test_a_hyphenated_word_is_also_the_phrase_of_its_parts_when_the_index_holds_them() -> None:
    held = DF | {"f": 40, "string": 700}
    assert compound_variants(parse_query("f-string"), held) == (("fstring", 1.0), ("f string", 1.0))
    assert compound_variants(parse_query("f-string"), held | {"fstring": 0}) == (("f string", 1.0),)
    assert compound_variants(parse_query("x-ray"), held) == ()  # neither "x" nor "ray" is held
    sentence = parse_query("how is an f-string formatted at run time")
    assert compound_variants(sentence, held) == (("fstring", 1.0),)  # a sentence: no phrase


def test_an_unknown_word_splits_into_two_known_ones_as_a_phrase() -> None:
    assert best_split("dataclass", DF) == "data class"
    assert compound_variants(parse_query("dataclass"), DF) == ()  # a known word is left alone
    assert compound_variants(parse_query("dataclasses"), DF) == ()  # "classes" is not in it
    assert compound_variants(parse_query("dictdata"), DF) == (("dict data", 0.7),)
    assert best_split("xyzzyplugh", DF) is None


def test_variants_add_to_the_query_and_nothing_without_a_vocabulary() -> None:
    query = parse_query("default dict -mock")
    assert with_compounds(query, None) is query
    expanded = with_compounds(query, DF)
    assert expanded.terms == query.terms and expanded.excluded == ("mock",)
    assert expanded.expansions == (("defaultdict", 1.0),)
