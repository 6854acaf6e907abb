"""VectorShard over a real hnswlib index, with hand-made unit vectors (no model)."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from core.errors import ConfigError, ManifestError
from core.types import DocId, ScoredDoc
from retrieval.index.layout import version_name
from retrieval.vectors.hnsw import VectorShard

DIM = 16


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def basis(i: int, dim: int = DIM) -> np.ndarray:
    v = np.zeros(dim, dtype=np.float32)
    v[i] = 1.0
    return v


def filled_shard(n_docs: int = 200, seed: int = 7, capacity: int = 8) -> tuple[VectorShard, np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = unit(rng, n_docs)
    shard = VectorShard(
        dim=DIM, model_id="test-model@abc", m=16, ef_construction=100, ef=64, capacity=capacity
    )
    shard.add(np.arange(1, n_docs + 1, dtype=np.int64), vectors)
    return shard, vectors


def test_search_matches_exact_and_scores_are_cosine() -> None:
    shard, vectors = filled_shard()
    query = vectors[41]  # document 42's own vector
    approx = shard.search(query, 10)
    exact = shard.search_exact(query, 10)
    assert approx == exact or [h.doc_id for h in approx] == [h.doc_id for h in exact]
    assert approx[0].doc_id == 42
    assert approx[0].score == pytest.approx(1.0, abs=1e-5)
    cosines = vectors @ query
    expected = np.argsort(-cosines)[:10] + 1
    assert [h.doc_id for h in exact] == expected.tolist()
    assert [h.score for h in exact] == pytest.approx(np.sort(cosines)[::-1][:10].tolist(), abs=1e-5)


def test_growth_past_capacity_resizes_the_index() -> None:
    shard, _ = filled_shard(n_docs=100, capacity=4)
    assert shard.num_docs == 100
    assert shard.num_rows == 100
    assert shard._index.get_max_elements() >= 100


def test_document_scores_as_its_best_passage() -> None:
    shard = VectorShard(dim=DIM, model_id="m@1", capacity=4)
    # Document 7 has three passages; only the last one points along axis 3.
    shard.add([7, 7, 7, 8], np.stack([basis(0), basis(1), basis(3), (basis(3) + basis(4)) / np.sqrt(2)]))
    hits = shard.search(basis(3), 2)
    assert [h.doc_id for h in hits] == [7, 8]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)
    assert hits[1].score == pytest.approx(1 / np.sqrt(2), abs=1e-5)
    assert shard.search_exact(basis(3), 2) == [
        ScoredDoc(DocId(7), pytest.approx(1.0, abs=1e-6)),  # type: ignore[arg-type]
        ScoredDoc(DocId(8), pytest.approx(1 / np.sqrt(2), abs=1e-5)),  # type: ignore[arg-type]
    ]
    assert shard.num_docs == 2 and shard.num_rows == 4


def test_re_adding_a_document_replaces_its_vectors() -> None:
    shard = VectorShard(dim=DIM, model_id="m@1", capacity=4)
    shard.add([1, 2], np.stack([basis(0), basis(1)]))
    shard.add([1], np.stack([basis(2)]))
    assert shard.num_docs == 2 and shard.num_rows == 2
    assert [h.doc_id for h in shard.search(basis(2), 1)] == [1]
    assert shard.similarity(basis(0), [DocId(1), DocId(2), DocId(99)]) == {
        DocId(1): pytest.approx(0.0, abs=1e-6),
        DocId(2): pytest.approx(0.0, abs=1e-6),
    }


def test_deleted_documents_never_come_back(tmp_path: Path) -> None:
    shard, vectors = filled_shard()
    assert shard.delete([42, 43]) == 2
    hits = shard.search(vectors[41], 20)
    assert 42 not in {h.doc_id for h in hits} and 43 not in {h.doc_id for h in hits}
    assert len(hits) == 20
    assert 42 not in {h.doc_id for h in shard.search_exact(vectors[41], 20)}
    shard.save(tmp_path / "v")
    loaded = VectorShard.load(tmp_path / "v")
    assert 42 not in loaded and 41 in loaded
    assert loaded.num_docs == 198
    assert loaded.search(vectors[41], 20) == hits


def test_save_load_round_trip(tmp_path: Path) -> None:
    shard, vectors = filled_shard()
    shard.meta = {"chunks": ["chunk-000001"], "precision": "fp32"}
    shard.save(tmp_path / "vec")
    loaded = VectorShard.load(tmp_path / "vec", model_id="test-model@abc")
    assert (loaded.dim, loaded.model_id, loaded.m, loaded.ef_construction, loaded.ef) == (
        DIM,
        "test-model@abc",
        16,
        100,
        64,
    )
    assert loaded.meta == {"chunks": ["chunk-000001"], "precision": "fp32"}
    assert loaded.doc_ids() == shard.doc_ids()
    for i in (0, 17, 199):
        assert loaded.search(vectors[i], 10) == shard.search(vectors[i], 10)
        assert loaded.search_exact(vectors[i], 10) == shard.search_exact(vectors[i], 10)
    manifest = json.loads((tmp_path / "vec" / "manifest.json").read_text())
    assert manifest["model_id"] == "test-model@abc"
    assert (manifest["dim"], manifest["docs"], manifest["rows"], manifest["space"]) == (DIM, 200, 200, "ip")
    assert manifest["params"] == {"m": 16, "ef_construction": 100, "ef": 64}
    # Saving again over an existing directory replaces it in one step.
    loaded.add([1000], unit(np.random.default_rng(1), 1))
    loaded.save(tmp_path / "vec")
    assert VectorShard.load(tmp_path / "vec").num_docs == 201
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vec"]


def test_load_refuses_vectors_of_another_model(tmp_path: Path) -> None:
    shard, _ = filled_shard(n_docs=5)
    shard.save(tmp_path / "vec")
    with pytest.raises(ManifestError, match=re.escape("holds vectors of test-model@abc, not other@1")):
        VectorShard.load(tmp_path / "vec", model_id="other@1")
    with pytest.raises(ManifestError, match=re.escape("no manifest.json")):
        VectorShard.load(tmp_path / "missing")


def test_wrong_shapes_are_refused() -> None:
    shard = VectorShard(dim=DIM, model_id="m@1")
    with pytest.raises(ConfigError, match=re.escape("this shard holds dim 16")):
        shard.add([1], np.zeros((1, 8), dtype=np.float32))
    with pytest.raises(ConfigError, match=re.escape("2 document ids for 1 vectors")):
        shard.add([1, 2], np.zeros((1, DIM), dtype=np.float32))


def test_empty_shard_and_k_larger_than_shard() -> None:
    shard = VectorShard(dim=DIM, model_id="m@1")
    assert shard.search(basis(0), 5) == []
    shard.add([5, 6], np.stack([basis(0), basis(1)]))
    assert [h.doc_id for h in shard.search(basis(0), 50)] == [5, 6]


def test_version_name_is_a_safe_directory_name() -> None:
    assert version_name("all-MiniLM-L6-v2@f0a7daea46e8") == "all-minilm-l6-v2-f0a7daea46e8"


def test_a_documents_exact_cosine_does_not_depend_on_the_other_documents_asked() -> None:
    """Serving asks per shard, after the broker's cut; training asks one shard for all.

    The same document must get the same bits either way (BLAS matrix-vector products
    sum a row differently depending on how many rows they are given).
    """
    dim = 384
    rng = np.random.default_rng(3)
    shard = VectorShard(dim=dim, model_id="m@1", capacity=512)
    shard.add(np.arange(1, 401, dtype=np.int64), unit(rng, 400, dim))
    query = unit(rng, 1, dim)[0]
    ids = [DocId(i) for i in range(1, 401)]
    whole = shard.similarity(query, ids)
    assert len(whole) == 400
    for size in (1, 2, 3, 5, 17, 64, 131, 255):
        for start in (0, 100, 399 - size):
            part = shard.similarity(query, ids[start : start + size])
            assert part == {d: whole[d] for d in ids[start : start + size]}


class _CountingIndex:
    """The shard's hnswlib index, counting (and slowing) full read-backs of its vectors."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.reads = 0

    def get_items(self, *args: object, **kwargs: object) -> object:
        self.reads += 1
        time.sleep(0.05)  # wide enough a window for every thread to arrive during the build
        return self.inner.get_items(*args, **kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_concurrent_first_similarity_calls_build_the_exact_matrix_once() -> None:
    shard, vectors = filled_shard(n_docs=50)
    counting = _CountingIndex(shard._index)
    shard._index = counting
    ids = [DocId(i) for i in (3, 7, 11)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: shard.similarity(vectors[6], ids), range(8)))
    assert counting.reads == 1
    assert all(r == results[0] for r in results)
    assert results[0][DocId(7)] == pytest.approx(1.0, abs=1e-5)


