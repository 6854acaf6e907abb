"""Spelling suggestions from the index's own vocabulary ("Did you mean …?").

The dictionary is the generation's surface vocabulary (:mod:`retrieval.index.vocabulary`),
so a suggestion always finds something in *this* index. Lookups are SymSpell (Damerau–
Levenshtein with transpositions) up to ``max_distance`` edits. Rules, per query word:

* a word in at least ``known_df`` documents is never corrected; a rarer one (a typo that
  made it into a page) only to a word ``dominance`` times more frequent;
* words with a digit, shorter than ``MIN_WORD_CHARS``, ``-excluded``, and operators are
  left as typed; words inside a quoted phrase may be corrected, the quotes stay;
* fewest edits win, then a swap of two letters (``includse`` is ``includes`` before
  ``include``), then the most frequent word; words of up to four letters get one edit.

The service offers a suggestion or, below ``search.spell_rewrite_below`` results, rewrites
the query; it tells the speller how many live documents hold a word the build never saw.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from symspellpy import SymSpell, Verbosity

from retrieval.index.vocabulary import MAX_WORD_CHARS, Vocabulary, is_vocabulary_word
from retrieval.text.tokenizer import fold

logger = logging.getLogger(__name__)

MIN_WORD_CHARS = 4
SHORT_WORD_CHARS = 4
"""Words this short get at most one edit."""

_TOKEN = re.compile(r'-?"[^"]*"?|\S+')
"""The analyzer's token split: a quoted phrase (possibly negated) is one token."""
_OPERATOR = re.compile(r"^(site|lang|filetype):", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
"""A word as the tokenizer sees it: letters and digits, apostrophes inside."""


class Speller:
    """Suggests corrections for query words from one vocabulary (thread-safe to read)."""

    def __init__(
        self, vocabulary: Vocabulary, *, known_df: int = 2, max_distance: int = 2, dominance: int = 20
    ) -> None:
        self.df = vocabulary.df
        self.known_df = known_df
        self.max_distance = max_distance
        self.dominance = dominance
        self._symspell = SymSpell(max_dictionary_edit_distance=max_distance, prefix_length=7)
        for word, df in vocabulary.df.items():
            if df >= known_df:
                self._symspell.create_dictionary_entry(word, df)

    def correct_word(self, word: str, indexed_df: Callable[[str], int] | None = None) -> str | None:
        """The correction of one folded word, or None when it stays as it is.

        ``indexed_df``: in how many documents of the live index the word occurs, asked when
        the vocabulary (written at the build) does not know it well enough to leave it alone.
        """
        if len(word) < MIN_WORD_CHARS or len(word) > MAX_WORD_CHARS or not is_vocabulary_word(word):
            return None
        own = self.df.get(word, 0)
        if own < self.known_df and indexed_df is not None:
            own = max(own, indexed_df(word))
        if own >= self.known_df:
            return None
        distance = min(self.max_distance, 1 if len(word) <= SHORT_WORD_CHARS else self.max_distance)
        candidates = self._symspell.lookup(word, Verbosity.CLOSEST, max_edit_distance=distance)
        needed = max(self.known_df, self.dominance * own)
        letters = sorted(word)
        best = min(
            (c for c in candidates if c.term != word and c.count >= needed),
            key=lambda c: (c.distance, sorted(c.term) != letters, -c.count, c.term),
            default=None,
        )
        return best.term if best is not None else None

    def suggest(self, raw: str, indexed_df: Callable[[str], int] | None = None) -> str | None:
        """``raw`` with its misspelt words corrected, or None when nothing needs correcting
        (``indexed_df`` as for :meth:`correct_word`)."""
        changed = False

        def fix(match: re.Match[str]) -> str:
            nonlocal changed
            typed = match.group(0)
            corrected = self.correct_word(fold(re.sub(r"['’]", "", typed)), indexed_df)
            if corrected is None:
                return typed
            changed = True
            return _same_case(typed, corrected)

        def token(match: re.Match[str]) -> str:
            text = match.group(0)
            if text.startswith("-") or _OPERATOR.match(text):
                return text
            return _WORD.sub(fix, text)

        suggestion = _TOKEN.sub(token, raw)
        return suggestion if changed else None


def _same_case(typed: str, corrected: str) -> str:
    if len(typed) > 1 and typed.isupper():
        return corrected.upper()
    if typed[:1].isupper():
        return corrected[:1].upper() + corrected[1:]
    return corrected


class SpellerCache:
    """One speller per open generation, built on first use (a build takes ~1 s per 100k words)."""

    def __init__(self, *, keep: int = 4, known_df: int = 2, max_distance: int = 2) -> None:
        self._keep = keep
        self._known_df = known_df
        self._max_distance = max_distance
        self._lock = threading.Lock()
        self._spellers: OrderedDict[str, Speller | None] = OrderedDict()

    def get(self, generation: str, vocabulary_file: Path) -> Speller | None:
        """The speller of a generation; None when it has no vocabulary (built before there was one)."""
        with self._lock:
            if generation in self._spellers:
                self._spellers.move_to_end(generation)
                return self._spellers[generation]
            speller: Speller | None = None
            try:
                vocabulary = Vocabulary.load(vocabulary_file)
                speller = Speller(vocabulary, known_df=self._known_df, max_distance=self._max_distance)
            except FileNotFoundError:
                logger.info("generation %s has no vocabulary: no spelling suggestions", generation)
            except (OSError, ValueError) as exc:
                logger.warning(
                    "generation %s: vocabulary unusable, no spelling suggestions: %s", generation, exc
                )
            self._spellers[generation] = speller
            while len(self._spellers) > self._keep:
                self._spellers.popitem(last=False)
            return speller
