"""Which stopwords a query searches for, and as what.

Body text is indexed without English stopwords: removing them is what lifts long
natural-language queries (cisi's paragraphs; ``docs/relevance.md``), and keeping them in
the body would change every field length and so every BM25 score. But on a programming
site the stopword list holds the language's keywords (``if``, ``for``, ``with``, ``is``,
``not``, ``in``), and a two-word query is mostly what it says: "for loop" is not "loop".

So titles and headings are indexed a second time with every word kept (the ``captions``
field: short texts, where a keyword names the section), and a *short* query (at most
:data:`MAX_QUERY_WORDS` words) searches its stopwords there, each as a term and inside each
adjacent word pair as a phrase ("the with statement" → "with statement"). A long query is a
sentence: its stopwords are grammar, and it is searched as before. The threshold and weight
were fixed before measuring (a search-box query is two to three words), not tuned.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from core.types import Query
from retrieval.text.function_words import stopwords_of
from retrieval.text.tokenizer import stem, words

CAPTIONS_FIELD = "captions"
"""Title and headings, every word kept (stemmed): where a short query's stopwords match."""
MAX_QUERY_WORDS = 4
"""A query of more words is a sentence; its stopwords are not searched."""
CAPTION_WEIGHT = 1.0
"""Boost of each stopword term and word-pair phrase in ``captions`` (the body's boost)."""


@dataclass(frozen=True, slots=True)
class StopwordSearch:
    """What a query searches in ``captions``: stopword tokens and word-pair phrases."""

    words: tuple[str, ...] = ()
    """The query's stopwords (folded), each once: free words first, then phrase words."""
    terms: tuple[str, ...] = ()
    """Their analysed tokens, each once."""
    phrases: tuple[tuple[str, str], ...] = ()
    """Adjacent analysed token pairs with a stopword in them, each once."""

    def __bool__(self) -> bool:
        return bool(self.terms)


@lru_cache(maxsize=4096)
def _sequences(query: Query) -> tuple[tuple[str, ...], ...]:
    """Folded word runs whose neighbours are adjacent: the free terms, then each phrase.

    Memoised: the broker, every shard (statistics, query) and the response ask about the
    same query, and splitting a long query into words each time cost 0.4 ms a search.
    """
    free = tuple(w for text in query.terms for w in words(text))
    return (free, *(tuple(words(p)) for p in query.phrases))


def _is_sentence(runs: tuple[tuple[str, ...], ...]) -> bool:
    return sum(len(run) for run in runs) > MAX_QUERY_WORDS


def is_sentence(query: Query) -> bool:
    """More than :data:`MAX_QUERY_WORDS` words: read as a sentence, not as keywords."""
    return _is_sentence(_sequences(query))


def is_lone_character(word: str) -> bool:
    """A one-character Latin letter or digit ("2" of "SARS-CoV-2", "x" of "x and y axes"): in a
    sentence it matches a large share of pages and says next to nothing (bm25s and
    Lucene's classic analyser drop them too). CJK characters alone are words and stay."""
    return len(word) == 1 and word.isascii()


def stopword_search(query: Query) -> StopwordSearch:
    """The stopword part of a short query; empty for a long one or one without stopwords."""
    runs = _sequences(query)
    if _is_sentence(runs):
        return StopwordSearch()
    stop = stopwords_of(query.read_as)  # English's alone when read as English ("")
    found: dict[str, None] = {}
    terms: dict[str, None] = {}
    phrases: dict[tuple[str, str], None] = {}
    for run in runs:
        tokens = [stem(w) for w in run]
        for i, word in enumerate(run):
            if word not in stop:
                continue
            found[word] = None
            terms[tokens[i]] = None
            if i > 0:
                phrases[(tokens[i - 1], tokens[i])] = None
            if i + 1 < len(run):
                phrases[(tokens[i], tokens[i + 1])] = None
    return StopwordSearch(tuple(found), tuple(terms), tuple(phrases))


def ignored_stopwords(query: Query) -> tuple[str, ...]:
    """The words of a long query which are not searched: its stopwords, free words first, then
    phrase words, then its free one-character words (:func:`is_lone_character`)."""
    runs = _sequences(query)
    if not _is_sentence(runs):
        return ()
    stop = stopwords_of(query.read_as)  # English's alone when read as English ("")
    stopwords = [w for run in runs for w in run if w in stop]
    return tuple(dict.fromkeys([*stopwords, *(w for w in runs[0] if is_lone_character(w))]))
