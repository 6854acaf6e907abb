"""Response models of the HTTP API: the only place domain types become JSON."""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, Field

from core.types import Hit, SearchResponse
from retrieval.query.snippets import plain_snippet


class SectionModel(BaseModel):
    heading: str = Field(description="The section's heading as the page shows it (cut at 200 characters).")
    anchor: str = Field(description="The id that opens the section: link is url#anchor.")


class TranslationModel(BaseModel):
    lang: str = Field(description="ISO 639-1 code of the version's language.")
    url: str


class HitModel(BaseModel):
    doc_id: str = Field(description="Trawl's document id (decimal string: it exceeds 2^53).")
    url: str = Field(description="The page's URL, as indexed.")
    link: str = Field(
        description="The URL to open: url, with #anchor when a section of the page answers the query."
    )
    title: str
    snippet: str = Field(description="HTML-escaped text; query matches wrapped in <mark>…</mark>.")
    snippet_text: str = Field("", description="The same snippet as plain text (no markup, no escapes).")
    highlights: list[tuple[int, int]] = Field(
        default_factory=list,
        description="Query matches in snippet_text as [start, end) offsets, counted in Unicode code points.",
    )
    score: float
    explain: dict[str, Any] | None = Field(None, description="Only with explain=true.")
    similar: int = Field(0, description="Near-identical results on this page folded into this one.")
    lang: str = Field("", description="The page's language (ISO 639-1; empty when unknown).")
    section: SectionModel | None = Field(
        None,
        description="The part of the page that answers the query, when one does clearly better than the "
        "page's top: link opens it and the snippet is quoted from it.",
    )
    translations: list[TranslationModel] = Field(
        default_factory=list,
        description="The same page in other languages, among this page's results and folded into this "
        "one (shown in the reader's language: lang:, else Accept-Language).",
    )

    @classmethod
    def from_domain(cls, hit: Hit) -> Self:
        text, highlights = plain_snippet(hit.snippet)
        return cls(
            doc_id=str(int(hit.doc_id)),
            url=hit.url,
            link=hit.link,
            title=hit.title,
            snippet=hit.snippet,
            snippet_text=text,
            highlights=highlights,
            score=hit.score,
            explain=hit.explain,
            similar=hit.similar,
            lang=hit.lang,
            section=SectionModel(heading=hit.section.heading, anchor=hit.section.anchor)
            if hit.section is not None and hit.section.anchor
            else None,
            translations=[TranslationModel(lang=lang, url=url) for lang, url in hit.translations],
        )


class FacetModel(BaseModel):
    value: str = Field(description="Pass as the facet's filter (host → site=, filetype=, lang=) to narrow.")
    count: int = Field(description="Results of the query with that value (what the filter then finds).")


class ParsedQueryModel(BaseModel):
    terms: list[str]
    phrases: list[str]
    excluded: list[str]
    site: str | None
    lang: str | None
    filetype: str | None


