from __future__ import annotations

from retrieval.snippets import make_snippet


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
