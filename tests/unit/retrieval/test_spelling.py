"""The speller's rules on a small vocabulary: what is corrected, what never is."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.index.vocabulary import Vocabulary, VocabularyCounter
from retrieval.query.spelling import Speller, SpellerCache

DF = {
    "python": 120,
    "pathlib": 40,
    "glob": 35,
    "event": 60,
    "loop": 80,
    "includes": 12,
    "include": 30,
    "list": 200,
    "lost": 3,
    "asyncio": 50,
    "pythn": 1,
    "sorted": 10,
    "sortes": 1,
    "the": 500,
}


@pytest.fixture(scope="module")
def speller() -> Speller:
    return Speller(Vocabulary(docs=500, df=DF), known_df=2)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("pyhton", "python"),  # transposition
        ("pathlb glob", "pathlib glob"),  # deletion
        ("asyncio evant loop", "asyncio event loop"),  # substitution
        ("pytohn pathlibb", "python pathlib"),
        ("Pyhton", "Python"),  # case kept
        ("PYHTON", "PYTHON"),
        ('"evnt loop" asyncio', '"event loop" asyncio'),  # a phrase keeps its quotes
        ("includse", "includes"),  # a swap beats a deletion at the same distance
        ("pythn", "python"),  # in one document only, and a far more frequent word is one edit away
    ],
)
def test_misspelt_words_are_corrected(speller: Speller, raw: str, expected: str) -> None:
    assert speller.suggest(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "python pathlib glob",  # all known
        "Python Event LOOP",
        "list lost",  # lost is rare but known (df >= known_df)
        "sortes",  # df 1 and the nearest word is not 20 times as frequent
        "python3 pyhton2 2024",  # words with digits and numbers
        "site:pyhton.org lang:en filetype:pdff",  # operators
        "python -pyhton",  # an exclusion stays as typed
        'python -"evnt loop"',
        "xyzzyplugh",  # nothing near
        "teh lst",  # fewer than four letters
        "",
    ],
)
def test_these_are_never_corrected(speller: Speller, raw: str) -> None:
    assert speller.suggest(raw) is None


def test_short_words_get_one_edit_at_most(speller: Speller) -> None:
    assert speller.correct_word("lsit") == "list"  # one transposition
    assert speller.correct_word("lxxt") is None  # two substitutions


def test_counter_file_round_trip(tmp_path: Path) -> None:
    counter = VocabularyCounter()
    counter.add_document(["python", "python", "glob", "py3", "x" * 40])
    counter.add_document(["python", "event"])
    path = counter.write(tmp_path / "vocabulary.tsv")
    loaded = Vocabulary.load(path)
    assert loaded.docs == 2
    assert loaded.df == {"python": 2, "event": 1, "glob": 1}  # document frequency; no digits, no junk
    assert list(loaded.df) == ["python", "event", "glob"]  # most frequent first


def test_cache_without_a_vocabulary_has_no_speller(tmp_path: Path) -> None:
    cache = SpellerCache(keep=2)
    assert cache.get("g1", tmp_path / "missing.tsv") is None
    (tmp_path / "bad.tsv").write_text("not a vocabulary\n")
    assert cache.get("g2", tmp_path / "bad.tsv") is None
    counter = VocabularyCounter()
    counter.add_document(["python"])
    counter.add_document(["python"])
    good = counter.write(tmp_path / "good.tsv")
    speller = cache.get("g3", good)
    assert speller is not None and speller.suggest("pyhton") == "python"
    assert cache.get("g3", good) is speller
