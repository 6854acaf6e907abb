"""Text analysis shared by indexing, querying and snippets.

Trawl analyses text in Python and hands Tantivy pre-analysed tokens (indexed with
Tantivy's ``whitespace`` tokenizer). One function serves both sides, so a query term
can never be analysed differently from the document text it should match, and the
query side can count repeated words (Tantivy's own parser collapses them, which costs
it most of its gap on long natural-language queries; see ``docs/relevance.md``).

Pipeline: NFKC, casefold, ASCII-fold diacritics, drop apostrophes inside words
(``can't`` → ``cant``), split on anything that is not a letter or digit, drop English
stopwords, Snowball (Porter2) stem with PyStemmer.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import Stemmer

ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    """a about above after again against all am an and any are aren't as at be because
    been before being below between both but by can cannot could couldn't did didn't do
    does doesn't doing don't down during each few for from further had hadn't has hasn't
    have haven't having he he'd he'll he's her here here's hers herself him himself his
    how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more
    most mustn't my myself no nor not of off on once only or other ought our ours
    ourselves out over own same shan't she she'd she'll she's should shouldn't so some
    such than that that's the their theirs them themselves then there there's these they
    they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's
    which while who who's whom why why's with won't would wouldn't you you'd you'll
    you're you've your yours yourself yourselves""".replace("'", "").split()
) - frozenset("hell shell wed id ill shed".split())
"""Minus the contractions that lose their apostrophe into a word of their own ("she'll" → ``shell``,
"I'd" → ``id``, "I'll" → ``ill``, "she'd" → ``shed``): dropping those dropped "shell", "id()",
"critically ill" and "vortex shedding" from every page and query (ANALYSIS_VERSION 4). ``well``
stays a stopword: as often "as well as" as "we'll", and no more a subject word in either."""

_APOSTROPHES = re.compile(r"(?<=\w)['’](?=\w)")
_WORD = re.compile(r"[^\W_]+")
ANALYSIS_VERSION = 4
"""The version of what this module makes of text, recorded in every index built with it: 1 kept
a run of Chinese, Japanese or Korean as one word; 2 splits it into character bigrams
(DECISIONS 67); 3 keeps kana voiced marks (パ stays パ, was ハ; DECISIONS 79); 4 keeps ``shell``,
``id``, ``ill``, ``wed``, ``shed`` and ``hell`` (DECISIONS 83). An index of another
version answers such queries wrongly and is named in ``/healthz`` until it is rebuilt."""
MAX_TOKEN_CHARS = 64
"""Longer runs of letters are junk (base64, hashes) and would bloat the term dictionary."""

_stemmer = Stemmer.Stemmer("english")
_stemmer.maxCacheSize = 100_000


_KANA_VOICING = frozenset("\u3099\u309a")
"""Kana's voiced and semi-voiced marks: part of the letter (パ is not ハ), not a diacritic to strip."""


@lru_cache(maxsize=65_536)
def fold(text: str) -> str:
    """NFKC, casefold and strip diacritics: ``Café`` → ``cafe`` (Hangul and kana recomposed)."""
    return _fold_long(text)


CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\u31f0-\u31ff]+")
"""Scripts written without spaces between words: Hiragana, Katakana, Han, Hangul syllables."""


def words(text: str) -> list[str]:
    """Folded words of ``text`` before stopword removal and stemming.

    A run of Chinese, Japanese or Korean characters has no spaces to split at, so it becomes
    its overlapping character bigrams ("東京大学" → 東京 京大 大学; one character alone stays
    itself): the same for pages and queries, so a query of part of a phrase matches the page
    holding the phrase, which a whole run as one word never did (DECISIONS 67).
    """
    folded = _APOSTROPHES.sub("", fold(text) if len(text) < 256 else _fold_long(text))
    found = [w for w in _WORD.findall(folded) if len(w) <= MAX_TOKEN_CHARS]
    if folded.isascii():
        return found
    return [piece for w in found for piece in _segments(w)]


def _segments(word: str) -> list[str]:
    """``word`` with each CJK run in it replaced by its character bigrams."""
    if not CJK_RUN.search(word):
        return [word]
    out: list[str] = []
    last = 0
    for run in CJK_RUN.finditer(word):
        if run.start() > last:
            out.append(word[last : run.start()])
        chars = run.group()
        out.extend([chars] if len(chars) == 1 else [chars[i : i + 2] for i in range(len(chars) - 1)])
        last = run.end()
    if last < len(word):
        out.append(word[last:])
    return out


def _fold_long(text: str) -> str:
    # Long texts bypass the cache: caching whole documents would only waste memory.
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    if decomposed.isascii():
        return decomposed
    kept = "".join(ch for ch in decomposed if not unicodedata.combining(ch) or ch in _KANA_VOICING)
    return unicodedata.normalize("NFC", kept)


def stem(word: str) -> str:
    """Snowball English stem of one folded word."""
    return str(_stemmer.stemWord(word))


def analyze(text: str, *, keep_stopwords: bool = False) -> list[str]:
    """Index/query tokens of ``text``, in order.

    >>> analyze("The Flows of Air can't stop")
    ['flow', 'air', 'cant', 'stop']
    """
    ws = words(text)
    if not keep_stopwords:
        ws = [w for w in ws if w not in ENGLISH_STOPWORDS]
    return list(_stemmer.stemWords(ws))


def stems(words_of_text: Sequence[str]) -> list[str]:
    """``analyze`` of a text already split by :func:`words` (for callers that need both)."""
    return list(_stemmer.stemWords([w for w in words_of_text if w not in ENGLISH_STOPWORDS]))


def analyzed_text(text: str) -> str:
    """``analyze`` joined by spaces: what a Tantivy ``whitespace`` field receives."""
    return " ".join(analyze(text))


def term_frequencies(text: str) -> Counter[str]:
    """Analysed query terms with how often each occurs (repeats weigh more)."""
    return Counter(analyze(text))
