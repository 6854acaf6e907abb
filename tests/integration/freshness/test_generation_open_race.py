"""An update committed while a ``GenerationSet`` opens its shards reaches the next search."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.settings import SearchSettings
from retrieval.index.generation import Generation, GenerationSet
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.integration.freshness.crawled import crawled_index


def test_an_update_landing_while_the_shards_open_is_not_missed(eval_dir: Path, tmp_path: Path) -> None:
    crawled = crawled_index(eval_dir, tmp_path, docs=100, shards=2)
    index, docs, store, indexer = crawled.index, crawled.docs, crawled.store, crawled.indexer
    changed = [dataclasses.replace(d, body=f"{d.body} zebraquasar", fetched_at=200.0) for d in docs[:2]]
    store.append(changed)
    settings = SearchSettings(cache_entries=0, use_vectors=False)
    opened: list[Generation] = []

    def open_then_update(path: Path) -> Generation:
        """The shards' searchers are taken here; the indexer commits right after, before the
        set has noted which update it opened at."""
        generation = Generation.open(path, settings)
        if not opened:
            report = indexer.step()
            assert report is not None and report.indexed == 2
        opened.append(generation)
        return generation

    service = SearchService(GenerationSet(index, open_then_update), settings)
    assert service.generations.current is opened[0]
    found = {int(h.doc_id) for h in service.search(SearchRequest("zebraquasar", size=10)).hits}
    assert found == {int(d.doc_id) for d in changed}
    assert len(opened) == 2  # reopened once, for the update it had not seen
