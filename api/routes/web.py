"""The server-rendered search page at ``/``. No JavaScript, no build step.

Jinja2 autoescapes everything; only the snippet (already escaped by
``retrieval.snippets`` with our own ``<mark>`` added) is inserted as markup. Links are
only rendered for http(s) URLs so a crawled ``javascript:`` URL can never run.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from api.deps import SearchDep
from core.errors import QueryError

router = APIRouter()
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parent.parent / "web" / "templates"))


def _safe_href(url: str) -> str | None:
    return url if url.lower().startswith(("http://", "https://")) else None


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def search_page(
    request: Request,
    service: SearchDep,
    q: Annotated[str, Query()] = "",
    page: Annotated[str, Query()] = "1",
) -> HTMLResponse:
    context: dict[str, object] = {"q": q, "results": [], "error": None, "response": None}
    status = 200
    if q.strip():
        try:
            page_no = int(page) if page.strip().isdigit() else 0
            response = service.search(q, page=page_no, size=service.settings.default_page_size)
        except QueryError as exc:
            context["error"] = str(exc)
            status = 400
        else:
            pages = min(service.settings.max_page, math.ceil(response.total / response.size))
            context.update(
                response=response,
                results=[
                    {
                        "title": hit.title,
                        "url": hit.url,
                        "href": _safe_href(hit.url),
                        "snippet": Markup(hit.snippet),
                    }
                    for hit in response.hits
                ],
                prev_url=f"/?{urlencode({'q': q, 'page': response.page - 1})}" if response.page > 1 else None,
                next_url=f"/?{urlencode({'q': q, 'page': response.page + 1})}"
                if response.page < pages
                else None,
                pages=pages,
            )
    return templates.TemplateResponse(request, "search.html", context, status_code=status)
