"""The surface vocabulary of a generation: folded words with their document frequency.

The lexical index holds Snowball stems (DECISIONS 2), which are not what people type
(``librari`` for ``library``), so a speller cannot suggest from the term dictionary. The
index build counts each document's words *before* stemming (the same
:func:`retrieval.text.tokenizer.words` step the analyzer applies to a query) and writes
them beside the shards; the serving process loads them (:mod:`retrieval.query.spelling`).

File format (UTF-8 text, written atomically): a ``# trawl-vocabulary 1 docs=N`` header,
then ``word<TAB>df`` lines, most frequent first, then alphabetical. Words with a digit
(numbers and identifiers like ``utf8`` are never corrected, nor a correction) and words
longer than ``MAX_WORD_CHARS`` are left out; only the ``max_words`` most frequent are kept,
which bounds the speller's memory on a large crawl.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from core.atomic import write_text

FORMAT = "trawl-vocabulary"
FORMAT_VERSION = 1
MAX_WORD_CHARS = 32
MAX_WORDS = 500_000


def is_vocabulary_word(word: str) -> bool:
    """Letters only and not too long: what the vocabulary keeps and the speller corrects."""
    return 0 < len(word) <= MAX_WORD_CHARS and word.isalpha()


class VocabularyCounter:
    """Document frequencies of surface words, filled document by document during a build."""

    def __init__(self) -> None:
        self.docs = 0
        self._df: Counter[str] = Counter()

    def add_document(self, words: Iterable[str]) -> None:
        """Count each distinct word of one document once."""
        self.docs += 1
        self._df.update({w for w in words if is_vocabulary_word(w)})

    def update(self, other: VocabularyCounter) -> None:
        """Add another counter's documents (a shard built elsewhere): df sums over disjoint documents."""
        self.docs += other.docs
        self._df.update(other._df)

    def write(self, path: Path, *, max_words: int = MAX_WORDS) -> Path:
        ranked = sorted(self._df.items(), key=lambda item: (-item[1], item[0]))[:max_words]
        lines = [f"# {FORMAT} {FORMAT_VERSION} docs={self.docs}"]
        lines.extend(f"{word}\t{df}" for word, df in ranked)
        return write_text(Path(path), "\n".join(lines) + "\n")


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """A loaded vocabulary file."""

    docs: int
    df: dict[str, int]

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        """Read a vocabulary file; ValueError when it is not one."""
        with Path(path).open(encoding="utf-8") as f:
            header = f.readline().split()
            if len(header) < 3 or header[1] != FORMAT or header[2] != str(FORMAT_VERSION):
                raise ValueError(f"{path} is not a {FORMAT} {FORMAT_VERSION} file")
            docs = next((int(h[5:]) for h in header[3:] if h.startswith("docs=")), 0)
            df: dict[str, int] = {}
            for line in f:
                word, _, count = line.rstrip("\n").partition("\t")
                if word and count:
                    df[word] = int(count)
        return cls(docs, df)
