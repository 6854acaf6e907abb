"""``GET /v1/suggest``: completions as someone types; ``GET /opensearch.xml``: Trawl for a browser.

``/v1/suggest?q=asy`` answers ``{"query", "suggestions": [{"text", "kind", "url"}]}``:
titles, headings and frequent past queries of the serving generation, then the typed words
with the last completed (``kind``: title, heading, query, completion; ``url``: the page of
a title or heading, else null), best first (:mod:`retrieval.query.suggest`).
``format=opensearch`` answers the OpenSearch suggestions JSON browsers read,
``["asy", ["asyncio — Asynchronous I/O", …]]``. The description document names the search
page and that URL, absolute from the request's base URL, so a browser offers "add Trawl"
and completes in its address bar.
"""

from __future__ import annotations

import json
import math
import threading
from itertools import chain
from typing import Annotated, Literal
from xml.sax.saxutils import escape, quoteattr

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Query, Request, Response
from pydantic import BaseModel

from api.deps import SearchDep
from api.params import StrictInt, StrictParams, in_range
from api.schemas import ErrorModel
from core.settings import Settings
from online.logs import LogPaths, resolve_log_dir
from online.query_log import frequent_queries
from retrieval.index.generation import Generation
from retrieval.query.service import SearchService
from retrieval.query.suggest import MAX_SIZE, MAX_TYPED, Phrase, Suggester
from retrieval.query.suggest_cache import SuggesterCache
from retrieval.query.suggest_sources import generation_phrases, word_counts

router = APIRouter(dependencies=[StrictParams])

DEFAULT_SIZE = 8
FIRST_BUILD_WAIT_S = 30.0
"""How long a request waits for the process's first suggester before answering none."""
OPENSEARCH_XML = "application/opensearchdescription+xml"
SUGGESTIONS_JSON = "application/x-suggestions+json"
_cache_lock = threading.Lock()


class SuggestionModel(BaseModel):
    text: str
    kind: Literal["title", "heading", "query", "completion"]
    url: str | None


class SuggestResponseModel(BaseModel):
    query: str
    suggestions: list[SuggestionModel]


def suggester_builder(settings: Settings, service: SearchService) -> SuggesterCache:
    """The cache whose builds read a generation's documents and the service's query log."""

    def build(generation: Generation) -> Suggester:
        impressions = LogPaths.under(resolve_log_dir(settings)).impressions
        queries = (Phrase(q, "query", None, math.log1p(n)) for q, n in frequent_queries(impressions))
        spellers = service.spelling.spellers if service.settings.spelling else None
        phrases = chain(generation_phrases(generation), queries)
        return Suggester.build(phrases, word_counts(generation, spellers))

    return SuggesterCache(build)


def suggestions_cache(request: Request, service: SearchService) -> SuggesterCache:
    """The app's cache, made at start-up (``api.suggest_at_start``) or on first use."""
    return app_suggestions(request.app, service)


def start_suggestions(app: FastAPI, service: SearchService) -> None:
    """Start building the serving generation's suggester in the background (the lifespan's call)."""
    app_suggestions(app, service).get(service.generations)


def app_suggestions(app: FastAPI, service: SearchService) -> SuggesterCache:
    state = app.state
    with _cache_lock:
        cache: SuggesterCache | None = getattr(state, "suggest", None)
        if cache is None:
            cache = state.suggest = suggester_builder(state.settings, service)
        return cache


@router.get(
    "/v1/suggest",
    response_model=SuggestResponseModel,
    responses={
        200: {"content": {SUGGESTIONS_JSON: {}}, "description": "Completions (OpenSearch JSON with format)"},
        400: {"model": ErrorModel},
    },
    summary="Complete a query as it is typed",
)
async def suggest(
    request: Request,
    service: SearchDep,
    q: Annotated[str, Query(max_length=MAX_TYPED, description="What has been typed so far.")],
    size: Annotated[StrictInt, Query(description=f"Suggestions wanted, 1 to {MAX_SIZE}.")] = DEFAULT_SIZE,
    output: Annotated[
        Literal["json", "opensearch"],
        Query(alias="format", description="json, or opensearch: [query, [completions]] for browsers."),
    ] = "json",
) -> Response:
    """Completions of ``q``: its last word as a word prefix (one typo allowed), the words
    before it as context. Built once per generation; until the serving one's is built, the
    previous generation's answer."""
    size = in_range(size, "size", 1, MAX_SIZE)
    cache = suggestions_cache(request, service)

    def complete() -> list[SuggestionModel]:
        service.generations.refresh()  # follow a publish even when nobody searches
        suggester = cache.get(service.generations) or cache.wait(FIRST_BUILD_WAIT_S)
        found = suggester.suggest(q, size) if suggester is not None else []
        return [SuggestionModel.model_validate(s, from_attributes=True) for s in found]

    suggestions = await anyio.to_thread.run_sync(complete)
    if output == "opensearch":
        body = json.dumps([q, [s.text for s in suggestions]], ensure_ascii=False)
        return Response(body, media_type=SUGGESTIONS_JSON)
    answer = SuggestResponseModel(query=q, suggestions=suggestions)
    return Response(answer.model_dump_json(), media_type="application/json")


def description(base: str) -> str:
    """The OpenSearch 1.1 description document of the Trawl at ``base`` (ending in ``/``)."""
    search = quoteattr(f"{base}?q={{searchTerms}}")
    complete = quoteattr(f"{base}v1/suggest?q={{searchTerms}}&format=opensearch")
    itself = quoteattr(f"{base}opensearch.xml")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<OpenSearchDescription xmlns="http://a9.com/-/spec/opensearch/1.1/"'
        ' xmlns:moz="http://www.mozilla.org/2006/browser/search/">\n'
        "  <ShortName>Trawl</ShortName>\n"
        "  <Description>Search with Trawl</Description>\n"
        "  <InputEncoding>UTF-8</InputEncoding>\n"
        f'  <Url type="text/html" method="get" template={search}/>\n'
        f'  <Url type="{SUGGESTIONS_JSON}" method="get" template={complete}/>\n'
        f'  <Url type="{OPENSEARCH_XML}" rel="self" template={itself}/>\n'
        f"  <moz:SearchForm>{escape(base)}</moz:SearchForm>\n"
        "</OpenSearchDescription>\n"
    )


@router.get(
    "/opensearch.xml",
    response_class=Response,
    responses={200: {"content": {OPENSEARCH_XML: {}}}, 400: {"model": ErrorModel}},
    summary="OpenSearch description: add Trawl to a browser",
)
async def opensearch(request: Request) -> Response:
    return Response(description(str(request.base_url)), media_type=OPENSEARCH_XML)
