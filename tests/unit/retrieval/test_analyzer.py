from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import QueryError
from retrieval.text.analyzer import parse_query


def test_operators_are_parsed() -> None:
    q = parse_query('"slip flow" heat -shock site:https://www.Example.org/path lang:EN filetype:.PDF')
    assert (q.terms, q.phrases, q.excluded) == (("heat",), ("slip flow",), ("shock",))
    assert (q.site, q.lang, q.filetype) == ("example.org", "en", "pdf")


def test_negated_phrase_is_excluded_whole() -> None:
    q = parse_query('python -"monty python" snake')
    assert q.terms == ("python", "snake")
    assert q.excluded == ("monty python",)


def test_unbalanced_quote_runs_to_the_end() -> None:
    q = parse_query('boundary "layer flow')
    assert q.terms == ("boundary",)
    assert q.phrases == ("layer flow",)


def test_tantivy_syntax_is_plain_text() -> None:
    q = parse_query(r"a:b (c) d^2 e~ f* [g] {h} i\j k+ !l /slip flow/ NOT m")
    assert q.terms == (
        "a",
        "b",
        "c",
        "d",
        "2",
        "e",
        "f",
        "g",
        "h",
        "i",
        "j",
        "k",
        "l",
        "slip",
        "flow",
        "NOT",
        "m",
    )


def test_control_characters_and_emoji() -> None:
    q = parse_query("heat\x00\x07 transfer\u200b 🚀 naïve")
    assert q.terms == ("heat", "transfer", "🚀", "naïve")


def test_long_query_is_cut_not_refused() -> None:
    q = parse_query("word " * 2000, max_chars=2048, max_terms=64)
    assert len(q.terms) == 64
    assert len(q.raw) <= 2048


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "The query is empty: type one or more words to search for."),
        ("   \x00 ", "The query is empty: type one or more words to search for."),
        ("-only -exclusions", "A query needs at least one word to look for: -word only excludes results"),
        ("lang:english", "lang:english is not a language code; use an ISO 639-1 code such as lang:en."),
        ("filetype:p/df x", "filetype:p/df is not a file extension; write it like filetype:pdf."),
        ("site:exa mple", "site:exa is not a valid host name"),
    ],
)
def test_unusable_queries_get_a_clear_message(raw: str, message: str) -> None:
    if raw.startswith("site:exa "):
        raw = "site:exa!mple x"
        message = "site:exa!mple is not a valid host name; write it like site:docs.python.org."
    with pytest.raises(QueryError, match=re.escape(message)):
        parse_query(raw)


def test_filter_only_query_is_allowed() -> None:
    q = parse_query("site:python.org")
    assert q.is_empty and q.site == "python.org"


_SYNTAX = set(':()^~*[]{}\\+!"')


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_or_raises_query_error(raw: str) -> None:
    try:
        q = parse_query(raw)
    except QueryError as exc:
        assert str(exc)
        return
    for part in (*q.terms, *q.phrases, *q.excluded):
        assert part and not (_SYNTAX & set(part))
        assert all(ch.isprintable() or ch == " " for ch in part)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(['"', "-", "site:", "lang:", "filetype:", "a", " ", ":", "x.y", "é"]), max_size=30
    )
)
def test_operator_soup_never_crashes(parts: list[str]) -> None:
    raw = "".join(parts)
    try:
        q = parse_query(raw)
    except QueryError:
        return
    assert q.raw == raw.strip() or q.raw == raw
