"""Document vectors cross the shard wire only for a stage that reads them.

A ``dense_prf`` feature needs every candidate's document vector, ~2 kB of base64 per
candidate on ``/shard/annotate``; a model without the feature (the packaged ``ltr:v4``)
paid that on every multi-shard query. Real shard processes (FastAPI apps over HTTP),
a real index with vectors from the packaged MiniLM.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.settings import EmbedSettings, SearchSettings
from retrieval.index.generation import open_vectors
from retrieval.index.layout import lexical_dir
from retrieval.index.lexical import LexicalShard
from retrieval.index.root import IndexRoot, resolve_index
from retrieval.query.broker import Broker
from retrieval.query.shard_backend import LocalShard
from retrieval.text.analyzer import parse_query
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from tests.fixtures.docs import SMALL_WEB
from tests.fixtures.shards import http_broker

QUERY = "python list methods"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    index = IndexRoot(tmp_path_factory.mktemp("doc-vectors") / "index")
    generation = index.build(SMALL_WEB, shards=2)
    backfill_index(index.path_of(generation), embedder, EmbedSettings())
    index.publish(generation)
    return index.root


@pytest.fixture(scope="module")
def brokers(root: Path) -> Iterator[tuple[Broker, Broker]]:
    gen = resolve_index(root)
    local = Broker(
        [[LocalShard(i, LexicalShard(lexical_dir(gen, i)), open_vectors(gen, i))] for i in range(2)],
        deadline_s=60.0,
    )
    with http_broker(root, 2, SearchSettings(spelling=False)) as remote:
        yield local, remote


def test_remote_shards_send_document_vectors_only_when_asked(
    brokers: tuple[Broker, Broker], embedder: Embedder
) -> None:
    local, remote = brokers
    query = parse_query(QUERY)
    vector = embedder.encode_query(QUERY)
    plain = remote.gather(query, vector=vector, k_lexical=6, k_vector=6, with_fields=True)
    asked = remote.gather(
        query, vector=vector, k_lexical=6, k_vector=6, with_fields=True, with_doc_vectors=True
    )
    assert {c.shard_id for c in plain.candidates} == {0, 1}  # two steps: candidates, then annotate
    assert plain.candidates == asked.candidates  # same candidates, ranks and fields
    assert all(c.doc_vector is None for c in plain.candidates)
    in_process = local.gather(
        query, vector=vector, k_lexical=6, k_vector=6, with_fields=True, with_doc_vectors=True
    )
    assert [c.doc_id for c in in_process.candidates] == [c.doc_id for c in asked.candidates]
    for over_http, here in zip(asked.candidates, in_process.candidates, strict=True):
        assert over_http.doc_vector is not None and here.doc_vector is not None
        assert over_http.doc_vector.tobytes() == here.doc_vector.tobytes()
