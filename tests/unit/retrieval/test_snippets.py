from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.query.snippets import Match, SnippetMatcher, _best_window, _shortest_prefixes, make_snippet


def test_page_markup_is_escaped_and_matches_marked() -> None:
    text = 'Intro <script>alert("x")</script> the boundary layers & flows.'
    out = make_snippet(text, {"boundari", "layer"}, ["boundary", "layer"], max_chars=200)
    assert out == (
        "Intro &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; the "
        "<mark>boundary</mark> <mark>layers</mark> &amp; flows."
    )


def test_window_goes_to_densest_cluster() -> None:
    filler = "lorem ipsum dolor sit amet " * 40
    text = filler + "heat once. " + filler + "heat transfer and heat flux here. " + filler
    out = make_snippet(text, {"heat", "transfer", "flux"}, max_chars=120)
    assert "<mark>heat</mark> <mark>transfer</mark> and <mark>heat</mark> <mark>flux</mark>" in out
    assert out.startswith("… ") and out.endswith(" …")


def test_no_match_gives_escaped_start() -> None:
    assert make_snippet("a < b and more words here", {"zzz"}, max_chars=12) == "a &lt; b and …"


def test_stem_that_is_not_a_prefix_still_matches() -> None:
    # "happy" stems to "happi": found through the surface word.
    assert make_snippet("so happy today", {"happi"}, ["happy"]) == "so <mark>happy</mark> today"


def test_a_prefix_another_one_starts_is_not_searched_again() -> None:
    # "flow" finds every word "flows" would; "happy" stays (its stem "happi" is not its prefix).
    assert _shortest_prefixes({"flow", "flows", "flowing", "wing", "happi", "happy"}) == (
        "flow",
        "happi",
        "happy",
        "wing",
    )
    matcher = SnippetMatcher({"flow"}, ["flows", "flowing"])
    assert [m.stem for m in matcher.matches("Flows flowing; overflow flow.")] == ["flow", "flow", "flow"]


def _brute_force_window(matches: list[Match], width: int) -> int:
    """The window rule spelled out: every match as a start, its window's distinct stems and matches."""
    best_start, best_key = 0, (-1, -1)
    for left, first in enumerate(matches):
        inside = [m for m in matches[left:] if m.end - first.start <= width]
        key = (len({m.stem for m in inside}), len(inside))
        if key > best_key:
            best_start, best_key = first.start, key
    return best_start


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12), st.sampled_from("abcd")), max_size=40),
    st.integers(5, 120),
)
def test_the_one_pass_window_picks_what_the_rule_says(spans: list[tuple[int, int, str]], width: int) -> None:
    matches, at = [], 0
    for gap, length, stem in spans:  # ordered, non-overlapping, like a page's matches
        start = at + gap
        matches.append(Match(start, start + length, stem))
        at = start + length
    assert _best_window(matches, width) == _brute_force_window(matches, width)


def test_a_dotted_capital_i_keeps_the_offsets_in_line() -> None:
    # "İ".lower() is two characters: the text after it must still be marked where it is.
    text = "Dotted İstanbul, then the flows of Istanbul again."
    assert make_snippet(text, {"istanbul", "flow"}, ["istanbul", "flows"]) == (
        "Dotted <mark>İstanbul</mark>, then the <mark>flows</mark> of <mark>Istanbul</mark> again."
    )
