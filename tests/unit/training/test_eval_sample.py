"""The held-out query sample of `trawl eval --sample`: deterministic, stratified by kind."""

from __future__ import annotations

from collections import Counter

from training.evaluate import by_kind, stratified_sample

QIDS = [f"q{i:04d}" for i in range(1000)]
KINDS = {q: ("anchor" if i % 10 < 6 else "heading" if i % 10 < 8 else "title") for i, q in enumerate(QIDS)}


def test_sample_keeps_each_kinds_share() -> None:
    sample = stratified_sample(QIDS, KINDS, 101, seed=0)
    assert len(sample) == 101
    counts = Counter(KINDS[q] for q in sample)
    assert abs(counts["anchor"] - 60.6) < 1
    assert abs(counts["heading"] - 20.2) < 1
    assert abs(counts["title"] - 20.2) < 1


def test_sample_is_deterministic_ordered_and_seeded() -> None:
    first = stratified_sample(QIDS, KINDS, 200, seed=3)
    assert first == stratified_sample(list(QIDS), dict(KINDS), 200, seed=3)
    assert first == [q for q in QIDS if q in set(first)]
    assert set(first) != set(stratified_sample(QIDS, KINDS, 200, seed=4))


def test_sample_larger_than_the_set_is_the_set() -> None:
    assert stratified_sample(QIDS[:5], KINDS, 10) == QIDS[:5]


def test_queries_without_kind_form_one_stratum() -> None:
    assert len(stratified_sample(QIDS, {}, 37)) == 37


def test_by_kind_means() -> None:
    per_query = {"a": {"ndcg@10": 1.0, "mrr@10": 1.0}, "b": {"ndcg@10": 0.0, "mrr@10": 0.5}}
    out = by_kind(per_query, {"a": "title", "b": "title"})
    assert out == {"title": {"queries": 2, "ndcg@10": 0.5, "mrr@10": 0.75}}
