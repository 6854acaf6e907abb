"""Exact and near-duplicate detection."""

from __future__ import annotations

import random

import pytest

from crawl.extraction import dedup
from crawl.extraction.dedup import NearDupIndex, content_hash, fingerprints, hamming, simhash64


def _text(seed: int, words: int = 300) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randint(0, 5000)}" for _ in range(words))


def test_content_hash_ignores_case_and_spacing() -> None:
    assert content_hash("Hello,   World!") == content_hash("hello world")
    assert content_hash("hello world") != content_hash("hello there world")


def test_simhash_is_stable_and_64_bit() -> None:
    text = _text(1)
    assert simhash64(text) == simhash64(" ".join(text.split()))
    assert 0 < simhash64(text) < 2**64
    assert simhash64("") == 0


def test_near_duplicates_are_close_and_different_texts_far() -> None:
    close = 0
    for seed in range(40):
        words = _text(seed, 1000).split()
        changed = [*words[:500], "changed", *words[501:]]
        close += hamming(simhash64(" ".join(words)), simhash64(" ".join(changed))) <= 3
    assert close >= 36  # ~97% measured
    distances = [hamming(simhash64(_text(s)), simhash64(_text(s + 1000))) for s in range(40)]
    assert min(distances) > 10


def test_index_finds_exact_then_near_then_nothing() -> None:
    index = NearDupIndex(3)
    base = _text(3)
    index.add("http://a/1", content_hash(base), simhash64(base))
    exact = index.check(content_hash(base.upper()), simhash64(base.upper()))
    assert (exact.kind, exact.of_url) == ("exact", "http://a/1")
    fingerprint = simhash64(base) ^ 0b101  # two bits away
    near = index.check("other-hash", fingerprint)
    assert (near.kind, near.of_url, near.distance) == ("near", "http://a/1", 2)
    far = index.check("other-hash", simhash64(base) ^ 0b1111)
    assert far.kind == "unique"


def test_index_finds_every_fingerprint_within_three_bits() -> None:
    """The block index must agree with a brute-force scan (the oracle)."""
    rng = random.Random(7)
    index = NearDupIndex(3)
    stored = [rng.getrandbits(64) for _ in range(2000)]
    for i, fp in enumerate(stored):
        index.add(f"u{i}", f"h{i}", fp)
    for _ in range(300):
        base = rng.choice(stored)
        probe = base
        for bit in rng.sample(range(64), rng.randint(0, 4)):
            probe ^= 1 << bit
        expected = min(hamming(probe, fp) for fp in stored)
        verdict = index.check("none", probe)
        assert (verdict.kind != "unique") == (expected <= 3)
        if expected <= 3:
            assert verdict.distance == expected


def test_index_keeps_the_first_original_of_a_hash_and_of_a_tie() -> None:
    index = NearDupIndex(3)
    digest = content_hash("some words of a page")
    index.add("http://a/first", digest, 0b1111 << 20)
    index.add("http://a/second", digest, 0b1111 << 40)
    index.add("http://a/third", "not-a-hex-digest", 0b1111 << 20)
    assert len(index) == 2
    assert index.check(digest, 0).of_url == "http://a/first"
    assert index.check("not-a-hex-digest", 0).of_url == "http://a/third"
    # Two bits from /first and /third (same fingerprint, same block values): /first came first.
    near = index.check(content_hash("other"), (0b1111 << 20) ^ 0b11)
    assert (near.kind, near.of_url, near.distance) == ("near", "http://a/first", 2)
    # Fingerprints as the database hands them back (unsigned) and as signed 64-bit agree.
    index.add("http://a/high", content_hash("high"), (1 << 64) - 1)
    assert index.check(content_hash("x"), -1).of_url == "http://a/high"


def test_distance_above_block_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="needs more than 4 blocks"):
        NearDupIndex(4)


def test_fingerprints_agree_with_the_single_functions() -> None:
    text = "Some Text, with   punctuation! " + _text(9)
    assert fingerprints(text) == (content_hash(text), simhash64(text), len(text.split()))


@pytest.mark.parametrize("words", [1, 2, 300, 5000])
def test_the_whole_array_ways_give_the_per_item_fingerprints(
    words: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long texts count word lengths and bit votes another way: the fingerprint may not move."""
    text = "Ünïcode “quoted” words, " + _text(11, words)
    monkeypatch.setattr(dedup, "_LONG", 10**9)  # per-item everywhere
    per_item = fingerprints(text)
    monkeypatch.setattr(dedup, "_LONG", 1)  # whole-array everywhere
    assert fingerprints(text) == per_item


@pytest.mark.parametrize(
    "text",
    [
        "Ünïcode “quoted” words — ¶ and a\u00a0no-break space, naïve café",
        "日本語のテキスト、句読点。 Ελληνικά κείμενα; русский текст!",
        "emoji 🔗 link ✓ check ★ star ∑ sum → arrow ½ half ² squared",
        "a lone surrogate \udcff between words, and combining e\u0301 accent",
        "".join(chr(c) for c in range(0x2000, 0x2100)),  # many symbols: the regex path
        "plain ascii only, with_underscores and 123 numbers",
    ],
)
def test_non_ascii_separators_become_word_breaks_like_the_regex(text: str) -> None:
    """The replace-based path cuts words exactly where ``\\w`` does, on both of its paths."""
    expected = [w.encode("utf-8", "surrogatepass") for w in dedup._WORDS.findall(text.lower())]
    assert dedup._utf8_words(text) == expected