def test_warm_builds_the_exact_matrix_before_any_query() -> None:
    shard, vectors = filled_shard(n_docs=30)
    counting = _CountingIndex(shard._index)
    shard._index = counting
    shard.warm()
    assert counting.reads == 1
    shard.similarity(vectors[0], [DocId(1)])
    shard.search_exact(vectors[0], 3)
    assert counting.reads == 1


def test_a_documents_vector_is_the_unit_mean_of_its_passages_and_follows_changes() -> None:
    shard = VectorShard(dim=DIM, model_id="m@1", capacity=4)
    shard.add([7, 7, 7, 8], np.stack([basis(0), basis(1), basis(3), (basis(3) + basis(4)) / np.sqrt(2)]))
    got = shard.doc_vectors([DocId(8), DocId(7), DocId(99)])
    assert set(got) == {7, 8}  # an unknown document is left out
    np.testing.assert_allclose(got[DocId(7)], (basis(0) + basis(1) + basis(3)) / np.sqrt(3), atol=1e-6)
    np.testing.assert_allclose(got[DocId(8)], (basis(3) + basis(4)) / np.sqrt(2), atol=1e-6)
    assert got[DocId(7)].dtype == np.float32
    shard.add([7], np.stack([basis(5)]))  # re-embedded: one passage now
    np.testing.assert_allclose(shard.doc_vectors([DocId(7)])[DocId(7)], basis(5), atol=1e-6)
    shard.delete([8])
    assert shard.doc_vectors([DocId(8)]) == {}


def test_a_documents_vector_does_not_depend_on_the_other_documents_asked() -> None:
    shard, _ = filled_shard(60)
    alone = shard.doc_vectors([DocId(5)])[DocId(5)]
    among = shard.doc_vectors([DocId(d) for d in range(1, 61)])[DocId(5)]
    assert alone.tobytes() == among.tobytes()
