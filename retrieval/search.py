"""The lexical search path: parse, search every shard, merge, page, snippet.

This is what ``trawl search``, the API and the web page call. Hybrid recall and the
ranking funnel plug in above it (issues 4 and 5); the broker with deadlines and
partial results replaces the in-process loop (issue 6).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from core.errors import QueryError
from core.settings import SearchSettings
from core.types import Hit, Query, SearchResponse
from retrieval.analyzer import parse_query
from retrieval.build import IndexManifest, shard_dir
from retrieval.lexical import FieldBoosts, LexicalShard
from retrieval.snippets import make_snippet
from retrieval.tokenizer import analyze


@dataclass(frozen=True, slots=True)
class PageRequest:
    page: int
    size: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size


class SearchService:
    """Searches an index directory; one instance per process, shared by requests."""

    def __init__(self, shards: list[LexicalShard], settings: SearchSettings) -> None:
        self.shards = shards
        self.settings = settings

    @classmethod
    def open(cls, index_dir: Path, settings: SearchSettings | None = None) -> Self:
        settings = settings or SearchSettings()
        manifest = IndexManifest.load(index_dir)
        boosts = FieldBoosts.from_settings(settings)
        shards = [
            LexicalShard(shard_dir(index_dir, i) / "lexical", boosts=boosts) for i in range(manifest.shards)
        ]
        return cls(shards, settings)

    @property
    def num_docs(self) -> int:
        return sum(s.num_docs for s in self.shards)

    def page_request(self, page: int | None, size: int | None) -> PageRequest:
        """Validate paging; errors name the parameter and the allowed range."""
        s = self.settings
        page = 1 if page is None else page
        size = s.default_page_size if size is None else size
        if page < 1 or page > s.max_page:
            raise QueryError(f"page={page} is out of range; use 1 to {s.max_page}.")
        if size < 1 or size > s.max_page_size:
            raise QueryError(f"size={size} is out of range; use 1 to {s.max_page_size}.")
        return PageRequest(page, size)

    def parse(self, raw: str) -> Query:
        return parse_query(
            raw, max_chars=self.settings.max_query_chars, max_terms=self.settings.max_query_terms
        )

    def search(self, raw: str, *, page: int | None = None, size: int | None = None) -> SearchResponse:
        started = time.perf_counter()
        request = self.page_request(page, size)
        query = self.parse(raw)
        depth = request.offset + request.size
        per_shard = [shard.search(query, k=depth) for shard in self.shards]
        merged = heapq.nlargest(
            depth,
            (
                (hit.score, -int(hit.doc_id), shard_no, i)
                for shard_no, result in enumerate(per_shard)
                for i, hit in enumerate(result.hits)
            ),
        )[request.offset :]
        stems = {t for text in (*query.terms, *query.phrases) for t in analyze(text)}
        surfaces = [w for text in (*query.terms, *query.phrases) for w in text.split()]
        hits: list[Hit] = []
        for score, _, shard_no, i in merged:
            stored = self.shards[shard_no].stored_at(per_shard[shard_no].addresses[i])
            text = stored.body or stored.description
            hits.append(
                Hit(
                    doc_id=stored.doc_id,
                    url=stored.url,
                    title=stored.title or stored.url,
                    snippet=make_snippet(text, stems, surfaces, max_chars=self.settings.snippet_chars),
                    score=score,
                    external_id=stored.external_id,
                )
            )
        took_ms = (time.perf_counter() - started) * 1000
        return SearchResponse(
            query=query,
            total=sum(r.total for r in per_shard),
            page=request.page,
            size=request.size,
            hits=tuple(hits),
            took_ms=took_ms,
        )
