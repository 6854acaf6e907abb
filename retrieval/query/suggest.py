"""Completions of what a person is typing, from titles, headings and frequent past queries.

Built once per generation (:mod:`retrieval.query.suggest_cache`), answered with no index
access. Each phrase is normalised to its folded words (:func:`retrieval.text.tokenizer.words`);
every word position not starting with a stopword is a key (the phrase from that word on), and
the keys are sorted once. Typed text, normalised the same way (its earlier words the context,
its last a word prefix), names a contiguous range of keys by bisection; numpy picks the best
of the range. A key scores its phrase's importance plus log(1 + df) of the word it starts
with (phrases of words more documents hold first), less a penalty off the phrase's start.
Then context words not adjacent in a phrase match as a word set among the best phrases of
the last word, then (kind ``completion``) the typed words with the last completed, by df.
When all that finds none, the last word gets one typo (a letter dropped, added, replaced, or
two swapped), each variant a prefix of a known word.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from retrieval.text.tokenizer import ENGLISH_STOPWORDS, words

MAX_SIZE = 20
"""The most suggestions one answer holds."""
MAX_TYPED = 500
"""The longest text completed (a 400 beyond it); suggest.js asks nothing for a longer box."""
MAX_PHRASE_WORDS = 12
MAX_PHRASE_CHARS = 120
"""Longer titles and headings are sentences, not things people type."""
MAX_KEY_POSITIONS = 6
"""Word positions of a phrase a prefix may start at (the first six words)."""
MAX_PHRASES = 300_000
"""The most phrases kept (the most important), which bounds memory on a large index."""
INFIX_PENALTY = 1.0
"""A match inside a phrase ranks below the same phrase matched from its start."""
COPIES_WEIGHT = 0.3
"""Per log of the number of sources (documents, queries) that share a phrase's text."""
SHORT_PREFIX_CHARS = 2
"""Prefixes this short have their answers computed at build (their key ranges are the widest)."""
TYPO_MIN_CHARS = 3
MAX_TYPO_VARIANTS = 8
"""One-typo variants of the last word tried (those prefixing the most words first)."""
ALPHABET_CHARS = 40
"""Letters a typo may replace or add: the most frequent in the phrases' words."""
CONTEXT_POOL = 200
"""Best phrases of the last word searched for context words that are not adjacent."""


@dataclass(frozen=True, slots=True)
class Phrase:
    """A completion source: a title, a heading or a past query, with how much it matters."""

    text: str
    kind: str
    url: str | None
    importance: float


@dataclass(frozen=True, slots=True)
class Suggestion:
    text: str
    kind: str
    url: str | None


@dataclass(frozen=True, slots=True)
class Typed:
    """Typed text normalised: the words before the last, and the last one (complete after a space)."""

    context: tuple[str, ...]
    last: str
    complete: bool

    @classmethod
    def parse(cls, text: str) -> Typed | None:
        ws = words(text)
        if not ws:
            return None
        return cls(tuple(ws[:-1]), ws[-1], text[-1:].isspace())

    def key(self, last: str | None = None) -> str:
        return " ".join((*self.context, self.last if last is None else last))


_KIND_ORDER = {"title": 0, "heading": 1}


def _shown_before(phrase: Phrase, other: Phrase) -> bool:
    """Whether ``phrase`` rather than ``other`` (same words) is what a suggestion shows."""
    mine, theirs = _KIND_ORDER.get(phrase.kind, 2), _KIND_ORDER.get(other.kind, 2)
    return mine < theirs or (mine == theirs and phrase.importance > other.importance)


