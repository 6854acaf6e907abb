"""Incremental steps keep a generation's vectors current: new passages embedded, removed ones gone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal
from core.docstore import DocStore
from core.settings import EmbedSettings
from core.types import Document, doc_id_for
from retrieval.index.generation import open_vectors
from retrieval.index.incremental import Cursor, IncrementalIndexer
from retrieval.index.layout import vector_store_dir
from retrieval.index.root import IndexRoot
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from retrieval.vectors.store import VectorStore

TOPICS = ("wing", "shock", "nozzle", "plate", "jet", "flutter", "heat", "cone", "slot", "panel")
SHARDS = 2


def _docs(n: int) -> list[Document]:
    out = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        url = f"http://site.test/r/{i}"
        body = f"Wind tunnel report {i} on the {topic}: measurements of the {topic} at station {i % 7}."
        out.append(
            Document(doc_id=doc_id_for(url), url=url, title=f"Report {i}", body=body, fetched_at=100.0)
        )
    return out


def _page(url: str, title: str, body: str, at: float) -> Document:
    return Document(doc_id=doc_id_for(url), url=url, title=title, body=body, fetched_at=at)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def _dense(service: SearchService, query: str) -> list[str]:
    return [h.url for h in service.search(SearchRequest(query, size=5, ranker="dense", spell=False)).hits]


def _held(root: Path) -> dict[int, int]:
    """Document → live passage rows over every shard of the serving generation."""
    path = IndexRoot(root).path_of(IndexRoot(root).current() or "")
    held: dict[int, int] = {}
    for shard in range(SHARDS):
        vectors = open_vectors(path, shard)
        assert vectors is not None
        held.update({int(d): len(vectors._doc_rows[int(d)]) for d in vectors.doc_ids()})
    return held


def test_a_step_embeds_new_passages_and_drops_removed_documents(tmp_path: Path, embedder: Embedder) -> None:
    data, root = tmp_path / "crawl", tmp_path / "index"
    docs = _docs(30)
    store = DocStore(CrawlDir(data).docs)
    store.append(docs)
    indexer = IncrementalIndexer(data, root, shards=SHARDS, embedder=embedder)
    indexer.compact()
    backfill_index(IndexRoot(root).path_of(IndexRoot(root).current() or ""), embedder, EmbedSettings())
    vectors = VectorStore(vector_store_dir(root, embedder.model_id), embedder.model_id)
    before = len(vectors)
    service = SearchService.open(root, encoder=embedder.encode_query, encoder_model=embedder.model_id)
    bread = "http://site.test/bakery"
    assert bread not in _dense(service, "baking sourdough bread with rye flour")

    added = _page(
        bread, "Bakery", "How to bake a sourdough loaf of rye bread: flour, water, starter, oven.", 200.0
    )
    changed = dataclasses.replace(
        docs[3], body="A guide to growing tomatoes and basil in a small garden.", fetched_at=200.0
    )
    store.append([added, changed])
    DeletionLog(CrawlDir(data).deletions).record([Removal(docs[5].doc_id, docs[5].url, "http 404", 300.0)])
    report = indexer.step()
    assert report is not None and report.indexed == 2 and report.removed == 1

    held = _held(root)
    assert int(added.doc_id) in held and int(changed.doc_id) in held
    assert int(docs[5].doc_id) not in held
    assert len(held) == 30  # 30 - 1 removed + 1 new; the changed page is held once
    new_passages = len(embedder.passages(added.title, added.body)) + len(
        embedder.passages(changed.title, changed.body)
    )
    vectors = VectorStore(vector_store_dir(root, embedder.model_id), embedder.model_id)
    assert len(vectors) == before + new_passages  # only the new text was encoded

    service.generations.refresh()
    assert _dense(service, "baking sourdough bread with rye flour")[0] == bread
    assert _dense(service, "growing tomatoes and basil in a garden")[0] == changed.url
    assert docs[5].url not in _dense(service, f"measurements of the {TOPICS[5]} at station 5")

    # Replaying the step (the cursor lost in a crash) holds nothing twice and encodes nothing.
    generation = IndexRoot(root).path_of(IndexRoot(root).current() or "")
    Cursor(docs={"": 1}, removals={}).write(generation)
    replay = indexer.step()
    assert replay is not None and replay.indexed == 2
    assert _held(root) == held
    assert len(VectorStore(vector_store_dir(root, embedder.model_id), embedder.model_id)) == len(vectors)

    # Compaction keeps vectors (linked from the store) and serves the same dense results.
    queries = ["baking sourdough bread with rye flour", "growing tomatoes and basil in a garden", "nozzle"]
    incremental = {q: _dense(service, q) for q in queries}
    indexer.compact()
    assert _held(root) == held
    assert len(VectorStore(vector_store_dir(root, embedder.model_id), embedder.model_id)) == len(vectors)
    service.generations.refresh()
    assert {q: _dense(service, q) for q in queries} == incremental
