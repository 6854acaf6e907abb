"""The evaluation's search requests skip snippets and change nothing else about the results."""

from __future__ import annotations

from pathlib import Path

from core.settings import SearchSettings
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.docs import make_doc
from training.evaluate import served_ranking

WORDS = "heat transfer boundary layer flow wing pressure shock supersonic laminar".split()


def test_snippets_off_serves_the_same_ranked_list(tmp_path: Path) -> None:
    docs = [
        make_doc(
            f"https://example.org/p{i}.html",
            f"Page {i} {WORDS[i % len(WORDS)]}",
            " ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 40 + i)),
            lang="en",
        )
        for i in range(120)
    ]
    build_index(docs, tmp_path / "index", shards=2)
    service = SearchService.open(tmp_path / "index", SearchSettings(cache_entries=0))
    try:
        for query in ("heat transfer", "shock wing", "laminar boundary layer"):
            full = service.search(SearchRequest(query, size=50, spell=False))
            bare = service.search(SearchRequest(query, size=50, spell=False, snippets=False))
            assert [h.url for h in bare.hits] == [h.url for h in full.hits]
            assert [h.score for h in bare.hits] == [h.score for h in full.hits]
            assert any(h.snippet for h in full.hits) and not any(h.snippet for h in bare.hits)
            assert (bare.next_cursor is None) == (full.next_cursor is None)
            followed = served_ranking(service, query, "bm25", depth=100)
            paged = [h.external_id or h.url for h in full.hits]
            if full.next_cursor:
                more = service.search(SearchRequest(cursor=full.next_cursor, spell=False))
                paged += [h.external_id or h.url for h in more.hits]
            assert followed == paged[:100]
    finally:
        service.close()