def one_typo(prefix: str, alphabet: str) -> set[str]:
    """Every string one edit from ``prefix``; adding at the end is left out (a longer prefix)."""
    splits = [(prefix[:i], prefix[i:]) for i in range(len(prefix) + 1)]
    out = {a + b[1:] for a, b in splits if b}
    out |= {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    out |= {a + c + b[1:] for a, b in splits if b for c in alphabet}
    out |= {a + c + b for a, b in splits[:-1] for c in alphabet}
    out.discard(prefix)
    out.discard("")
    return out


class Suggester:
    """Completions of typed text over one set of phrases (read-only once built: thread-safe)."""

    def __init__(self, phrases: list[Phrase], norms: list[str], df: Mapping[str, int]) -> None:
        self._phrases = phrases
        self._norms = norms
        entries: list[int] = []
        offsets: list[int] = []
        scores: list[float] = []
        for i, norm in enumerate(norms):
            offset = 0
            for position, word in enumerate(norm.split(" ")[:MAX_KEY_POSITIONS]):
                if position == 0 or word not in ENGLISH_STOPWORDS:
                    entries.append(i)
                    offsets.append(offset)
                    penalty = INFIX_PENALTY if position else 0.0
                    scores.append(phrases[i].importance + math.log1p(df.get(word, 0)) - penalty)
                offset += len(word) + 1
        order = sorted(range(len(entries)), key=lambda k: norms[entries[k]][offsets[k] :])
        self._entry = np.asarray(entries, dtype=np.int32)[order]
        self._offset = np.asarray(offsets, dtype=np.int32)[order]
        self._score = np.asarray(scores, dtype=np.float32)[order]
        vocabulary = {w for norm in norms for w in norm.split(" ")} | set(df)
        self._words = sorted(vocabulary)
        self._word_df = np.asarray([df.get(w, 0) for w in self._words], dtype=np.float32)
        letters = Counter(ch for w in vocabulary for ch in w)
        self._alphabet = "".join(ch for ch, _ in letters.most_common(ALPHABET_CHARS))
        self._short: dict[str, list[int]] = {}
        heads = {norms[e][o : o + n] for e, o in zip(entries, offsets, strict=True) for n in (1, 2)}
        for head in heads:
            if len(head) <= SHORT_PREFIX_CHARS and " " not in head:
                self._short[head] = self._best(*self._range(head), MAX_SIZE)

    @classmethod
    def build(
        cls, phrases: Iterable[Phrase], df: Mapping[str, int], *, limit: int = MAX_PHRASES
    ) -> Suggester:
        """One phrase per normalised text, the ``limit`` most important kept. It is shown as
        its most important title, else heading, else query (a page's own words and URL before
        a query's), and is as important as its most important source, plus a bonus for every
        further one."""
        best: dict[str, Phrase] = {}
        top: dict[str, float] = {}
        copies: Counter[str] = Counter()
        for phrase in phrases:
            text = " ".join(phrase.text.split())
            ws = words(text)
            if not ws or len(ws) > MAX_PHRASE_WORDS or len(text) > MAX_PHRASE_CHARS:
                continue
            norm = " ".join(ws)
            copies[norm] += 1
            top[norm] = max(top.get(norm, phrase.importance), phrase.importance)
            old = best.get(norm)
            if old is None or _shown_before(phrase, old):
                best[norm] = Phrase(text, phrase.kind, phrase.url, phrase.importance)
        importance = {norm: top[norm] + COPIES_WEIGHT * math.log(n) for norm, n in copies.items()}
        kept = sorted(heapq.nlargest(limit, importance, key=importance.__getitem__))
        shown = [best[norm] for norm in kept]
        return cls(
            [Phrase(p.text, p.kind, p.url, importance[n]) for p, n in zip(shown, kept, strict=True)], kept, df
        )

    def __len__(self) -> int:
        return len(self._phrases)

    # -- lookups ---------------------------------------------------------------------

    def _key(self, k: int) -> str:
        norm: str = self._norms[self._entry[k]]
        return norm[self._offset[k] :]

    def _range(self, prefix: str) -> tuple[int, int]:
        """Keys starting with ``prefix``: ``[lo, hi)``."""
        n = len(self._entry)
        lo = bisect_left(range(n), prefix, key=self._key)
        hi = bisect_left(range(lo, n), prefix + "\U0010ffff", key=self._key) + lo
        return lo, hi

    def _best(self, lo: int, hi: int, size: int, pool: int | None = None) -> list[int]:
        """The phrases of the ``size`` best keys in ``[lo, hi)`` (best first, one per phrase)."""
        if hi <= lo:
            return []
        scores = self._score[lo:hi]
        want = min(hi - lo, pool or 4 * size + 8)
        idx = np.argpartition(-scores, want - 1)[:want] if want < hi - lo else np.arange(hi - lo)
        order = idx[np.lexsort((idx, -scores[idx]))]
        out: list[int] = []
        seen: set[int] = set()
        for entry in self._entry[lo + order].tolist():
            if entry not in seen:
                seen.add(entry)
                out.append(entry)
                if len(out) == size:
                    break
        return out

    def _matches(self, typed: Typed, last: str, size: int) -> Iterator[int]:
        """Phrases completing ``typed`` with ``last`` as its last word: adjacent first, then as a word set."""
        if not typed.context and not typed.complete and len(last) <= SHORT_PREFIX_CHARS:
            yield from self._short.get(last, [])[:size]
            return
        key = typed.key(last)
        if typed.complete:
            yield from self._best(*self._range(key + " "), size)
            k = self._range(key)[0]  # the phrase that is exactly ``key`` sorts first of its range
            while k < len(self._entry) and self._key(k) == key:
                yield int(self._entry[k])
                k += 1
        else:
            yield from self._best(*self._range(key), size)
        if typed.context:
            wanted = set(typed.context)
            head = last + " " if typed.complete else last
            for entry in self._best(*self._range(head), CONTEXT_POOL, pool=4 * CONTEXT_POOL):
                if wanted <= set(self._norms[entry].split(" ")):
                    yield entry

    def _typo_variants(self, last: str) -> list[str]:
        """One-typo variants of ``last`` that start some phrase word, those starting the most first."""
        counts = []
        for variant in one_typo(last, self._alphabet):
            if len(variant) < TYPO_MIN_CHARS:
                continue  # "as" for "ask" would offer half the index
            lo = bisect_left(self._words, variant)
            if lo < len(self._words) and self._words[lo].startswith(variant):
                hi = bisect_left(self._words, variant + "\U0010ffff", lo)
                counts.append((-(hi - lo), variant))
        return [variant for _, variant in sorted(counts)[:MAX_TYPO_VARIANTS]]

    def _completed_words(self, last: str, complete: bool, size: int) -> list[str]:
        """Words starting with ``last`` (``last`` itself once complete), most documents first."""
        lo = bisect_left(self._words, last)
        if complete:
            return [last] if lo < len(self._words) and self._words[lo] == last else []
        hi = bisect_left(self._words, last + "\U0010ffff", lo)
        if hi <= lo:
            return []
        dfs = self._word_df[lo:hi]
        idx = np.argpartition(-dfs, size - 1)[:size] if size < hi - lo else np.arange(hi - lo)
        return [self._words[lo + i] for i in idx[np.lexsort((idx, -dfs[idx]))].tolist()]

    def _complete(self, typed: Typed, last: str, size: int) -> list[Suggestion]:
        """Phrases completing ``typed`` with ``last`` as its last word, then (after context) the
        typed words with ``last`` completed: a long query rarely is a title."""
        entries: list[int] = []
        for entry in self._matches(typed, last, size):
            if entry not in entries:
                entries.append(entry)
                if len(entries) == size:
                    break
        out = [self._suggestion(entry) for entry in entries]
        if len(out) < size and typed.context:
            shown = {" ".join(words(s.text)) for s in out}
            for word in self._completed_words(last, typed.complete, size + len(shown)):
                text = typed.key(word)
                if text not in shown and len(out) < size:
                    out.append(Suggestion(text, "completion", None))
        return out

    def suggest(self, text: str, size: int = 8) -> list[Suggestion]:
        """Up to ``size`` completions of ``text`` (at most :data:`MAX_SIZE`), best first."""
        typed = Typed.parse(text)
        size = max(0, min(size, MAX_SIZE))
        if typed is None or size == 0 or not self._phrases:
            return []
        out = self._complete(typed, typed.last, size)
        if not out and len(typed.last) >= TYPO_MIN_CHARS:
            for variant in self._typo_variants(typed.last):
                out.extend(s for s in self._complete(typed, variant, size - len(out)) if s not in out)
                if len(out) >= size:
                    break
        return out

    def _suggestion(self, entry: int) -> Suggestion:
        phrase = self._phrases[entry]
        return Suggestion(phrase.text, phrase.kind, phrase.url)
