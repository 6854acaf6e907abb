"""A service started on a lexical-only generation gets its query encoder when a generation
with vectors is published later (the demo's background backfill, a later `trawl embed`),
without a restart: the learned ranker (which needs vectors) becomes the default, and
convex fusion where no LTR model is loaded."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from core.settings import SearchSettings, Settings
from rerank.ltr import LtrStage
from rerank.pipeline import open_search_service
from retrieval.index.root import IndexRoot
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.vectors.backfill import backfill_new_generation
from retrieval.vectors.embed import Embedder
from tests.unit.rerank.test_ltr import tiny_model
from training.datasets import BeirDataset


def test_the_default_falls_back_to_bm25_without_vectors_and_says_why(eval_dir: Path, tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    docs = list(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 40))
    root.publish(root.build(docs, shards=1))
    model = tiny_model()
    cases = [
        ({}, True, "bm25", "no vectors"),  # LTR needs vectors; this generation has none
        ({}, False, "ltr", "held-out nDCG@10"),
        ({"default_ranker": "bm25"}, False, "bm25", "configured"),
    ]
    for overrides, needs_vector, ranker, why in cases:
        stages = {"ltr": LtrStage(model, needs_vector=needs_vector)}
        service = SearchService.open(root.root, SearchSettings(**overrides), stages=stages)
        try:
            assert service.default_ranker(service.generation) == ranker
            assert why in service.default_reason(service.generation)
            assert service.search(SearchRequest("boundary layer heat transfer")).ranker == ranker
        finally:
            service.close()


@pytest.mark.slow
def test_publishing_vectors_attaches_the_encoder_on_switch(eval_dir: Path, tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    docs = list(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 40))
    root.publish(root.build(docs, shards=1))
    settings = Settings.model_validate({"embed": {"onnx_cache_dir": str(tmp_path.parent / "onnx-cache")}})
    service = open_search_service(settings, root.root)
    try:
        first = service.generation.id
        assert service.encoder is None
        assert service.default_ranker(service.generation) == "bm25"
        assert "hybrid" not in service.ranker_names()

        embedder = Embedder.from_settings(settings.embed)
        generation, _report = backfill_new_generation(root.root, embedder, settings.embed)

        response = service.search(SearchRequest("boundary layer heat transfer"))
        assert service.generation.id == generation != first
        assert service.encoder is not None
        assert service.encoder_model == service.generation.vector_model == embedder.model_id
        # The packaged LTR model is loaded and the generation now has vectors: LTR is the default.
        assert service.default_ranker(service.generation) == "ltr"
        assert response.ranker == "ltr"
        assert response.hits
        plain = SearchService.open(
            root.root, settings.search, encoder=service.encoder, encoder_model=service.encoder_model
        )
        try:
            assert plain.default_ranker(plain.generation) == "hybrid"
            assert "no LTR model" in plain.default_reason(plain.generation)
            assert plain.search(SearchRequest("boundary layer heat transfer")).ranker == "hybrid"
        finally:
            plain.close()
    finally:
        service.close()
