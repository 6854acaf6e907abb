"""Feature values on a hand-built example, and the fast paths against slow references."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from core.types import DocId, Query
from rerank.features import (
    INDEX,
    SCHEMA,
    FeatureContext,
    compute_features,
    dense_prf,
    fast_analyze,
    min_window,
    prf_similarity,
    url_depth,
)
from retrieval.index.lexical import StoredDoc
from retrieval.query.hybrid import Candidate
from retrieval.text.analyzer import parse_query
from retrieval.text.tokenizer import analyze

NOW = 1_700_000_000.0
DAY = 86_400.0


def _doc(doc_id: int, url: str, title: str, body: str, **extra: object) -> StoredDoc:
    values: dict[str, object] = {
        "doc_id": DocId(doc_id),
        "url": url,
        "title": title,
        "body": body,
        "headings": (),
        "description": "",
        "external_id": "",
        "host": "",
        "lang": "en",
        "filetype": "html",
    }
    values.update(extra)
    return StoredDoc(**values)  # type: ignore[arg-type]


def _example() -> tuple[Query, list[Candidate], dict[DocId, StoredDoc]]:
    query = parse_query('wing slipstream "propeller wash"')
    docs = {
        DocId(1): _doc(
            1,
            "https://a.org/aero/wings/1.html",
            "Wing in a slipstream",
            "The wing was tested in the propeller wash behind the engine, then the slipstream grew.",
            headings=("Slipstream effects",),
            anchors=("wing study",),
            pagerank=2.5,
            published_at=NOW - 10 * DAY,
            dup_cluster_size=3,
        ),
        DocId(2): _doc(
            2,
            "https://b.org/",
            "Cooking",
            "Nothing about aircraft here at all.",
            lang="de",
            fetched_at=NOW - 2 * DAY,
        ),
    }
    candidates = [
        Candidate(
            DocId(1), 0, 8.0, 0.6, 1, 2, (("title", 3.0), ("headings", 1.0), ("body", 6.0), ("anchors", 0.5))
        ),
        Candidate(
            DocId(2),
            0,
            None,
            0.8,
            None,
            1,
            (("title", 0.0), ("headings", 0.0), ("body", 0.0), ("anchors", 0.0)),
        ),
    ]
    return query, candidates, docs


def test_feature_values_on_a_hand_built_example() -> None:
    query, candidates, docs = _example()
    m = compute_features(query, candidates, docs, context=FeatureContext(now_s=NOW))
    assert m.doc_ids == (1, 2)
    assert m.values.shape == (2, len(SCHEMA))
    a, b = m.row(DocId(1)), m.row(DocId(2))
    # terms: wing, slipstream; phrase: propel wash → 4 distinct query terms
    assert a["query_terms"] == 4 and b["query_terms"] == 4
    assert a["bm25"] == 8.0 and math.isnan(b["bm25"])
    assert a["bm25_ratio"] == 1.0 and math.isnan(b["bm25_ratio"])
    assert (a["bm25_title"], a["bm25_headings"], a["bm25_body"], a["bm25_anchors"]) == (3.0, 1.0, 6.0, 0.5)
    assert a["bm25_fields_ratio"] == 1.0 and b["bm25_fields_ratio"] == 0.0
    assert a["cosine"] == 0.6 and a["cosine_gap"] == pytest.approx(-0.2) and b["cosine_gap"] == 0.0
    assert (a["lexical_rank"], a["vector_rank"]) == (1.0, 2.0)
    assert math.isnan(b["lexical_rank"]) and b["vector_rank"] == 1.0
    assert a["rrf"] == pytest.approx(1 / 61 + 1 / 62) and b["rrf"] == pytest.approx(1 / 61)
    # title "wing slipstream" (2 of 4 terms), headings "slipstream effect", anchors "wing studi"
    assert a["coverage_title"] == 0.5
    assert a["coverage_headings"] == 0.25
    assert a["coverage_anchors"] == 0.25
    assert a["coverage_body"] == 1.0  # wing, propel, wash, slipstream all in the body
    assert b["coverage_body"] == 0.0 and b["coverage_title"] == 0.0
    assert a["phrase_match"] == 1.0 and b["phrase_match"] == 0.0
    # query bigrams: (wing, slipstream), (slipstream, propel), (propel, wash);
    # title+body has "wing slipstream" (title) and "propel wash"
    assert a["bigram_match"] == pytest.approx(2 / 3)
    # title+body tokens: wing slipstream | wing test propel wash behind engin slipstream grew
    assert (a["min_window"], a["window_density"]) == (5.0, 4 / 5)  # wing test propel wash behind engin slip…
    assert math.isnan(b["min_window"]) and math.isnan(b["window_density"])
    assert a["title_match_ratio"] == 1.0 and b["title_match_ratio"] == 0.0
    assert a["doc_words"] == 15 and b["doc_words"] == 6
    assert a["title_words"] == 2 and b["title_words"] == 1
    assert (a["url_depth"], b["url_depth"]) == (3.0, 0.0)
    assert (a["pagerank"], b["pagerank"]) == (2.5, 1.0)  # no link data (0) reads as the average page
    assert a["age_days"] == pytest.approx(10.0) and b["age_days"] == pytest.approx(2.0)
    assert (a["lang_match"], b["lang_match"]) == (1.0, 0.0)
    assert (a["dup_cluster_size"], b["dup_cluster_size"]) == (3.0, 1.0)


def test_missing_document_keeps_retrieval_features_only() -> None:
    query, candidates, docs = _example()
    m = compute_features(query, candidates, {DocId(1): docs[DocId(1)]}, context=FeatureContext(now_s=None))
    b = m.row(DocId(2))
    assert b["vector_rank"] == 1.0 and b["query_terms"] == 4.0
    assert all(math.isnan(b[n]) for n in ("coverage_body", "doc_words", "pagerank", "prf_top5"))
    assert math.isnan(m.row(DocId(1))["age_days"])  # no clock, no age


def test_no_candidates_gives_an_empty_matrix() -> None:
    m = compute_features(parse_query("wing"), [], {})
    assert m.doc_ids == () and m.values.shape == (0, len(SCHEMA))


@pytest.mark.parametrize(
    "text",
    [
        "The Flows of Air can't stop",
        "it's 3D-printed: 1000s of wings'' rock'n'roll _under_score",
        "a" * 70 + " long tokens are dropped x" * 3,
        "Café naïve façade — Ünïcödé goes the slow path",
        "THE AND OF to be or NOT",
        "",
    ],
)
def test_fast_analyze_equals_analyze(text: str) -> None:
    assert fast_analyze(text) == analyze(text)


def test_fast_analyze_equals_analyze_on_random_ascii() -> None:
    rng = random.Random(5)
    alphabet = "abcdefghij KLM'’-_.,0129\n\t"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        assert fast_analyze(text) == analyze(text), text


def _slow_min_window(tokens: list[str], wanted: frozenset[str]) -> tuple[int, int]:
    present = {t for t in tokens if t in wanted}
    if not present:
        return 0, 0
    best = len(tokens)
    for i in range(len(tokens)):
        for j in range(i, len(tokens)):
            if present <= set(tokens[i : j + 1]):
                best = min(best, j - i + 1)
                break
    return best, len(present)


def test_min_window_matches_a_brute_force_reference() -> None:
    rng = random.Random(1)
    for _ in range(300):
        tokens = [rng.choice("abcdefg") for _ in range(rng.randrange(0, 25))]
        wanted = frozenset(rng.sample("abcxyz", 3))
        assert min_window(tokens, wanted) == _slow_min_window(tokens, wanted)


def test_prf_similarity_prefers_documents_like_the_top_ones() -> None:
    texts = [
        ["wing", "lift", "flow"],
        ["wing", "lift", "drag"],
        ["wing", "lift", "flow", "drag"],
        ["bread", "dough"],
        None,
    ]
    first_stage = np.array([0.9, 0.8, 0.1, 0.05, 0.5])
    (top2,) = prf_similarity(texts, first_stage, tops=[2])
    # doc 2 shares everything with the top two; doc 3 nothing; doc 4 has no text.
    assert top2[2] > 0.5 > top2[3] == 0.0
    assert math.isnan(top2[4])
    # leave-one-out: doc 0 is compared with doc 1 only (and the other way round), symmetric.
    assert top2[0] == pytest.approx(top2[1])


@pytest.mark.parametrize(
    ("url", "depth"),
    [
        ("https://a.org", 0),
        ("https://a.org/", 0),
        ("https://a.org/x/y.html?q=1#f", 2),
        ("https://a.org/x/", 1),
        ("beir://cisi/12", 1),
    ],
)
def test_url_depth(url: str, depth: int) -> None:
    assert url_depth(url) == depth


def test_schema_is_fixed_and_indexed() -> None:
    assert len(SCHEMA) == len(set(SCHEMA)) == len(INDEX)
    assert SCHEMA[:2] == ("bm25", "bm25_ratio") and SCHEMA[-1] == "dense_prf_top5"


def _slow_prf(texts: list[list[str] | None], first_stage: np.ndarray, top: int) -> list[float]:
    """The definition, written plainly: tf-idf over the candidates, leave-one-out centroid."""
    live = [i for i, t in enumerate(texts) if t is not None]
    df: dict[str, int] = {}
    for i in live:
        for t in set(texts[i] or ()):
            df[t] = df.get(t, 0) + 1
    vectors: dict[int, dict[str, float]] = {}
    for i in live:
        tokens = texts[i] or []
        w = {t: (1 + math.log(tokens.count(t))) * math.log(1 + len(live) / df[t]) for t in set(tokens)}
        norm = math.sqrt(sum(v * v for v in w.values())) or 1.0
        vectors[i] = {t: v / norm for t, v in w.items()}
    order = sorted(live, key=lambda i: (-(first_stage[i] if not math.isnan(first_stage[i]) else -1.0), i))
    chosen = order[:top]
    out = []
    for i in range(len(texts)):
        if i not in vectors:
            out.append(math.nan)
            continue
        others = [j for j in chosen if j != i]
        dots = [sum(w * vectors[j].get(t, 0.0) for t, w in vectors[i].items()) for j in others]
        out.append(sum(dots) / len(others) if others else 0.0)
    return out


def test_prf_similarity_matches_its_plain_definition() -> None:
    rng = random.Random(2)
    for _ in range(30):
        n = rng.randrange(0, 30)
        texts: list[list[str] | None] = [
            None if rng.random() < 0.1 else [rng.choice("abcdefghijkl") for _ in range(rng.randrange(0, 12))]
            for _ in range(n)
        ]
        first_stage = np.array([math.nan if rng.random() < 0.2 else rng.random() for _ in range(n)])
        got = prf_similarity(texts, first_stage, tops=(1, 3, 10))
        _assert_defined_as(got, (1, 3, 10), _slow_prf, texts, first_stage, tol=1e-9, atol=1e-12)


def _assert_defined_as(
    got: list[np.ndarray],
    tops: tuple[int, ...],
    slow: Any,
    inputs: list[Any],
    first_stage: np.ndarray,
    *,
    tol: float,
    atol: float,
) -> None:
    """Each depth's column equals the plain definition, or NaN everywhere with under two inputs."""
    enough = sum(x is not None for x in inputs) >= 2
    for top, column in zip(tops, got, strict=True):
        want = slow(inputs, first_stage, top) if enough else [math.nan] * len(inputs)
        np.testing.assert_allclose(column, want, rtol=tol, atol=atol, equal_nan=True)


