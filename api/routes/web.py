"""The server-rendered web UI: search, "why this result", URL inspection, host dashboard.

No build step, and one optional script (``static/suggest.js``, search as you type): every
page works without it. Jinja2 autoescapes everything; only the snippet (already escaped by
``retrieval.query.snippets`` with our own ``<mark>`` added) is inserted as markup. Links are
only rendered for http(s) URLs, so a crawled ``javascript:`` URL can never run, and the
Content-Security-Policy allows scripts from this origin's files only (no inline script).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from api import metrics
from api.crawl_data import inspection
from api.deps import SearchDep, in_search_thread
from api.experiments import ExperimentOutcome, get_runtime, search_with_experiments
from api.explain_view import explain_view
from api.live import backfill_detail, live_state
from api.params import parse_doc_id, parse_int
from core.errors import BadClick, ConfigError, DocumentNotFound, QueryError, UnknownImpression
from core.types import DocId, Hit, url_at
from crawl.state.host_health import host_health
from crawl.state.readable import HOST_COLUMNS, STATE_LABELS, readable
from retrieval.index.generation import Generation
from retrieval.query.explain import bm25_breakdown
from retrieval.query.facets import FILTER_OF
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.query.shard_backend import LocalShard
from retrieval.query.translations import reader_language

logger = logging.getLogger(__name__)
WEB = Path(__file__).resolve().parent.parent / "web"
router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(WEB / "templates"))
static = StaticFiles(directory=str(WEB / "static"))
EXPLAIN_DEPTH = 100


def _safe_href(url: str) -> str | None:
    return url if url.lower().startswith(("http://", "https://")) else None


def _click_href(impression_id: str | None, position: int, hit: Hit) -> str | None:
    """A result link (to its section, if it has one): through ``/r`` (click logging, no
    JavaScript) when the search was logged."""
    if _safe_href(hit.url) is None:
        return None
    if impression_id is None:
        return hit.link
    anchor = {"a": hit.section.anchor} if hit.section is not None and hit.section.anchor else {}
    return "/r?" + urlencode({"i": impression_id, "p": position, "d": str(int(hit.doc_id)), **anchor})


_EXAMPLE_HOSTS: weakref.WeakKeyDictionary[Generation, str] = weakref.WeakKeyDictionary()
"""Per opened generation: a host of the index, for the site filter's placeholder. Keyed by
the object, not the id: an index built into a plain directory is named after it (two
``…/index`` directories share one id), and an entry goes with its generation."""


def _example_host(service: SearchService) -> str:
    """A host the serving index holds (so the placeholder is a filter that finds something)."""
    generation = service.generation
    host = _EXAMPLE_HOSTS.get(generation)
    if host is None:
        host = ""
        for replicas in generation.broker.shards:
            local = next((r for r in replicas if isinstance(r, LocalShard) and r.failed is None), None)
            first = local.lexical.any_stored() if local is not None else None
            if first is not None and _safe_href(first.url):
                host = urlsplit(first.url).netloc.lower().removeprefix("www.")
                break
        _EXAMPLE_HOSTS[generation] = host
    return host


@dataclass(frozen=True, slots=True)
class PageQuery:
    """The query and filters that the search and explain pages share and carry in their links.

    Values are the form's strings, empty for unset, so that the page can show them back
    in the form as typed.
    """

    q: str
    site: str
    lang: str
    filetype: str
    ranker: str

    @property
    def filters(self) -> dict[str, str]:
        return {"site": self.site, "lang": self.lang, "filetype": self.filetype, "ranker": self.ranker}

    @property
    def kept(self) -> dict[str, str]:
        """The filters that are set, for links back to the same search."""
        return {k: v for k, v in self.filters.items() if v}

    @property
    def search(self) -> SearchRequest:
        """The search these values ask for (None where unset); pages and options are the caller's."""
        return SearchRequest(
            self.q,
            ranker=self.ranker or None,
            site=self.site or None,
            lang=self.lang or None,
            filetype=self.filetype or None,
        )


