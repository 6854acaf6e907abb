"""Shards served by their own processes (`trawl shard serve`) answer from in-place updates."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal
from core.docstore import DocStore
from core.settings import SearchSettings
from retrieval.incremental import IncrementalIndexer
from retrieval.search import SearchService
from retrieval.shard_http import connect_shards
from tests.integration.serving.test_shard_processes import ShardProcess
from training.datasets import BeirDataset


def test_shard_processes_pick_up_an_update_batch(eval_dir: Path, tmp_path: Path) -> None:
    data, index = tmp_path / "crawl", tmp_path / "index"
    docs = [
        dataclasses.replace(d, fetched_at=100.0)
        for d in itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 200)
    ]
    store = DocStore(CrawlDir(data).docs)
    store.append(docs)
    indexer = IncrementalIndexer(data, index, shards=2)
    indexer.compact()

    procs = [ShardProcess(index, 0), ShardProcess(index, 1)]
    try:
        config = SearchSettings(cache_entries=0, use_vectors=False)
        remote = SearchService.open(index, config, remote=connect_shards(",".join(p.url for p in procs)))
        deleted = docs[7]
        deleted_words = " ".join(deleted.title.split()[:4])
        assert int(deleted.doc_id) in {int(h.doc_id) for h in remote.search(deleted_words, size=50).hits}
        assert not remote.search("zebraquasar", size=10).hits
        before = remote.num_docs

        changed = [dataclasses.replace(d, body=f"{d.body} zebraquasar", fetched_at=200.0) for d in docs[:3]]
        store.append(changed)
        removal = Removal(deleted.doc_id, deleted.url, "http 404", 300.0)
        DeletionLog(CrawlDir(data).deletions).record([removal])
        report = indexer.step()
        assert report is not None and report.indexed == 3 and report.removed == 1

        found = {int(h.doc_id) for h in remote.search("zebraquasar", size=10).hits}
        assert found == {int(d.doc_id) for d in changed}
        assert int(deleted.doc_id) not in {int(h.doc_id) for h in remote.search(deleted_words, size=50).hits}
        assert remote.num_docs == before - 1
        local = SearchService.open(index, config)
        for query in ("zebraquasar", deleted_words, "boundary layer"):
            assert [h.doc_id for h in remote.search(query, size=20).hits] == [
                h.doc_id for h in local.search(query, size=20).hits
            ]
    finally:
        for p in procs:
            p.stop()
