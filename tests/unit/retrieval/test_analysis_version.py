"""An index records the text analysis it was built with; one built by another is named, not trusted."""

from __future__ import annotations

import json
from pathlib import Path

from core.settings import SearchSettings
from retrieval.index import layout
from retrieval.index.manifest import IndexManifest
from retrieval.index.root import IndexRoot
from retrieval.query.service import SearchService
from retrieval.text.tokenizer import ANALYSIS_VERSION
from tests.fixtures.docs import SMALL_WEB


def test_a_new_index_records_this_analysis_and_an_older_one_is_named(tmp_path: Path) -> None:
    index = IndexRoot(tmp_path / "index")
    generation = index.build(SMALL_WEB, shards=2)
    index.publish(generation)
    path = index.path_of(generation)
    assert IndexManifest.load(path).analysis == ANALYSIS_VERSION
    service = SearchService.open(index.root, SearchSettings())
    assert service.problems() == []
    service.close()

    # The same generation as an index from before the field existed (CJK runs as one word).
    raw = json.loads(layout.manifest_file(path).read_text())
    del raw["analysis"]
    layout.manifest_file(path).write_text(json.dumps(raw))
    assert IndexManifest.load(path).analysis == 1
    service = SearchService.open(index.root, SearchSettings())
    problems = service.problems()
    service.close()
    assert len(problems) == 1 and f"version 1, this one {ANALYSIS_VERSION}" in problems[0]
    assert "rebuild it with `trawl index`" in problems[0]