async def page_query(
    q: Annotated[str, Query(max_length=10_000)] = "",
    site: Annotated[str, Query(max_length=300)] = "",
    lang: Annotated[str, Query(max_length=20)] = "",
    filetype: Annotated[str, Query(max_length=20)] = "",
    ranker: Annotated[str, Query(max_length=64)] = "",
) -> PageQuery:
    return PageQuery(q, site, lang, filetype, ranker)


PageQueryDep = Annotated[PageQuery, Depends(page_query)]


@router.get("/", response_class=HTMLResponse)
async def search_page(
    request: Request,
    service: SearchDep,
    query: PageQueryDep,
    page: Annotated[str, Query(max_length=10)] = "1",
    spell: Annotated[str, Query(max_length=5)] = "",
    size: Annotated[str, Query(max_length=10)] = "",
) -> HTMLResponse:
    """The home page and its results, rendered in a search thread (as ``/v1/search``)."""
    return await in_search_thread(
        request, lambda: _render_search_page(request, service, query, page, spell, size)
    )


PAGE_LINKS = 10
"""Page numbers shown under the results: a window of ten around the current page."""
FACETS_SHOWN = 8


def page_numbers(current: int, pages: int) -> list[int]:
    """The numbered links: ten pages, the current one fourth where there is room."""
    first = max(1, min(current - 3, pages - PAGE_LINKS + 1))
    return list(range(first, min(pages, first + PAGE_LINKS - 1) + 1))


def _facet_links(service: SearchService, parsed: Any, query: PageQuery, link: Any) -> list[dict[str, Any]]:
    """Per facet with two or more values (or one chosen): its values as links that narrow to it."""
    counted, _missing = service.facets(parsed, list(FILTER_OF), limit=FACETS_SHOWN)
    groups = []
    for name, values in counted.items():
        chosen = query.filters[FILTER_OF[name]]
        if len(values) < 2 and not chosen:
            continue
        groups.append(
            {
                "name": {"host": "Sites", "filetype": "File types", "lang": "Languages"}[name],
                "id": f"facet-{name}",
                "values": [
                    {"value": v.value, "count": v.count, "url": link(**{FILTER_OF[name]: v.value})}
                    for v in values
                ],
                "clear_url": link(**{FILTER_OF[name]: ""}) if chosen else None,
                "chosen": chosen,
            }
        )
    return groups


