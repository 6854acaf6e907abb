"""A service started on a lexical-only generation gets its query encoder when a generation
with vectors is published later (the demo's background backfill, a later `trawl embed`),
without a restart: hybrid becomes the default and answers with the vector branch."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from core.settings import Settings
from rerank.pipeline import open_search_service
from retrieval.backfill import backfill_new_generation
from retrieval.embed import Embedder
from retrieval.manifest import IndexRoot
from training.datasets import BeirDataset


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

        response = service.search("boundary layer heat transfer")
        assert service.generation.id == generation != first
        assert service.encoder is not None
        assert service.encoder_model == service.generation.vector_model == embedder.model_id
        assert service.default_ranker(service.generation) == "hybrid"
        assert response.ranker == "hybrid"
        assert response.hits
    finally:
        service.close()
