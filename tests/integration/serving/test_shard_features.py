"""Shard-side features (forward index, in-process or over HTTP) equal broker-side features
computed from the stored documents, on the same candidates of a two-shard index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from core.settings import SearchSettings
from rerank.features import FeatureContext, compute_features
from retrieval.analyzer import parse_query
from retrieval.broker import Broker, LocalShard
from retrieval.layout import lexical_dir
from retrieval.lexical import LexicalShard
from retrieval.manifest import IndexRoot, resolve_index
from retrieval.shard_http import HttpShard, create_shard_app
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
    local = Broker([[LocalShard(i, LexicalShard(lexical_dir(gen, i)))] for i in range(2)])
    settings = SearchSettings(use_vectors=False)
    clients = [TestClient(create_shard_app(root, i, settings)) for i in range(2)]
    remote = Broker([[HttpShard("http://testserver", client=c)] for c in clients])
    try:
        yield local, remote
    finally:
        remote.close()
        for c in clients:
            c.close()


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