def _render_search_page(
    request: Request, service: SearchService, query: PageQuery, page: str, spell: str, size: str = ""
) -> HTMLResponse:
    q = query.q
    spelling = spell != "0"  # spell=0: "Search instead for" the query exactly as typed
    context: dict[str, Any] = {
        "q": q,
        "results": [],
        "error": None,
        "response": None,
        "rankers": service.ranker_names(),
        "live": (live := live_state(request, service)),
        "live_detail": backfill_detail(live),
        "site_example": _example_host(service),
        **query.filters,
    }
    status = 200
    outcome: ExperimentOutcome | None = None
    if q.strip():
        try:
            number = parse_int(page, "page", 1, service.settings.max_page)
            per_page = (
                parse_int(size, "size", 1, service.settings.max_page_size)
                if size
                else service.settings.default_page_size
            )
            user_lang = request.app.state.settings.rank.user_lang
            reader = reader_language(request.headers.get("accept-language"), user_lang)
            search = dataclasses.replace(
                query.search, page=number, size=per_page, spell=spelling, reader_lang=reader
            )
            outcome = search_with_experiments(request, service, search)
            response = outcome.response
            metrics.record_search(response, entry="web")
        except QueryError as exc:
            context["error"] = str(exc)
            status = 400
        else:
            pages = min(service.settings.max_page, math.ceil(response.total / response.size))
            kept = query.kept
            sized = {"size": str(per_page)} if size else {}

            def page_url(n: int) -> str:
                return "/?" + urlencode(
                    {"q": q, **kept, **sized, "page": n, **({} if spelling else {"spell": "0"})}
                )

            def narrowed(**change: str) -> str:
                """This search with one filter set (or cleared), from its first page."""
                filters = {k: v for k, v in {**kept, **change}.items() if v}
                return "/?" + urlencode({"q": q, **filters, **sized})

            # The explain page links back to this very page: its number and spelling choice.
            came_from = {
                **({"page": str(response.page)} if response.page > 1 else {}),
                **({} if spelling else {"spell": "0"}),
            }

            def search_url(text: str | None, **extra: str) -> str | None:
                return "/?" + urlencode({"q": text, **kept, **extra}) if text else None

            context.update(
                response=response,
                results=[
                    {
                        "title": hit.title,
                        "url": hit.url,
                        "href": _click_href(outcome.impression_id, position, hit),
                        "section": hit.section.heading
                        if hit.section is not None and hit.section.anchor
                        else "",
                        "snippet": Markup(hit.snippet),
                        "similar": hit.similar,
                        "translations": [(lang, url) for lang, url in hit.translations if _safe_href(url)],
                        "explain_url": "/explain?"
                        + urlencode({"q": q, "doc_id": str(int(hit.doc_id)), **kept, **came_from}),
                    }
                    for position, hit in enumerate(response.hits, start=1)
                ],
                prev_url=page_url(response.page - 1) if response.page > 1 else None,
                next_url=page_url(response.page + 1) if response.page < pages else None,
                pages=pages,
                page_links=[(n, page_url(n), n == response.page) for n in page_numbers(response.page, pages)]
                if pages > 1
                else [],
                facets=_facet_links(service, response.query, query, narrowed),
                suggestion_url=search_url(response.suggestion),
                original_url=search_url(response.rewritten_from, spell="0"),
            )
    page_response = templates.TemplateResponse(request, "search.html", context, status_code=status)
    if outcome is not None:
        outcome.apply(page_response)
    return page_response


