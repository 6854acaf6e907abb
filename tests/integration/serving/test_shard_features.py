"""Shard-side features (forward index, in-process or over HTTP) equal broker-side features
computed from the stored documents, on the same candidates of a two-shard index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.settings import SearchSettings
from rerank.features import FeatureContext, compute_features
from retrieval.index.forward_features import ShardFeatures
from retrieval.index.layout import lexical_dir
from retrieval.index.lexical import LexicalShard
from retrieval.index.root import IndexRoot, resolve_index
from retrieval.query.broker import Broker
from retrieval.query.hybrid import merge_shards
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.query.shard_backend import LocalShard, ShardRequest
from retrieval.text.analyzer import parse_query
from retrieval.vectors.hnsw import VectorShard
from tests.fixtures.shards import http_broker
from tests.unit.retrieval.test_forward import NOW, _corpus

QUERIES = ("wing flow", '"boundary layer" heat', "list comprehensions python", "shock wave lift drag")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    index = IndexRoot(tmp_path_factory.mktemp("shard-features") / "index")
    index.publish(index.build(_corpus(), shards=2))
    return index.root


@pytest.fixture(scope="module")
def brokers(root: Path) -> Iterator[tuple[Broker, Broker]]:
    gen = resolve_index(root)
    # A generous deadline: these tests compare values, and a shard that misses the
    # statistics step under a loaded test run would score with undercounted frequencies.
    local = Broker([[LocalShard(i, LexicalShard(lexical_dir(gen, i)))] for i in range(2)], deadline_s=60.0)
    with http_broker(root, 2, SearchSettings(use_vectors=False)) as remote:
        yield local, remote


@pytest.mark.parametrize("raw", QUERIES)
def test_shard_side_features_equal_broker_side_features(brokers: tuple[Broker, Broker], raw: str) -> None:
    local, remote = brokers
    query = parse_query(raw)
    context = FeatureContext(now_s=NOW)
    gathered = local.gather(query, vector=None, k_lexical=50, k_vector=0, with_fields=True)
    candidates = gathered.candidates
    assert len(candidates) > 5 and {c.shard_id for c in candidates} == {0, 1}
    assert gathered.features is not None
    by_shard: dict[int, list] = {}
    for c in candidates:
        by_shard.setdefault(c.shard_id, []).append(c.doc_id)
    docs = local.fetch(by_shard, deadline=float("inf"))
    broker_side = compute_features(query, candidates, docs, context=context)
    shard_side = compute_features(
        query, candidates, {}, context=context, shard=gathered.features.select([c.doc_id for c in candidates])
    )
    np.testing.assert_allclose(shard_side.values, broker_side.values, rtol=0, atol=1e-12, equal_nan=True)

    over_http = remote.gather(query, vector=None, k_lexical=50, k_vector=0, with_fields=True)
    assert [c.doc_id for c in over_http.candidates] == [c.doc_id for c in candidates]
    assert over_http.features is not None
    http_side = compute_features(
        query,
        over_http.candidates,
        {},
        context=context,
        shard=over_http.features.select([c.doc_id for c in candidates]),
    )
    np.testing.assert_array_equal(http_side.values, shard_side.values)


def test_fusion_stages_get_no_shard_features(brokers: tuple[Broker, Broker]) -> None:
    local, _ = brokers
    gathered = local.gather(parse_query("wing flow"), vector=None, k_lexical=20, k_vector=0)
    assert gathered.features is None


def _with_random_vectors(gen: Path, seed: int) -> list[LocalShard]:
    """The two shards with a random unit vector per document (cosines only need to differ)."""
    rng = np.random.default_rng(seed)
    shards = []
    for i in range(2):
        lexical = LexicalShard(lexical_dir(gen, i))
        ids = np.asarray([int(d.doc_id) for d in lexical.iter_stored()], dtype=np.int64)
        vectors = rng.standard_normal((len(ids), 32)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        shard = VectorShard(dim=32, model_id="random@1", capacity=len(ids))
        shard.add(ids, vectors)
        shards.append(LocalShard(i, lexical, shard))
    return shards


@pytest.mark.parametrize("raw", QUERIES)
def test_fields_asked_after_the_cut_equal_fields_computed_before_it(root: Path, raw: str) -> None:
    """Two shards: the broker asks for fields, exact cosines and features of the kept candidates
    only; they must be what each shard would have computed for its whole list."""
    shards = _with_random_vectors(resolve_index(root), seed=len(raw))
    broker = Broker([[s] for s in shards], deadline_s=60.0)
    query = parse_query(raw)
    vector = np.random.default_rng(1).standard_normal(32).astype(np.float32)
    vector /= np.linalg.norm(vector)
    k = 8
    gathered = broker.gather(
        query, vector=vector, k_lexical=k, k_vector=k, with_fields=True, with_doc_vectors=True
    )
    stats = broker.stats(query, deadline=float("inf"))
    request = ShardRequest(query, vector, k, k, stats, with_fields=True, with_doc_vectors=True)
    replies = [s.candidates(request) for s in shards]
    before = merge_shards([r.candidates for r in replies], k_lexical=k, k_vector=k)
    assert gathered.candidates == before
    # Document vectors (dense_prf) come with the fields, bit for bit what one step gives.
    assert all(c.doc_vector is not None for c in gathered.candidates)
    for asked, whole_list in zip(gathered.candidates, before, strict=True):
        assert whole_list.doc_vector is not None and asked.doc_vector is not None
        assert asked.doc_vector.tobytes() == whole_list.doc_vector.tobytes()
    assert any(c.vector_rank is None and c.cosine is not None for c in before)  # exact cosines asked
    assert len(before) < sum(len(r.candidates) for r in replies)  # the cut dropped some
    whole = ShardFeatures.merge([r.features for r in replies if r.features is not None])
    assert gathered.features is not None
    ids = [c.doc_id for c in before]
    a, b = gathered.features.select(ids), whole.select(ids)
    assert a is not None and b is not None
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.term_hash, b.term_hash)
    np.testing.assert_array_equal(a.term_tf, b.term_tf)


def test_document_vectors_are_gathered_only_when_the_stage_reads_them(root: Path) -> None:
    """A model without dense_prf features gets the same candidates and fields, without the
    ~2 kB a candidate of document vectors, on one step (one shard) and on two (two shards)."""
    shards = _with_random_vectors(resolve_index(root), seed=3)
    query = parse_query("wing flow")
    vector = np.random.default_rng(2).standard_normal(32).astype(np.float32)
    vector /= np.linalg.norm(vector)
    for broker in (Broker([[s] for s in shards], deadline_s=60.0), Broker([[shards[0]]], deadline_s=60.0)):
        plain = broker.gather(query, vector=vector, k_lexical=8, k_vector=8, with_fields=True)
        asked = broker.gather(
            query, vector=vector, k_lexical=8, k_vector=8, with_fields=True, with_doc_vectors=True
        )
        assert plain.candidates and plain.candidates == asked.candidates  # doc_vector is not compared
        assert all(c.doc_vector is None for c in plain.candidates)
        assert all(c.doc_vector is not None for c in asked.candidates)
        assert all(c.field_bm25 for c in plain.candidates if c.lexical_rank is not None)


class _FailsSecondStep(LocalShard):
    """A shard that answers the candidate step and then dies (fault injection)."""

    def annotate(self, request, *, timeout_s=None):  # type: ignore[no-untyped-def]
        raise ConnectionError("shard went away")


def test_a_shard_failing_after_the_cut_loses_its_candidates_and_is_reported(root: Path) -> None:
    gen = resolve_index(root)
    shards = [
        LocalShard(0, LexicalShard(lexical_dir(gen, 0))),
        _FailsSecondStep(1, LexicalShard(lexical_dir(gen, 1))),
    ]
    gathered = Broker([[s] for s in shards], deadline_s=60.0).gather(
        parse_query("wing flow"), vector=None, k_lexical=50, k_vector=0, with_fields=True
    )
    assert gathered.missing_shards == (1,)
    assert gathered.candidates and {c.shard_id for c in gathered.candidates} == {0}
    assert gathered.features is not None and set(gathered.features.doc_ids) == {
        c.doc_id for c in gathered.candidates
    }


class _NoStatistics(LocalShard):
    """A shard whose statistics step fails (fault injection); the search step works."""

    def doc_freqs(self, query, *, timeout_s=None):  # type: ignore[no-untyped-def]
        raise ConnectionError("statistics unavailable")


def test_without_any_statistics_shards_score_with_their_own(root: Path) -> None:
    """Not with df = 0 everywhere, which multiplied BM25 scores many times over."""
    gen = resolve_index(root)
    query = parse_query("wing flow")
    blind = Broker([[_NoStatistics(i, LexicalShard(lexical_dir(gen, i)))] for i in range(2)], deadline_s=60.0)
    assert blind.stats(query, deadline=float("inf")) is None
    got = blind.gather(query, vector=None, k_lexical=20, k_vector=0)
    own = [LexicalShard(lexical_dir(gen, i)).search(query, k=20) for i in range(2)]
    best_own = max(h.score for r in own for h in r.hits)
    assert got.candidates and max(c.bm25 or 0.0 for c in got.candidates) == best_own


def test_scores_from_incomplete_statistics_are_flagged_and_never_cached(root: Path) -> None:
    """A shard that misses the statistics step leaves BM25 on the others' frequencies: the
    answer is whole but not the one a later search gives, so it is served and not cached."""
    gen = resolve_index(root)
    query = parse_query("wing flow")
    half = Broker(
        [
            [LocalShard(0, LexicalShard(lexical_dir(gen, 0)))],
            [_NoStatistics(1, LexicalShard(lexical_dir(gen, 1)))],
        ],
        deadline_s=60.0,
    )
    got = half.gather(query, vector=None, k_lexical=20, k_vector=0)
    assert got.approximate_scores and not got.partial and {c.shard_id for c in got.candidates} == {0, 1}
    whole = Broker([[LocalShard(i, LexicalShard(lexical_dir(gen, i)))] for i in range(2)], deadline_s=60.0)
    assert not whole.gather(query, vector=None, k_lexical=20, k_vector=0).approximate_scores

    service = SearchService.open(root, SearchSettings(use_vectors=False, deadline_s=60.0))
    shard = service.generation.broker.shards[1][0]
    assert isinstance(shard, LocalShard)
    failing = _NoStatistics.doc_freqs.__get__(shard)
    shard.doc_freqs = failing  # type: ignore[method-assign]
    first = service.search(SearchRequest("wing flow", ranker="bm25"))
    again = service.search(SearchRequest("wing flow", ranker="bm25"))
    assert first.hits and not first.partial and not again.cached
    del shard.doc_freqs  # the statistics step answers again
    fresh = service.search(SearchRequest("wing flow", ranker="bm25"))
    assert not fresh.cached and service.search(SearchRequest("wing flow", ranker="bm25")).cached
    # The frequencies were missing, not wrong: the scores move once they are whole.
    assert [h.score for h in fresh.hits] != [h.score for h in first.hits]
