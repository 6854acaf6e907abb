"""What crosses the wire between a broker and an HTTP shard keeps its exact bits.

A learned ranker's features must be the same whether its shards run in-process or in
other processes: a document vector that lost bits in JSON would move ``dense_prf``."""

from __future__ import annotations

import json

import numpy as np

from core.types import DocId, Query
from retrieval.query.hybrid import Candidate
from retrieval.remote.shard_http import (
    candidate_from_wire,
    candidate_to_wire,
    query_from_wire,
    query_to_wire,
    vectors_from_wire,
    vectors_to_wire,
)


def test_document_vectors_cross_the_wire_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    vectors = {DocId(d): rng.standard_normal(384).astype(np.float32) for d in (3, 11, 2**40)}
    back = vectors_from_wire(json.loads(json.dumps(vectors_to_wire(vectors))))
    assert list(back) == list(vectors)
    for doc_id, vector in vectors.items():
        assert back[doc_id].dtype == np.float32 and back[doc_id].tobytes() == vector.tobytes()
    assert vectors_from_wire(json.loads(json.dumps(vectors_to_wire({})))) == {}
    assert vectors_from_wire(None) == {}


def test_a_candidate_keeps_its_document_vector_over_the_wire() -> None:
    vector = np.random.default_rng(6).standard_normal(16).astype(np.float32)
    with_vector = Candidate(DocId(4), 1, 2.5, 0.25, 1, 3, (("title", 1.0),), True, vector)
    back = candidate_from_wire(json.loads(json.dumps(candidate_to_wire(with_vector))))
    assert back == with_vector
    assert back.doc_vector is not None and back.doc_vector.tobytes() == vector.tobytes()
    without = Candidate(DocId(5), 0, None, 0.5, None, 1)
    assert candidate_from_wire(json.loads(json.dumps(candidate_to_wire(without)))).doc_vector is None


def test_a_query_crosses_the_wire_whole_with_the_language_it_is_read_in() -> None:
    query = Query(
        "Astuces pour", terms=("Astuces", "pour"), lang="fr", expansions=(("tip", 0.5),), read_as="fr"
    )
    assert query_from_wire(json.loads(json.dumps(query_to_wire(query)))) == query
    older = {k: v for k, v in query_to_wire(query).items() if k != "read_as"}  # a broker from before
    assert query_from_wire(older).read_as == ""
