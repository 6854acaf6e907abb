"""``GET /v1/search``: JSON search results."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from api.deps import SearchDep
from api.schemas import ErrorModel, SearchResponseModel
from core.errors import QueryError

router = APIRouter()

SEARCH_PARAMS = frozenset({"q", "page", "size"})


def reject_unknown_params(request: Request, allowed: frozenset[str]) -> None:
    """A misspelt parameter (``pgae=2``) is an error, not silently ignored."""
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise QueryError(
            f"Unknown parameter {', '.join(repr(u) for u in unknown)}; "
            f"expected one of: {', '.join(sorted(allowed))}."
        )


@router.get(
    "/v1/search",
    response_model=SearchResponseModel,
    responses={400: {"model": ErrorModel}, 503: {"model": ErrorModel}},
    summary="Search the index",
)
async def search(
    request: Request,
    service: SearchDep,
    q: Annotated[str, Query(description='Query text; operators: "phrase", -term, site:, lang:, filetype:')],
    page: Annotated[int, Query(ge=1, description="1-based page number.")] = 1,
    size: Annotated[int | None, Query(ge=1, description="Results per page (capped).")] = None,
) -> Response:
    reject_unknown_params(request, SEARCH_PARAMS)
    response = service.search(q, page=page, size=size)
    body = SearchResponseModel.from_domain(response).model_dump_json()
    return Response(body, media_type="application/json")
