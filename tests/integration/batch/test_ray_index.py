"""Index build on Ray: the local build's shards (same top-100), published only when every shard succeeded."""

from __future__ import annotations

import itertools
import json
from functools import partial
from pathlib import Path
from types import ModuleType

import pytest

from cli.engine import beir_documents
from core.settings import SearchSettings
from core.types import Document
from retrieval.batch.ray_jobs import ray_build_generation, ray_build_index
from retrieval.index.build import build_index
from retrieval.index.integrity import check_generation, is_checksummed
from retrieval.index.root import IndexRoot
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from training.datasets import BeirDataset

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # two cranfield builds and 40 queries at depth 100


def test_ray_shards_rank_like_local_shards(tmp_path: Path, eval_dir: Path, ray_local: ModuleType) -> None:
    cranfield = eval_dir / "cranfield"
    build_index(BeirDataset.open(cranfield).iter_documents(), tmp_path / "local", shards=2)
    manifest, nodes = ray_build_index(partial(beir_documents, cranfield), tmp_path / "ray", shards=2)
    assert manifest.docs == 1400 and len(nodes) == 2
    settings = SearchSettings(max_page_size=100, spelling=False)
    local = SearchService.open(tmp_path / "local", settings)
    ray = SearchService.open(tmp_path / "ray", settings)
    queries = list(itertools.islice(BeirDataset.open(cranfield).judged_queries().values(), 40))
    for query in queries:
        a = local.search(SearchRequest(query, size=100, ranker="bm25"))
        b = ray.search(SearchRequest(query, size=100, ranker="bm25"))
        assert [h.doc_id for h in b.hits] == [h.doc_id for h in a.hits]
        assert [h.score for h in b.hits] == pytest.approx([h.score for h in a.hits], rel=1e-6)
    vocabulary = (tmp_path / "local" / "vocabulary.tsv").read_text().splitlines()[1:]
    assert (tmp_path / "ray" / "vocabulary.tsv").read_text().splitlines()[1:] == vocabulary
    # Each shard task records its files as it commits them: the generation verifies in full.
    assert is_checksummed(tmp_path / "ray") and check_generation(tmp_path / "ray", content=True) == []
    recorded = json.loads((tmp_path / "ray" / "shard-0001" / "lexical" / "trawl-lexical.json").read_text())
    assert "trawl-forward/pagerank.npy" in recorded["files"]


def failing_source(docs: list[Document]) -> list[Document]:
    """Documents whose iteration fails in the shard task that meets the poisoned one."""
    for doc in docs:
        if doc.url.endswith("/poison"):
            raise RuntimeError("shard task failed")
    return docs


def test_failed_shard_publishes_nothing(tmp_path: Path, eval_dir: Path, ray_local: ModuleType) -> None:
    docs = list(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 50))
    root = IndexRoot(tmp_path / "root")
    good = ray_build_generation(root, partial(list, docs), shards=2)
    root.publish(good)
    poisoned = [*docs, Document(doc_id=docs[0].doc_id, url="https://x.invalid/poison", title="p", body="p")]
    with pytest.raises(Exception, match="shard task failed"):
        ray_build_generation(root, partial(failing_source, poisoned), shards=2)
    assert [g.generation for g in root.list()] == [good]
    assert root.current() == good
    assert not [p for p in root.generations_dir.iterdir() if p.name != good]
    assert not list((tmp_path / "root").glob("generations/.*"))
