"""LTR over a shard updated in place: new and changed documents get features of their current text.

The forward index is written by a build, not by each in-place update batch; a document
updated since must not be scored from its old row (or crash the query when it has none).
The reference is the same ranking with every forward index hidden, so that all text
features come from the stored documents.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.settings import SearchSettings
from rerank.ltr import LtrStage
from retrieval.index.forward import read_stale
from retrieval.index.layout import forward_dir
from retrieval.index.lexical import LexicalShard
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.integration.freshness.crawled import crawled_index
from tests.unit.rerank.test_ltr import tiny_model

NOW = 1_750_000_000.0


def lexical_shards(service: SearchService) -> list[LexicalShard]:
    return [replicas[0].lexical for replicas in service.generation.broker.shards]


def ranked(service: SearchService, query: str) -> list[tuple[int, float]]:
    return [
        (int(h.doc_id), round(h.score, 9))
        for h in service.search(SearchRequest(query, ranker="ltr", size=20)).hits
    ]


def test_ltr_scores_updated_documents_from_their_current_text(eval_dir: Path, tmp_path: Path) -> None:
    crawled = crawled_index(eval_dir, tmp_path, docs=120, shards=1)
    index, docs, store, indexer = crawled.index, crawled.docs, crawled.store, crawled.indexer
    config = SearchSettings(cache_entries=0, use_vectors=False)

    def open_service() -> SearchService:
        stage = LtrStage(tiny_model(), needs_vector=False, clock=lambda: NOW)
        return SearchService.open(index, config, stages={"ltr": stage})

    service = open_service()
    (shard,) = lexical_shards(service)
    assert shard.forward is not None and len(read_stale(forward_dir(shard.path))) == 0

    # Changed documents whose new words are the query, and one brand-new document.
    changed = [
        dataclasses.replace(d, body=f"{d.body} zebraquasar zebraquasar", fetched_at=200.0) for d in docs[:3]
    ]
    added = dataclasses.replace(
        docs[3], doc_id=docs[3].doc_id + 10_000_000, url=docs[3].url + "?new", title="zebraquasar wing"
    )
    store.append([*changed, added])
    report = indexer.step()
    assert report is not None and report.indexed == 4

    live = ranked(service, "zebraquasar")  # the running service picks the update up
    assert {d for d, _ in live} == {int(d.doc_id) for d in [*changed, added]}
    stale = read_stale(forward_dir(lexical_shards(service)[0].path))
    assert {int(d.doc_id) for d in [*changed, added]} <= set(stale.tolist())

    reference = open_service()
    for lexical in lexical_shards(reference):
        lexical.forward = None  # every text feature from the stored documents
    for query in ("zebraquasar", "zebraquasar wing", "boundary layer"):
        assert ranked(service, query) == ranked(reference, query)
