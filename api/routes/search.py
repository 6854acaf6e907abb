"""``GET /v1/search``: JSON search results."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response

from api import metrics
from api.deps import SearchDep, SettingsDep, in_search_thread
from api.experiments import search_with_experiments
from api.params import StrictInt, StrictParams
from api.schemas import ErrorModel, FacetModel, SearchResponseModel
from core.errors import BadParameter
from retrieval.query.facets import parse_facets
from retrieval.query.request import SearchRequest
from retrieval.query.translations import reader_language

router = APIRouter(dependencies=[StrictParams])


@router.get(
    "/v1/search",
    response_model=SearchResponseModel,
    responses={400: {"model": ErrorModel}, 503: {"model": ErrorModel}},
    summary="Search the index",
)
async def search(
    request: Request,
    service: SearchDep,
    settings: SettingsDep,
    q: Annotated[
        str | None,
        Query(max_length=10_000, description='Query; operators: "phrase", -term, site:, lang:, filetype:'),
    ] = None,
    page: Annotated[
        StrictInt, Query(description="1-based page number (capped; use cursor to go deeper).")
    ] = 1,
    size: Annotated[StrictInt | None, Query(description="Results per page (capped by settings).")] = None,
    site: Annotated[
        str | None, Query(max_length=300, description="Only this host and its subdomains.")
    ] = None,
    lang: Annotated[str | None, Query(max_length=20, description="ISO 639-1 language code.")] = None,
    filetype: Annotated[str | None, Query(max_length=20, description="File extension, e.g. pdf.")] = None,
    ranker: Annotated[
        str | None,
        Query(max_length=64, description="bm25, hybrid-rrf, hybrid, ltr, … (default: best available)."),
    ] = None,
    explain: Annotated[bool, Query(description="Add why each result ranks where it does.")] = False,
    cursor: Annotated[
        str | None, Query(max_length=8192, description="next_cursor of a previous response.")
    ] = None,
    spell: Annotated[
        bool, Query(description="Spelling suggestions and rewrites; false: search exactly what was typed.")
    ] = True,
    facets: Annotated[
        str | None,
        Query(max_length=64, description="Count results per value: host, filetype, lang (comma-separated)."),
    ] = None,
    accept_language: Annotated[
        str | None,
        Header(
            description="The reader's languages: a page found in several languages is shown in the "
            "first of them (else rank.user_lang), the others listed in its translations."
        ),
    ] = None,
) -> Response:
    """Search the serving generation. The search itself runs in a worker thread (ranking may
    encode the query with a model: CPU work), a bounded number at once (``in_search_thread``)."""
    if cursor is None and q is None:
        raise BadParameter("Parameter 'q' is required (or 'cursor' to continue a search).")

    search = SearchRequest(
        q,
        page=page,
        size=size,
        ranker=ranker,  # an explicit ranker is logged outside any experiment
        cursor=cursor,
        explain=explain,
        site=site,
        lang=lang,
        filetype=filetype,
        spell=spell,
        reader_lang=reader_language(accept_language, settings.rank.user_lang),
    )

    facet_names = parse_facets(facets)

    def run() -> Response:
        outcome = search_with_experiments(request, service, search)
        response = outcome.response
        metrics.record_search(response, entry="api")
        model = SearchResponseModel.from_domain(response)
        if facet_names:
            counted, missing = service.facets(response.query, facet_names)
            model.facets = {name: [FacetModel(value=v.value, count=v.count) for v in values]
                            for name, values in counted.items()}  # fmt: skip
            model.facets_missing_shards = missing
        http = Response(model.model_dump_json(), media_type="application/json")
        outcome.apply(http)
        return http

    return await in_search_thread(request, run)
