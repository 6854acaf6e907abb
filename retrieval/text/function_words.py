"""Function words of languages besides English, read as English stopwords are in a query of theirs.

Pages keep every word but English stopwords (``retrieval.text.tokenizer``), so a French reader's
"Astuces pour" searched "pour", found on every French page, as a word like any other, where an
English reader's "Tips for" searches "tips" and, in titles and headings only, "for" and the pair
"tips for" (``retrieval.text.stopword_search``). A query is read in the ``lang:`` it names, else
the language a long query is written in, else the reader's language (``Accept-Language``, else
``rank.user_lang``); read in a language listed here, its function words are searched the
English way (DECISIONS 77, 81). Pages are untouched (no index changes), and a query read in
English is what it was. The lists are Snowball's shortest,
less words that are English content words too ("die", "son", "sin", "hat").
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from core.language_id import language_and_probability
from core.types import Query
from retrieval.text.tokenizer import ENGLISH_STOPWORDS, fold, stem

_LISTS = {
    "de": """aber als am an auch auf aus bei bis da damit dann das dass dem den der des dich dir
        du durch ein eine einem einen einer eines er es euch für hatte ich ihr im in ist ja
        kann mich mir mit nach nicht noch nur ob oder ohne sich sie sind so über um und uns unter
        vom von vor wann warum was weil wenn wer wie wir wird wo zu zum zur""",
    "es": """a al algo algunas algunos como con cual cuando de del desde donde durante e el ella
        ellas ellos en entre es esa esas ese eso esos esta estas este esto estos fue ha hay la las
        le les lo los más me mi mis muy no nos o otra otras otro otros para pero poco por porque
        que qué quien se ser si sí sobre su sus también tanto te todo todos tu un una unas uno
        unos y ya""",
    "fr": """à au aux avec c ce ces cette d dans de des du elle elles en est et eux il ils j je
        l la le les leur leurs lui m ma mais me même mes moi mon n ne nos notre nous on ou où par
        pas pour qu que qui s sa se ses sont sur t ta te tes toi tu un une vos votre vous y""",
}
FUNCTION_WORDS: dict[str, frozenset[str]] = {
    lang: frozenset(fold(w) for w in text.split()) for lang, text in _LISTS.items()
}
"""Folded, as :func:`retrieval.text.tokenizer.words` yields them (``où`` → ``ou``)."""


QUERY_MIN_CONFIDENCE = 0.8
"""How sure the identifier must be that a query is in another language than English to read it
so: identifiers and titles of English docs ("73.2.1. Out-of-Line, On-Disk TOAST Storage") are
called German or French at 0.4-0.7, real questions in those languages at 0.94-0.99."""
ENGLISH_MIN_CONFIDENCE = 0.5
"""...and that it is English, to read it so against the reader's language: lower case and no
punctuation make the identifier less sure of English ("how do I configure the wireless network
on my laptop": 0.69)."""


def read_in(query: Query, reader_lang: str | None, pinned: str | None = None) -> Query:
    """``query`` read in ``pinned`` (a followed cursor's reading), else its ``lang:``, else the
    language it is written in when it is long enough to tell (:func:`written_in`), else the
    reader's language, when that one has a list."""
    if not query.terms:
        return query
    if pinned is not None:
        lang = pinned
    else:
        lang = (query.lang or written_in(query.positive_text) or reader_lang or "").lower().split("-")[0]
    if lang not in FUNCTION_WORDS:
        return query
    return dataclasses.replace(query, read_as=lang)


@lru_cache(maxsize=4096)
def written_in(text: str) -> str:
    """The language of a query of at least five words, when the identifier is sure of it (``""``
    otherwise): an English reader's long French question is read in French, a German reader's
    long English one in English. Shorter queries are too short to call (a heading's two words)."""
    lang, probability = language_and_probability(text)
    return lang if probability >= (ENGLISH_MIN_CONFIDENCE if lang == "en" else QUERY_MIN_CONFIDENCE) else ""


@lru_cache(maxsize=8)  # one entry a listed language; read_as from a wire is not checked
def stopwords_of(lang: str) -> frozenset[str]:
    """English stopwords and ``lang``'s function words: what a query read in ``lang`` treats as such."""
    return ENGLISH_STOPWORDS | FUNCTION_WORDS.get(lang, frozenset())


@lru_cache(maxsize=8)  # one entry a listed language; read_as from a wire is not checked
def function_tokens(lang: str) -> frozenset[str]:
    """``lang``'s function words as analysed tokens (English-stemmed, as pages index them)."""
    return frozenset(stem(w) for w in FUNCTION_WORDS.get(lang, ()) if w not in ENGLISH_STOPWORDS)