def _slow_dense_prf(vectors: list[np.ndarray | None], first_stage: np.ndarray, top: int) -> list[float]:
    """The definition, written plainly: mean cosine to the other top documents' vectors."""
    live = [i for i, v in enumerate(vectors) if v is not None]
    order = sorted(live, key=lambda i: (-(first_stage[i] if not math.isnan(first_stage[i]) else -1.0), i))
    chosen = order[:top]
    out = []
    for i, v in enumerate(vectors):
        if v is None:
            out.append(math.nan)
            continue
        others = [j for j in chosen if j != i]
        dots = [float(np.dot(v.astype(np.float64), vectors[j].astype(np.float64))) for j in others]  # type: ignore[union-attr]
        out.append(sum(dots) / len(others) if others else 0.0)
    return out


def _unit(rng: np.random.Generator, dim: int = 8) -> np.ndarray:
    v = rng.normal(size=dim).astype(np.float32)
    return v / np.linalg.norm(v)


def test_dense_prf_matches_its_plain_definition() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(0, 30))
        vectors = [None if rng.random() < 0.15 else _unit(rng) for _ in range(n)]
        first_stage = np.array([math.nan if rng.random() < 0.2 else rng.random() for _ in range(n)])
        got = dense_prf(vectors, first_stage, tops=(1, 3, 5))
        _assert_defined_as(got, (1, 3, 5), _slow_dense_prf, vectors, first_stage, tol=1e-5, atol=1e-6)


