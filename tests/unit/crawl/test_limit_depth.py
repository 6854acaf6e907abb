"""The HTML depth bound: the numpy walk agrees with a plain walk over the tags, and cuts where it does."""

from __future__ import annotations

import random
import re

from crawl.extraction.parsing import limit_depth

_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9:-]*)[^<>]*?(/?)>")
_COMMENTS_AND_RAW_TEXT = re.compile(
    r"<!--.*?(?:-->|\Z)|<(script|style|xmp|plaintext)\b.*?(?:</\1\s*>|\Z)", re.S | re.I
)
_FLAT = {"br", "img", "meta", "link", "input", "hr", "p", "li", "td", "tr", "dd", "dt", "option"}
"""The void and implicitly closed elements the atoms below use."""


def _oracle(html: str, max_depth: int) -> str:
    """The walk written out tag by tag: the specification ``limit_depth`` is measured against."""
    stripped = _COMMENTS_AND_RAW_TEXT.sub("", html)
    depth = 0
    for match in _TAG.finditer(stripped):
        closing, name, self_closed = match.groups()
        if closing:
            depth = max(depth - 1, 0)
        elif not self_closed and name.lower() not in _FLAT:
            depth += 1
            if depth > max_depth:
                return stripped[: match.start()]
    return html


ATOMS = [
    "<div>", "</div>", "<DIV class='a/b'>", "<Div\n id=x>", "<p>", "</p>", "<br/>", "<br>", "<div/>",
    "<div />", "<span>", "</SPAN>", "</span >", "<li>", "<img src=a>", "<p-x>", "<tdx>", "<td>",
    "<a:b>", "<a href='x/'>", "</a>", "<", ">", "</", "< div>", "</ x>", "<1>", "text", "\u00e9",
    "<!-- <div><div> -->", "<script>if (a<b) { '<div>' }</script>", "<style>p>a{}</style>",
]  # fmt: skip
TRAPS = [
    # Where the byte-level fast path decides differently from the string regexes unless it
    # defers to them: open comments and raw text to the end, names that only Unicode case
    # folding or \\b make raw text, non-ASCII bytes right after "<", lone surrogates. Closing
    # tags inside what the regexes skip would make a missed skip read shallower than it is.
    "<!--", "-->", "<!-", "<script>", "</script>", "<SCRIPT x>", "<scripts>", "<script-x>",
    "<\u017fcript><div></script>", "<\u017fcript></div></div></div></div></\u017fcript>",
    "<scr\u0130pt>", "<style\u00e9>", "<xmp><div></xmp>",
    "<XMP>", "<plaintext>", "<plaintexts>", "<PLAINTEXT >", "<\u00e9>", "<div\u00e9>",
    "\ud800", "<\ud800>", "<p\u0130>", "</\u00e9>", "<stylex>", "</style >",
]  # fmt: skip


def test_the_walk_agrees_with_the_oracle_on_tag_soup() -> None:
    rng = random.Random(5)
    cut = 0
    for _ in range(2000):
        # Past the cheap bound (at most 4,096 "<" are never walked), at a small limit.
        filler = "<br>" * 4097
        atoms = ATOMS + TRAPS if rng.random() < 0.5 else ATOMS  # traps often end the walk early
        html = filler + "".join(rng.choice(atoms) for _ in range(rng.randint(0, 120)))
        max_depth = rng.randint(4, 24)
        expected = _oracle(html, max_depth)
        assert limit_depth(html, max_depth) == expected
        cut += expected != html
    assert 200 < cut < 1800  # both outcomes were exercised


def test_a_deep_page_is_cut_before_the_first_tag_past_the_limit() -> None:
    body = "".join(f"<div id=d{i}>" for i in range(600)) + "deep text" + "</div>" * 600
    html = "<html><body><!-- " + "<div>" * 5000 + " -->" + body + "</body></html>"
    cut = limit_depth(html, 512)
    # <html> and <body> are two of the 512 levels.
    assert cut.endswith("<div id=d509>") and "d510" not in cut
    assert "<!--" not in cut  # comments go with the cut, and theirs tags never counted


def test_a_wide_shallow_page_is_left_whole() -> None:
    html = "<html><body>" + "<div><p>x<br><span>y</span></p><svg><path d='M0'/></svg></div>" * 2000
    assert limit_depth(html, 16) is html
