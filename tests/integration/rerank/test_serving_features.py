"""Serving on a real index: the logged feature rows equal the training pipeline's rows.

The service ranks with an ``ltr`` stage over a real Tantivy index on disk and logs
every query's scored rows; the training pipeline then rebuilds the same queries'
candidates and features from the index alone. Equal values (NaN in the same places)
mean no training/serving skew for these queries and documents.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from core.types import DocId
from rerank.feature_log import FeatureLogger, read_feature_log
from rerank.features import SCHEMA, FeatureContext
from rerank.ltr import LtrStage
from retrieval.index.build import build_index
from retrieval.index.layout import lexical_dir
from retrieval.index.lexical import LexicalShard
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.docs import SMALL_WEB
from tests.unit.rerank.test_ltr import tiny_model
from training.frames import Retrieval, build_frame, frame_from_logs

NOW = 1_750_000_000.0
QUERIES = ("list comprehension", "python functions sorted", '"generator expressions" lazy', "bread dough")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SearchService, FeatureLogger, Path]]:
    root = tmp_path_factory.mktemp("ltr-serving")
    index = root / "index"
    # Dates and PageRank make the static and freshness features non-trivial.
    docs = [
        dataclasses.replace(
            d, published_at=NOW - 86_400.0 * (i + 1), pagerank=0.5 + i, dup_cluster_size=1 + i % 2
        )
        for i, d in enumerate(SMALL_WEB)
    ]
    build_index(docs, index, shards=1)
    log = FeatureLogger(root / "features", sample_rate=1.0, rng=random.Random(0))
    stage = LtrStage(tiny_model(), needs_vector=False, feature_log=log, clock=lambda: NOW)
    service = SearchService.open(index, stages={"ltr": stage})
    try:
        yield service, log, index
    finally:
        service.close()


def test_logged_features_equal_training_features(served: tuple[SearchService, FeatureLogger, Path]) -> None:
    service, log, index = served
    for raw in QUERIES:
        response = service.search(SearchRequest(raw, ranker="ltr", size=10))
        assert response.ranker == "ltr" and response.hits
    assert log.flush() is not None
    logged = read_feature_log(log.directory)
    assert set(logged["query"].unique()) == set(QUERIES)
    assert set(logged["model_id"].unique()) == {tiny_model().model_id}
    assert set(logged["generation"].unique()) == {service.generation.id}

    lexical = LexicalShard(lexical_dir(index, 0))
    queries = {raw: service.parse(SearchRequest(raw)) for raw in QUERIES}
    frame = build_frame(
        "served",
        queries,
        Retrieval(lexical, None, {}),
        {},
        depth=10,
        context=FeatureContext(now_s=NOW),
    )
    for raw in QUERIES:
        online = logged.filter(pl.col("query") == raw).sort("doc_id")
        offline = frame.filter(pl.col("qid") == raw).sort("doc_id")
        assert online["doc_id"].to_list() == offline["doc_id"].to_list()
        assert online["now_s"].unique().to_list() == [NOW]
        a = online.select(SCHEMA).to_numpy()
        b = offline.select(SCHEMA).to_numpy()
        assert np.array_equal(a, b, equal_nan=True), raw
        assert not np.isnan(online["age_days"].to_numpy()).any()


def test_explain_is_served_with_contributions(served: tuple[SearchService, FeatureLogger, Path]) -> None:
    service, _, _ = served
    response = service.search(SearchRequest("list comprehension", ranker="ltr", explain=True))
    for hit in response.hits:
        assert hit.explain is not None
        info = hit.explain["ltr"]
        assert info["bias"] + sum(info["contributions"].values()) == pytest.approx(hit.score, abs=1e-9)
        assert hit.explain["field_bm25"]  # the fusion inputs ride along (from retrieval.query.service)


def test_training_frame_from_logs_and_judgments(served: tuple[SearchService, FeatureLogger, Path]) -> None:
    service, log, _ = served
    service.search(SearchRequest("bread dough", ranker="ltr", size=10))
    log.flush()
    bread = next(d for d in SMALL_WEB if "bread" in d.url)
    frame = frame_from_logs(
        log.directory, {"bread dough": {DocId(bread.doc_id): 2}, "unlogged": {DocId(1): 1}}
    )
    assert frame["qid"].n_unique() == 1  # only the judged, logged query; its latest impression
    assert frame.filter(pl.col("label") > 0)["doc_id"].to_list() == [bread.doc_id]
    assert frame.columns[:4] == ["dataset", "qid", "doc_id", "label"] and frame.columns[4:] == list(SCHEMA)
    latest = read_feature_log(log.directory).filter(pl.col("query") == "bread dough")
    assert frame.height == latest.filter(pl.col("logged_at") == pl.col("logged_at").max()).height