class SearchResponseModel(BaseModel):
    query: str
    parsed: ParsedQueryModel
    total: int
    page: int
    size: int
    took_ms: float
    ranker: str
    generation: str = Field(description="The index generation that answered.")
    partial: bool = Field(
        description="True when a shard (or its vectors) did not answer, in time or at all (a damaged file)."
    )
    missing_shards: list[int]
    missing_vector_shards: list[int]
    hedged_shards: list[int] = Field(description="Shards answered by a hedged request to a replica.")
    next_cursor: str | None = Field(description="Pass as cursor= for the next page (deep paging).")
    cached: bool
    timings_ms: dict[str, float]
    suggestion: str | None = Field(None, description='A spelling correction to offer ("Did you mean …?").')
    rewritten_from: str | None = Field(
        None,
        description="The query as typed, when too few results made these its spelling correction's "
        "results (query holds the correction; repeat with spell=false for the original).",
    )
    ignored_words: list[str] = Field(
        default_factory=list,
        description="Very common words (the, of, is, …) of a query longer than four words, which "
        "are not searched; a short query searches them in titles and headings. A ranker with "
        "vectors still reads the whole query.",
    )
    query_truncated: str | None = Field(
        None,
        description="Set when the query was longer than the service reads (characters or words): "
        "what was cut, in words. The results are those of the shortened query.",
    )
    facets: dict[str, list[FacetModel]] | None = Field(
        None, description="Only with facets=: per facet, its values over every result, largest first."
    )
    facets_missing_shards: list[int] = Field(
        default_factory=list, description="Shards whose results the facet counts leave out."
    )
    results: list[HitModel]

    @classmethod
    def from_domain(cls, response: SearchResponse) -> Self:
        q = response.query
        return cls(
            query=q.raw,
            parsed=ParsedQueryModel(
                terms=list(q.terms),
                phrases=list(q.phrases),
                excluded=list(q.excluded),
                site=q.site,
                lang=q.lang,
                filetype=q.filetype,
            ),
            total=response.total,
            page=response.page,
            size=response.size,
            took_ms=round(response.took_ms, 3),
            ranker=response.ranker,
            generation=response.generation,
            partial=response.partial,
            missing_shards=list(response.missing_shards),
            missing_vector_shards=list(response.missing_vector_shards),
            hedged_shards=list(response.hedged_shards),
            next_cursor=response.next_cursor,
            cached=response.cached,
            timings_ms={k: round(v, 3) for k, v in response.timings_ms.items()},
            suggestion=response.suggestion,
            rewritten_from=response.rewritten_from,
            ignored_words=list(response.ignored_words),
            query_truncated=q.truncated or None,
            results=[HitModel.from_domain(h) for h in response.hits],
        )


class ErrorModel(BaseModel):
    error: str = Field(description="A stable machine-readable code, e.g. bad_query.")
    detail: str = Field(description="What was wrong and what to do instead.")


class BackfillModel(BaseModel):
    state: str = Field(description="loading, embedding, publishing, done or failed.")
    done: int = Field(description="Passages encoded so far by this run.")
    total: int = Field(description="Passages this run encodes (the rest are linked from the vector store).")
    percent: float
    rate: float = Field(description="Passages per second.")
    eta_s: float | None = Field(description="Seconds left at the current rate.")
    generation: str = Field(description="The generation being filled with vectors.")
    detail: str = ""


class ShardHealthModel(BaseModel):
    shard: int
    answering: bool = Field(description="False while its circuit is open: searches skip it and say so.")
    misses: int = Field(description="Calls in a row it failed or answered too late.")
    probes: int = Field(0, description="Background probes that failed since its circuit opened.")
    last_error: str = ""
    replicas: dict[str, int] | None = Field(
        None,
        description="On Ray Serve (`trawl serve --engine ray`): its replicas by state, e.g. "
        '{"RUNNING": 2} or {"RUNNING": 1, "STARTING": 1} while one is restarted.',
    )


class NodeHealthModel(BaseModel):
    node: str = Field(description="The Ray node id (first 16 hex digits).")
    address: str | None = None
    alive: bool


class HealthModel(BaseModel):
    status: str
    state: str = Field(
        "serving",
        description='What the engine is doing: "serving", "embedding, 45%" while a backfill makes '
        'vectors, "embedding stalled: …" or "embedding failed: …". The home page says the same.',
    )
    documents: int
    generation: str
    rankers: list[str] = Field(description="Rankers this generation can serve.")
    ranker: str = Field("", description="The ranker a search without ranker= uses now.")
    ranker_reason: str = Field("", description="Why that ranker is the default (setting or measurement).")
    backfill: BackfillModel | None = Field(
        None, description="The last embeddings backfill of this index root."
    )
    problems: list[str] = Field(
        default_factory=list,
        description="What is not served and why (a damaged file: its generation, shard and path); "
        'status is "degraded" while there are any.',
    )
    shards: list[ShardHealthModel] = Field(
        default_factory=list, description="Each shard of the serving generation: answering, or skipped."
    )
    nodes: list[NodeHealthModel] = Field(
        default_factory=list,
        description="On Ray Serve: the cluster's nodes; a lost one is also named in problems.",
    )
