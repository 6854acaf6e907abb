"""Compound words and their parts at query time, checked against the index's own vocabulary.

People type "default dict" for ``defaultdict``, "f-string" or "fstring" for what pages write
as "f-strings", "dataclass" where a page says "data class". The tokenizer cannot know which
spelling a page used, so a query also searches the other spelling when the generation's
vocabulary (surface words with their document frequency, :mod:`retrieval.index.vocabulary`)
holds it: two adjacent typed words joined, a hyphenated word joined and, in a query of a few
keywords, as the phrase of its parts (its words are searched apart as well, so the phrase is
what puts "f strings" and "F-Strings" ahead of pages with an "f" here and a "string" there;
a sentence's "boundary-layer" and "two-dimensional" are not the point of it, and weighing
them twice cost cranfield .011 nDCG@10), or an unknown word split into two known ones
(searched as a phrase). Each variant is a
:attr:`core.types.Query.expansions` entry, as a synonym is, so it adds to the typed words'
scores instead of replacing them, and ``/explain`` shows it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from core.types import Query
from retrieval.text.stopword_search import is_sentence
from retrieval.text.tokenizer import ENGLISH_STOPWORDS, words

JOIN_WEIGHT = 1.0
"""A joined compound counts as much as a typed word: "default dict" meant ``defaultdict``."""
SPLIT_WEIGHT = 0.7
"""The split form is a guess among several cut points: a little less than the typed word."""
MIN_PART_CHARS = 3
"""Shorter parts, and stopwords, make nonsense joins and splits ("a list" → ``alist``, "a ssert");
a hyphenated word is joined whatever its parts ("f-string")."""
_HYPHENATED = re.compile(r"^[^\W_]+(?:[-‐‑][^\W_]+)+$")


def compound_variants(
    query: Query, df: Mapping[str, int], *, min_df: int = 2
) -> tuple[tuple[str, float], ...]:
    """The other spellings of ``query``'s free words that the vocabulary ``df`` holds, with weights."""
    typed = [w for term in query.terms for w in words(term)]
    have = set(typed)
    keywords = not is_sentence(query)  # a sentence's hyphenated words are its grammar's too
    found: dict[str, float] = {}

    def add(text: str, weight: float) -> None:
        if text not in have and text not in found:
            found[text] = weight

    for left, right in zip(typed, typed[1:], strict=False):
        if not (_joinable(left) and _joinable(right)):
            continue  # "a list" is not ``alist``, a variable name some page holds
        joined = left + right
        if df.get(joined, 0) >= min_df:
            add(joined, JOIN_WEIGHT)
    for term in query.terms:
        if _HYPHENATED.match(term):
            parts = words(term)
            joined = "".join(parts)
            if df.get(joined, 0) >= min_df:
                add(joined, JOIN_WEIGHT)
            if keywords and all(df.get(part, 0) >= min_df for part in parts):
                add(" ".join(parts), JOIN_WEIGHT)  # "f-string": also "f strings", "F-Strings"
    for word in typed:
        if df.get(word, 0) == 0:
            split = best_split(word, df, min_df=min_df)
            if split is not None:
                add(split, SPLIT_WEIGHT)
    return tuple(found.items())


def _joinable(word: str) -> bool:
    return len(word) >= MIN_PART_CHARS and word not in ENGLISH_STOPWORDS


def best_split(word: str, df: Mapping[str, int], *, min_df: int = 2) -> str | None:
    """``"default dict"`` for ``defaultdict``: the cut whose rarer part is most frequent, or None."""
    best: tuple[int, str] | None = None
    for cut in range(MIN_PART_CHARS, len(word) - MIN_PART_CHARS + 1):
        left, right = word[:cut], word[cut:]
        weakest = min(df.get(left, 0), df.get(right, 0))
        if weakest >= min_df and (best is None or weakest > best[0]):
            best = (weakest, f"{left} {right}")
    return best[1] if best else None


def with_compounds(query: Query, df: Mapping[str, int] | None, *, min_df: int = 2) -> Query:
    """``query`` with its compound variants added to its expansions (unchanged without a vocabulary)."""
    if df is None or not query.terms:
        return query
    added = compound_variants(query, df, min_df=min_df)
    return dataclasses.replace(query, expansions=query.expansions + added) if added else query