@router.get("/explain", response_class=HTMLResponse)
def explain_page(
    request: Request,
    service: SearchDep,
    query: PageQueryDep,
    doc_id: Annotated[str, Query(max_length=24)] = "",
    page: Annotated[str, Query(max_length=10)] = "",
    spell: Annotated[str, Query(max_length=5)] = "",
) -> HTMLResponse:
    q = query.q
    came_from = {
        **({"page": page} if page.isdigit() and page != "1" else {}),
        **({"spell": "0"} if spell == "0" else {}),
    }
    context: dict[str, Any] = {
        "q": q,
        "ranker": query.ranker,
        "hit": None,
        "view": None,
        "error": None,
        "depth": EXPLAIN_DEPTH,
        "back_url": "/?" + urlencode({"q": q, **query.kept, **came_from}),
    }
    status = 200
    try:
        wanted = parse_doc_id(doc_id)
        per_page = min(EXPLAIN_DEPTH, service.settings.max_page_size)
        for result_page in range(1, EXPLAIN_DEPTH // per_page + 1):
            response = service.search(
                dataclasses.replace(query.search, page=result_page, size=per_page, explain=True)
            )
            hit = next((h for h in response.hits if int(h.doc_id) == wanted), None)
            if hit is not None or len(response.hits) < per_page:
                break
        if hit is not None:
            info = hit.explain or {}
            parsed = service.parse(query.search)
            shard = int(info.get("shard") or 0)
            breakdown = bm25_breakdown(service.generation.broker, parsed, hit.doc_id, shard)
            context["hit"] = hit
            context["snippet"] = Markup(hit.snippet)
            context["ranker"] = response.ranker
            context["view"] = explain_view(response.ranker, info, breakdown)
            context["also_searched"] = [text for text, _ in response.query.expansions]
    except QueryError as exc:
        context["error"] = str(exc)
        status = 400
    return templates.TemplateResponse(request, "explain.html", context, status_code=status)


@router.get("/inspect", response_class=HTMLResponse)
def inspect_page(
    request: Request, service: SearchDep, url: Annotated[str, Query(max_length=4096)] = ""
) -> HTMLResponse:
    context: dict[str, Any] = {"url": url, "rows": [], "history": [], "error": None}
    status = 200
    if url.strip():
        try:
            report = inspection(request, service, url)
        except (QueryError, ConfigError) as exc:
            context["error"] = str(exc)
            status = 400
        else:
            history = report.pop("history", [])
            state = report.pop("state", None) or {}
            fields = {**report, **state}
            order = [k for k in STATE_LABELS if k in fields] + sorted(set(fields) - set(STATE_LABELS))
            shown = ((STATE_LABELS.get(k, k.replace("_", " ")), readable(k, fields[k])) for k in order)
            context["rows"] = [(label, text) for label, text in shown if text]
            context["history"] = [
                {
                    "When": readable("at", h.get("at")),
                    "HTTP": readable("http_status", h.get("http_status")),
                    "Outcome": readable("outcome", h.get("outcome")),
                    "Size": readable("bytes", h.get("bytes")),
                    "Took": readable("elapsed_s", h.get("elapsed_s")),
                }
                for h in history
            ]
    return templates.TemplateResponse(request, "inspect.html", context, status_code=status)


def _host_cell(name: str, value: Any) -> tuple[str, bool]:
    """(text, numeric) for one cell of the hosts table. The host name is the row's key, shown
    as is (``readable`` hides it on pages that name the host elsewhere); an empty count is 0."""
    if name == "host":
        return str(value), False
    return readable(name, value) or "0", isinstance(value, int | float)


@router.get("/hosts", response_class=HTMLResponse)
def hosts_page(request: Request) -> HTMLResponse:
    crawl_data = request.app.state.settings.api.crawl_data
    context: dict[str, Any] = {"hosts": [], "error": None, "columns": list(HOST_COLUMNS.values())}
    if crawl_data is None:
        context["error"] = "No crawl data directory is configured (TRAWL_API__CRAWL_DATA)."
    else:
        context["hosts"] = [
            [_host_cell(name, value) for name, value in row.items()]
            for row in (
                {name: getattr(h, name) for name in HOST_COLUMNS}
                for h in host_health(
                    Path(crawl_data), frontier_url=request.app.state.settings.crawl.frontier_url
                )
            )
        ]
    return templates.TemplateResponse(request, "hosts.html", context)


@router.get("/r")
def click_redirect(
    request: Request,
    service: SearchDep,
    i: Annotated[str, Query(max_length=64)],
    p: Annotated[str, Query(max_length=24)],
    d: Annotated[str, Query(max_length=24)],
    a: Annotated[str | None, Query(max_length=512, description="The section's anchor, if any.")] = None,
) -> Response:
    """Log a click on a result of the page, then send the browser to the result (at its
    section when ``a`` names one of the page's stored anchors).

    The target comes from the index (by doc id, and an anchor only when the document has it),
    never from the request, so this is not an open redirect; a click that does not match its
    impression is not logged but the visitor still gets to the page.
    """
    doc_id = parse_doc_id(d, "d")
    position = parse_int(p, "p", 1, service.settings.max_page_size)
    doc = service.document(DocId(doc_id))
    if doc is None or _safe_href(doc.url) is None:
        raise DocumentNotFound(f"No document {d} in generation {service.generation.id}.")
    runtime = get_runtime(request)
    if runtime is not None:
        try:
            runtime.record_click(impression_id=i, doc_id=doc_id, position=position)
        except (UnknownImpression, BadClick) as exc:
            logger.info("click not logged: %s", exc)
    anchor = a if a and any(s.anchor == a for s in doc.sections) else ""
    return RedirectResponse(url_at(doc.url, anchor), status_code=303)
