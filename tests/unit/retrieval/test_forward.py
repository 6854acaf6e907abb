"""The forward index: ids ↔ analysed text, the prefix limit, and features equal to the stored-text path."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from core.types import DocId, Query
from rerank.features import SCHEMA, FeatureContext, compute_features
from retrieval.index.build import build_index
from retrieval.index.forward import BODY_CHARS, ForwardIndex
from retrieval.index.forward_features import SHARD_COLUMNS, ShardFeatures, shard_features
from retrieval.index.layout import forward_dir, lexical_dir, lexical_manifest
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_writer import write_forward_index
from retrieval.query.hybrid import shard_candidates
from retrieval.text.analyzer import parse_query
from retrieval.text.tokenizer import analyze
from tests.fixtures.docs import SMALL_WEB, make_doc

NOW = 1_750_000_000.0
WORDS = "wing flow air heat pressure boundary layer shock wave lift drag can't café über transfer".split()


def _corpus() -> list:
    rng = random.Random(7)
    docs = [
        dataclasses.replace(d, pagerank=0.3 * i, published_at=NOW - 3600.0 * i if i % 2 else None)
        for i, d in enumerate(SMALL_WEB)
    ]
    for i in range(40):
        body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 400)))
        docs.append(
            make_doc(
                f"https://example.com/{i}/page{i}.html?x=1",
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6))),
                body,
                lang=rng.choice(["en", "en-GB", "de", ""]),
                headings=tuple(
                    " ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(rng.randint(0, 200))
                ),
                anchors=tuple(
                    " ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(rng.randint(0, 80))
                ),
                fetched_at=NOW - 86_400.0 * i if i % 3 else None,
                dup_cluster_size=1 + i % 4,
            )
        )
    return docs


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> LexicalShard:
    index = tmp_path_factory.mktemp("forward") / "index"
    build_index(_corpus(), index, shards=1)
    return LexicalShard(lexical_dir(index, 0))


def test_ids_round_trip_to_the_analysed_text(shard: LexicalShard) -> None:
    forward = shard.forward
    assert forward is not None and len(forward) == shard.num_docs
    for doc in shard.iter_stored():
        assert forward.tokens(int(doc.doc_id), "title") == analyze(doc.title)
        assert forward.tokens(int(doc.doc_id), "headings") == analyze(" ".join(doc.headings)[:600])
        assert forward.tokens(int(doc.doc_id), "anchors") == analyze(" ".join(doc.anchors[:50])[:600])
        ids = forward.term_ids(forward.tokens(int(doc.doc_id), "body"))
        assert [forward.terms[i] for i in ids] == analyze(doc.body[:BODY_CHARS])


def test_a_body_past_the_prefix_limit_keeps_only_the_prefix(shard: LexicalShard) -> None:
    forward = shard.forward
    assert forward is not None
    long_docs = [d for d in shard.iter_stored() if len(d.body) > BODY_CHARS + 200]
    assert long_docs
    for doc in long_docs:
        body = forward.tokens(int(doc.doc_id), "body")
        assert body == analyze(doc.body[:BODY_CHARS])
        assert len(body) < len(analyze(doc.body))


def test_backfilled_forward_index_equals_the_built_one(shard: LexicalShard, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "lexical"
    shutil.copytree(shard.path, copy)
    shutil.rmtree(forward_dir(copy))
    # As an index built before the forward index existed: without checksums either (a
    # checksummed shard missing its forward files is damaged, and refused).
    manifest = json.loads(lexical_manifest(copy).read_text())
    del manifest["files"]
    lexical_manifest(copy).write_text(json.dumps(manifest))
    assert LexicalShard(copy).forward is None
    assert write_forward_index(copy) == shard.num_docs
    rebuilt = ForwardIndex(forward_dir(copy))
    for doc in shard.iter_stored():
        for field in ("title", "headings", "body", "anchors"):
            assert rebuilt.tokens(int(doc.doc_id), field) == shard.forward.tokens(int(doc.doc_id), field)  # type: ignore[union-attr]


QUERIES = (
    "wing flow",
    "heat transfer boundary layer",
    '"boundary layer" shock',
    '"shock wave" lift drag air',
    "list comprehensions",
    "cafe uber cant",
    "wing wing flow",
    "nothingmatches wing",
    "lang:de pressure",
)


@pytest.mark.parametrize("raw", QUERIES)
def test_forward_features_equal_stored_text_features(shard: LexicalShard, raw: str) -> None:
    query = parse_query(raw)
    candidates = shard_candidates(shard, None, query, None, k_lexical=100, k_vector=0, with_fields=True)
    assert candidates
    assert shard.forward is not None
    context = FeatureContext(now_s=NOW, user_lang="en")
    docs = shard.stored_many([c.doc_id for c in candidates])
    reference = compute_features(query, candidates, docs, context=context)
    sent = shard_features(shard.forward, _terms(query), [c.doc_id for c in candidates])
    over_wire = ShardFeatures.from_wire(sent.to_wire())
    served = compute_features(query, candidates, {}, context=context, shard=over_wire)
    np.testing.assert_allclose(served.values, reference.values, rtol=0, atol=1e-9, equal_nan=True)
    assert served.doc_ids == reference.doc_ids
    assert set(SHARD_COLUMNS) <= set(SCHEMA)


def test_selecting_and_merging_keeps_rows_with_their_documents(shard: LexicalShard) -> None:
    query = parse_query("wing flow heat")
    candidates = shard_candidates(shard, None, query, None, k_lexical=30, k_vector=0)
    ids = [c.doc_id for c in candidates]
    assert shard.forward is not None
    whole = shard_features(shard.forward, _terms(query), ids)
    halves = ShardFeatures.merge(
        [
            shard_features(shard.forward, _terms(query), ids[:10]),
            shard_features(shard.forward, _terms(query), ids[10:]),
        ]
    )
    picked = list(reversed(ids[::2]))
    a, b = whole.select(picked), halves.select(picked)
    assert a is not None and b is not None
    np.testing.assert_array_equal(a.values, b.values)
    assert list(zip(a.term_row, a.term_hash, a.term_tf, strict=True)) == list(
        zip(b.term_row, b.term_hash, b.term_tf, strict=True)
    )
    assert whole.select([DocId(12345)]) is None


def _terms(query: Query):  # noqa: ANN202 - QueryTerms
    from retrieval.index.forward_features import QueryTerms

    return QueryTerms.of(query)


def test_stored_term_vectors_are_each_documents_title_and_body_terms_in_first_seen_order(
    shard: LexicalShard,
) -> None:
    forward = shard.forward
    assert forward is not None
    docs = list(shard.iter_stored())
    rows = forward.rows([d.doc_id for d in docs])
    stored = forward.term_vectors(rows)
    assert stored is not None
    seg, terms, counts = stored
    for i, doc in enumerate(docs):
        tokens = analyze(doc.title) + analyze(doc.body[:BODY_CHARS])
        expected = {t: tokens.count(t) for t in dict.fromkeys(tokens)}
        mine = seg == i
        assert [forward.terms[t] for t in terms[mine]] == list(expected)
        assert counts[mine].tolist() == list(expected.values())


def test_a_format_1_forward_index_opens_and_gives_the_same_features(
    shard: LexicalShard, tmp_path: Path
) -> None:
    """Indexes written before the stored PRF term vectors count them per query instead."""
    import json
    import shutil

    old = tmp_path / "forward"
    shutil.copytree(forward_dir(shard.path), old)
    for name in ("prf.tokens", "prf.offsets", "prf.counts"):
        (old / f"{name}.npy").unlink()
    manifest = json.loads((old / "forward.json").read_text())
    (old / "forward.json").write_text(json.dumps({**manifest, "format_version": 1}))
    current, legacy = shard.forward, ForwardIndex(old)
    assert current is not None and legacy.term_vectors(np.arange(3)) is None
    for raw in QUERIES:
        query = parse_query(raw)
        ids = [c.doc_id for c in shard_candidates(shard, None, query, None, k_lexical=100, k_vector=0)]
        a = shard_features(current, _terms(query), ids)
        b = shard_features(legacy, _terms(query), ids)
        assert a is not None and b is not None
        np.testing.assert_array_equal(a.values, b.values)
        for x, y in ((a.term_row, b.term_row), (a.term_hash, b.term_hash), (a.term_tf, b.term_tf)):
            np.testing.assert_array_equal(x, y)
