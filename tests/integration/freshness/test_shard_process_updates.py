"""Shards served by their own processes (`trawl shard serve`) answer from in-place updates."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal
from core.settings import SearchSettings
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.remote.shard_http import connect_shards
from tests.integration.freshness.crawled import crawled_index
from tests.integration.serving.test_shard_processes import ShardProcess


def test_shard_processes_pick_up_an_update_batch(eval_dir: Path, tmp_path: Path) -> None:
    crawled = crawled_index(eval_dir, tmp_path, docs=200, shards=2)
    data, index, docs = crawled.data, crawled.index, crawled.docs
    store, indexer = crawled.store, crawled.indexer

    procs = [ShardProcess(index, 0), ShardProcess(index, 1)]
    try:
        config = SearchSettings(cache_entries=0, use_vectors=False)
        remote = SearchService.open(index, config, remote=connect_shards(",".join(p.url for p in procs)))
        deleted = docs[7]
        deleted_words = " ".join(deleted.title.split()[:4])
        assert int(deleted.doc_id) in {
            int(h.doc_id) for h in remote.search(SearchRequest(deleted_words, size=50)).hits
        }
        assert not remote.search(SearchRequest("zebraquasar", size=10)).hits
        before = remote.num_docs

        changed = [dataclasses.replace(d, body=f"{d.body} zebraquasar", fetched_at=200.0) for d in docs[:3]]
        store.append(changed)
        removal = Removal(deleted.doc_id, deleted.url, "http 404", 300.0)
        DeletionLog(CrawlDir(data).deletions).record([removal])
        report = indexer.step()
        assert report is not None and report.indexed == 3 and report.removed == 1

        found = {int(h.doc_id) for h in remote.search(SearchRequest("zebraquasar", size=10)).hits}
        assert found == {int(d.doc_id) for d in changed}
        assert int(deleted.doc_id) not in {
            int(h.doc_id) for h in remote.search(SearchRequest(deleted_words, size=50)).hits
        }
        assert remote.num_docs == before - 1
        local = SearchService.open(index, config)
        for query in ("zebraquasar", deleted_words, "boundary layer"):
            assert [h.doc_id for h in remote.search(SearchRequest(query, size=20)).hits] == [
                h.doc_id for h in local.search(SearchRequest(query, size=20)).hits
            ]
    finally:
        for p in procs:
            p.stop()
