"""Union and fusion on hand-built lists; filters on vector candidates over a real Tantivy shard."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from core.types import DocId, ScoredDoc
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_writer import build_lexical_shard
from retrieval.query.hybrid import (
    Candidate,
    convex,
    filtered_vector_hits,
    merge_shards,
    rrf,
    shard_candidates,
    union,
)
from retrieval.text.analyzer import parse_query
from retrieval.vectors.hnsw import VectorShard
from tests.fixtures.docs import SMALL_WEB

A, B, C, D = DocId(1), DocId(2), DocId(3), DocId(4)
LEXICAL = [ScoredDoc(A, 10.0), ScoredDoc(B, 6.0), ScoredDoc(C, 4.0)]
VECTOR = [ScoredDoc(C, 0.9), ScoredDoc(D, 0.7), ScoredDoc(A, 0.5)]


def test_union_keeps_scores_and_ranks_of_both_lists() -> None:
    assert union(LEXICAL, VECTOR, shard_id=3) == [
        Candidate(A, 3, 10.0, 0.5, 1, 3, lexical_match=True),
        Candidate(B, 3, 6.0, None, 2, None, lexical_match=True),
        Candidate(C, 3, 4.0, 0.9, 3, 1, lexical_match=True),
        Candidate(D, 3, None, 0.7, None, 2),
    ]


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = rrf(union(LEXICAL, VECTOR), k=60)
    expected = {A: 1 / 61 + 1 / 63, B: 1 / 62, C: 1 / 63 + 1 / 61, D: 1 / 62}
    assert [h.doc_id for h in fused] == [A, C, B, D]  # ties broken by doc id
    assert {h.doc_id: h.score for h in fused} == pytest.approx(expected)


def test_convex_min_max_normalizes_each_list() -> None:
    fused = convex(union(LEXICAL, VECTOR), weight=0.3)
    # bm25' = a 1, b 1/3, c 0 ; cos' = c 1, d .5, a 0 ; absent = 0
    expected = {A: 0.7, B: 0.7 / 3, C: 0.3, D: 0.15}
    assert [h.doc_id for h in fused] == [A, C, B, D]
    assert {h.doc_id: h.score for h in fused} == pytest.approx(expected)
    assert [h.doc_id for h in convex(union(LEXICAL, VECTOR), weight=0.0)] == [A, B, C, D]
    assert [h.doc_id for h in convex(union(LEXICAL, VECTOR), weight=1.0)] == [C, D, A, B]


def test_convex_refuses_a_weight_outside_the_unit_interval() -> None:
    with pytest.raises(ValueError, match=re.escape("weight=1.5 is outside [0, 1]")):
        convex([], weight=1.5)


def test_merge_shards_recomputes_global_ranks() -> None:
    shard0 = union([ScoredDoc(A, 5.0)], [ScoredDoc(B, 0.4)], shard_id=0)
    shard1 = union([ScoredDoc(C, 7.0)], [ScoredDoc(D, 0.8)], shard_id=1)
    merged = {c.doc_id: c for c in merge_shards([shard0, shard1])}
    assert (merged[C].lexical_rank, merged[A].lexical_rank) == (1, 2)
    assert (merged[D].vector_rank, merged[B].vector_rank) == (1, 2)
    assert merged[D].shard_id == 1 and merged[A].vector_rank is None


# -- filters over a real lexical shard -------------------------------------------------------

# Vector order of SMALL_WEB documents (by index) for the query vector below.
ORDER = [3, 6, 5, 4, 1, 0, 2]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[LexicalShard, VectorShard, np.ndarray]:
    path: Path = tmp_path_factory.mktemp("lex") / "lexical"
    build_lexical_shard(SMALL_WEB, path)
    dim = len(SMALL_WEB)
    vectors = VectorShard(dim=dim, model_id="hand@1", capacity=4)
    vectors.add([int(d.doc_id) for d in SMALL_WEB], np.eye(dim, dtype=np.float32))
    query = np.zeros(dim, dtype=np.float32)
    for rank, i in enumerate(ORDER):
        query[i] = 1.0 - 0.1 * rank
    return LexicalShard(path), vectors, query / np.linalg.norm(query)


def ids(indexes: list[int]) -> list[DocId]:
    return [SMALL_WEB[i].doc_id for i in indexes]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("comprehension", [3, 6, 5, 4, 1, 0, 2]),
        ("comprehension site:python.org", [1, 0, 2]),
        ("comprehension site:docs.python.org", [1, 0]),
        ("comprehension lang:de", [4]),
        ("comprehension filetype:pdf", [5]),
        ("comprehension -lambda -bread", [6, 5, 4, 0, 2]),
        ('comprehension -"annual report" site:example.org', [3, 6]),
    ],
)
def test_filters_apply_to_vector_candidates(
    shards: tuple[LexicalShard, VectorShard, np.ndarray], raw: str, expected: list[int]
) -> None:
    lexical, vectors, query_vector = shards
    query = parse_query(raw)
    hits = filtered_vector_hits(lexical, vectors, query, query_vector, k=7)
    assert [h.doc_id for h in hits] == ids(expected)
    # The union obeys the filters in both lists, and vector ranks follow the filtered list.
    candidates = shard_candidates(lexical, vectors, query, query_vector, k_lexical=10, k_vector=7)
    allowed = set(ids(expected))
    assert {c.doc_id for c in candidates} <= allowed
    by_rank = sorted((c for c in candidates if c.vector_rank is not None), key=lambda c: c.vector_rank or 0)
    assert [c.doc_id for c in by_rank] == ids(expected)


def test_filtered_vector_search_widens_until_k_pass(
    shards: tuple[LexicalShard, VectorShard, np.ndarray],
) -> None:
    lexical, vectors, query_vector = shards
    # site:python.org documents are the last three by vector order: k=2 needs widening.
    hits = filtered_vector_hits(lexical, vectors, parse_query("x site:python.org"), query_vector, k=2)
    assert [h.doc_id for h in hits] == ids([1, 0])


def test_candidates_carry_field_scores(shards: tuple[LexicalShard, VectorShard, np.ndarray]) -> None:
    lexical, vectors, query_vector = shards
    query = parse_query("bread")
    candidates = shard_candidates(
        lexical, vectors, query, query_vector, k_lexical=10, k_vector=2, with_fields=True
    )
    bread = next(c for c in candidates if c.doc_id == SMALL_WEB[3].doc_id)
    assert bread.lexical_rank == 1 and bread.vector_rank == 1
    assert bread.field_score("title") > 0 and bread.field_score("body") > 0
    lists = next(c for c in candidates if c.doc_id == SMALL_WEB[6].doc_id)
    assert (lists.bm25, lists.lexical_rank, lists.vector_rank) == (None, None, 2)
    assert lists.field_score("body") == 0.0


def test_no_vector_index_gives_the_lexical_list(shards: tuple[LexicalShard, VectorShard, np.ndarray]) -> None:
    lexical, _, _ = shards
    query = parse_query("comprehension")
    candidates = shard_candidates(lexical, None, query, None, k_lexical=10, k_vector=10)
    expected = [h.doc_id for h in lexical.search(query, k=10).hits]
    assert [c.doc_id for c in sorted(candidates, key=lambda c: c.lexical_rank or 0)] == expected
    assert all(c.cosine is None for c in candidates)