def test_dense_prf_ranks_the_off_topic_candidate_last() -> None:
    """Four candidates about one thing and one about another: the odd one agrees least,
    and a candidate's value does not change with the others it is computed beside."""
    rng = np.random.default_rng(0)
    topic, other = _unit(rng, 16), _unit(rng, 16)
    near = [(topic + 0.2 * _unit(rng, 16)) for _ in range(4)]
    vectors: list[np.ndarray | None] = [*(v / np.linalg.norm(v) for v in near), other]
    first_stage = np.array([0.9, 0.8, 0.7, 0.6, 0.95])  # the odd one is the first-stage best
    (column,) = dense_prf(vectors, first_stage, tops=(5,))
    assert int(np.argmin(column)) == 4
    assert column[:4].min() > 0.5 > column[4]
    (again,) = dense_prf([*vectors, _unit(rng, 16)], np.append(first_stage, 0.1), tops=(5,))
    assert again[:5].tolist() == column.tolist()  # the extra candidate is not in the top 5


def test_candidates_vectors_feed_the_dense_prf_column() -> None:
    query, candidates, docs = _example()
    rng = np.random.default_rng(1)
    a, b = _unit(rng), _unit(rng)
    with_vectors = [
        Candidate(
            c.doc_id, c.shard_id, c.bm25, c.cosine, c.lexical_rank, c.vector_rank, c.field_bm25, doc_vector=v
        )
        for c, v in zip(candidates, (a, b), strict=True)
    ]
    m = compute_features(query, with_vectors, docs, context=FeatureContext(now_s=NOW))
    assert m.row(DocId(1))["dense_prf_top5"] == pytest.approx(float(np.dot(a, b)), rel=1e-6)
    assert m.row(DocId(2))["dense_prf_top5"] == pytest.approx(float(np.dot(a, b)), rel=1e-6)
    plain = compute_features(query, candidates, docs, context=FeatureContext(now_s=NOW))
    assert math.isnan(plain.row(DocId(1))["dense_prf_top5"])  # no vectors: missing, not zero
