"""Every file of a generation carries its size and hash, and the records stay true as writers
change files in place: a build, the embeddings backfill, incremental steps (new Tantivy
segments, the forward index's stale set, the HNSW file saved again), compaction. A real
crawl directory, index root and MiniLM embedder; the background check of a serving
process runs meanwhile and finds nothing, then finds a file garbled behind its back."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal
from core.docstore import DocStore
from core.errors import IndexDamaged
from core.settings import EmbedSettings, SearchSettings
from core.types import Document, doc_id_for
from retrieval.index import layout
from retrieval.index.checksums import from_json
from retrieval.index.incremental import IncrementalIndexer, follow
from retrieval.index.integrity import check_generation, live_segments, vector_index_dir
from retrieval.index.root import IndexRoot
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from retrieval.vectors.hnsw import VectorShard

SHARDS = 2
UNRECORDED = {
    "manifest.json",  # holds the generation's record (and a vector index's)
    "trawl-lexical.json",  # holds the shard's record
    "meta.json",  # Tantivy's own, rewritten by every commit and parsed at open
    ".managed.json",
    ".tantivy-meta.lock",
    ".tantivy-writer.lock",
    "lengths.sqlite",  # writers only; SQLite's quick_check at publish and verify
    "incremental.json",  # state rewritten as writers go
    "updated",
    "CURRENT",
    "passages.npy",
}


def _docs(n: int, at: float = 100.0) -> list[Document]:
    out = []
    for i in range(n):
        url = f"http://site.test/r/{i}"
        body = f"Wind tunnel report {i} on the wing: pressure measured at station {i % 7} of {n}."
        out.append(Document(doc_id=doc_id_for(url), url=url, title=f"Report {i}", body=body, fetched_at=at))
    return out


def _unrecorded(gen_dir: Path) -> set[str]:
    """Names of the generation's files that no record covers."""
    recorded = {
        gen_dir / n
        for n in from_json(json.loads(layout.manifest_file(gen_dir).read_text())["checksums"]["files"])
    }
    for shard in range(SHARDS):
        lexical = layout.lexical_dir(gen_dir, shard)
        recorded |= {
            lexical / n for n in from_json(json.loads(layout.lexical_manifest(lexical).read_text())["files"])
        }
        vectors = vector_index_dir(gen_dir, shard)
        if vectors is not None:
            recorded |= {
                vectors / n for n in from_json(json.loads(layout.manifest_file(vectors).read_text())["files"])
            }
    return {p.name for p in gen_dir.rglob("*") if p.is_file() and p not in recorded}


def _segment_files(gen_dir: Path, shard: int) -> set[str]:
    lexical = layout.lexical_dir(gen_dir, shard)
    live = live_segments(lexical) or set()
    return {p.name for p in lexical.iterdir() if p.name[:32] in live}


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def test_records_cover_every_file_and_stay_true_through_updates(tmp_path: Path, embedder: Embedder) -> None:
    data, root = tmp_path / "crawl", IndexRoot(tmp_path / "index")
    store = DocStore(CrawlDir(data).docs)
    docs = _docs(40)
    store.append(docs)
    indexer = IncrementalIndexer(data, root.root, shards=SHARDS, embedder=embedder)
    first = indexer.compact()
    gen = root.path_of(first)
    backfill_index(gen, embedder, EmbedSettings())
    assert check_generation(gen, content=True, writer_files=True) == []
    assert _unrecorded(gen) <= UNRECORDED

    service = SearchService.open(
        root.root,
        SearchSettings(verify_interval_s=0.01, spelling=False),
        encoder=embedder.encode_query,
        encoder_model=embedder.model_id,
    )
    watch = service.watch_files()
    stop = threading.Event()

    def search_meanwhile() -> None:  # reopens the generation after each step, as serving does
        while not stop.is_set():
            service.search(SearchRequest("wing pressure", ranker="hybrid", spell=False))

    searcher = threading.Thread(target=search_meanwhile)
    searcher.start()
    try:
        segments_before = _segment_files(gen, 0) | _segment_files(gen, 1)
        for step in range(4):
            changed = [
                dataclasses.replace(d, body=d.body + f" revised {step}", fetched_at=200.0 + step)
                for d in docs[step::5]
            ]
            url = f"http://site.test/new/{step}"
            added = Document(
                doc_id=doc_id_for(url), url=url, title="New", body="A new wing report.", fetched_at=300.0
            )
            store.append([*changed, added])
            DeletionLog(CrawlDir(data).deletions).record(
                [Removal(docs[20 + step].doc_id, docs[20 + step].url, "http 404", 400.0 + step)]
            )
            report = indexer.step()
            assert report is not None and report.indexed > 0
            assert watch.wait_checks(watch.checks + 2, timeout_s=120)
        stop.set()
        searcher.join(timeout=120)
        # The records followed every step: new segments and the stale set recorded, nothing differs.
        assert (_segment_files(gen, 0) | _segment_files(gen, 1)) - segments_before
        assert check_generation(gen, content=True, writer_files=True) == []
        assert _unrecorded(gen) <= UNRECORDED
        assert service.problems() == []  # the background check raced every step and found nothing

        # A segment file written by a step, garbled behind the service's back, is found.
        fresh = sorted(_segment_files(gen, 1) - segments_before)
        target = layout.lexical_dir(gen, 1) / next(n for n in fresh if n.endswith(".idx"))
        raw = bytearray(target.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        target.write_bytes(bytes(raw))
        checks = watch.checks
        assert watch.wait_checks(checks + 2, timeout_s=120)
        assert any(p.startswith(f"shard 1 lexical: {target}") for p in service.problems()), service.problems()
        response = service.search(SearchRequest("wing pressure station", ranker="bm25", spell=False))
        assert response.partial and response.missing_shards == (1,)
    finally:
        stop.set()
        searcher.join(timeout=120)
        service.close()

    # A step never builds on the damage (a merge would record it afresh): following the crawl,
    # the indexer compacts the docstore into a new generation instead, verified at publish.
    url = "http://site.test/after-damage"
    store.append([Document(doc_id=doc_id_for(url), url=url, title="Late", body="After.", fetched_at=500.0)])
    with pytest.raises(IndexDamaged, match=str(target)):
        indexer.step()
    stop = threading.Event()
    follower = threading.Thread(target=follow, args=(indexer, stop), kwargs={"poll_s": 0.05})
    follower.start()
    try:
        deadline = time.monotonic() + 300
        while root.current() == first and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        follower.join(timeout=300)
    assert root.current() != first
    assert check_generation(root.path_of(root.current() or ""), content=True) == []


def test_hnswlib_never_reads_a_garbled_vector_file(tmp_path: Path, embedder: Embedder) -> None:
    root = IndexRoot(tmp_path / "index")
    gen = root.path_of(root.build(_docs(20), shards=1))
    backfill_index(gen, embedder, EmbedSettings())
    index = vector_index_dir(gen, 0)
    assert index is not None
    assert VectorShard.load(index).num_docs == 20
    hnsw = layout.hnsw_file(index)
    raw = bytearray(hnsw.read_bytes())
    for i in range(len(raw) // 3, len(raw) // 3 + 4096):
        raw[i] = 0xFF
    hnsw.write_bytes(bytes(raw))
    with pytest.raises(IndexDamaged, match="hnsw.bin: content differs"):
        VectorShard.load(index)
    # The backfill builds a damaged index again from the stored vectors (nothing re-encoded).
    report = backfill_index(gen, embedder, EmbedSettings())
    assert report.encoded == 0 and VectorShard.load(index).num_docs == 20
    assert check_generation(gen, content=True) == []
