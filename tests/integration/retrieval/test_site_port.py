"""``site:host:port`` keeps the port: two sites on one address are told apart."""

from __future__ import annotations

from pathlib import Path

from core.settings import SearchSettings
from core.types import Document, doc_id_for
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService


def test_site_with_a_port_matches_only_that_port(tmp_path: Path) -> None:
    urls = [
        "http://127.0.0.1:8099/a",
        "http://127.0.0.1:8099/b",
        "http://127.0.0.1:8000/c",
        "https://www.x.org/d",
    ]
    docs = [
        Document(doc_id=doc_id_for(u), url=u, title=f"asyncio {i}", body="asyncio event loop", host=h)
        for i, (u, h) in enumerate(
            zip(urls, ["127.0.0.1", "127.0.0.1", "127.0.0.1", "www.x.org"], strict=True)
        )
    ]
    build_index(docs, tmp_path / "idx")
    service = SearchService.open(tmp_path / "idx", SearchSettings(use_vectors=False, cache_entries=0))
    try:

        def found(query: str) -> set[str]:
            return {hit.url for hit in service.search(SearchRequest(query, size=10)).hits}

        assert found("asyncio site:127.0.0.1:8099") == set(urls[:2])
        assert found("asyncio site:127.0.0.1") == set(urls[:3])
        assert found("asyncio site:x.org:443") == {urls[3]}
        assert service.parse(SearchRequest("asyncio site:127.0.0.1:8099")).site == "127.0.0.1:8099"
    finally:
        service.close()
