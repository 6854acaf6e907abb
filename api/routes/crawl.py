"""Crawl visibility and admin: ``/v1/inspect``, ``/v1/hosts``, ``/v1/crawl/seeds``, ``/v1/crawl/status``.

They read the crawl data directory named by ``TRAWL_API__CRAWL_DATA`` (SQLite in WAL
mode, so a crawl can run meanwhile). Seeds posted here are queued in the crawl
database and fetched by the next ``trawl crawl --data DIR`` run.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, Field

from api.crawl_data import crawl_dir, inspection
from api.deps import SearchDep
from api.params import StrictParams
from api.protection import AdminDep
from core.crawldir import CrawlDir
from crawl.frontier.interface import open_store
from crawl.state.fleet import crawl_status as fleet_status
from crawl.state.host_health import host_health
from crawl.state.records import NewUrl
from crawl.urls import canonicalize_url, host_of

router = APIRouter(dependencies=[StrictParams])


@router.get("/v1/inspect", tags=["crawl"])
def inspect(
    request: Request, service: SearchDep, url: Annotated[str, Query(max_length=4096, description="Any URL.")]
) -> dict[str, Any]:
    """Canonical form, robots decision, crawl state and history, dedup cluster, and whether it is indexed."""
    return inspection(request, service, url)


@router.get("/v1/hosts", tags=["crawl"])
def hosts(request: Request, limit: Annotated[int, Query(ge=1, le=5000)] = 500) -> list[dict[str, Any]]:
    """Per-host crawl health: backlog, errors, politeness state, response time."""
    frontier_url = request.app.state.settings.crawl.frontier_url
    return [
        dataclasses.asdict(h) for h in host_health(crawl_dir(request), limit=limit, frontier_url=frontier_url)
    ]


class SeedsRequest(BaseModel):
    urls: list[str] = Field(min_length=1, max_length=1000)


class SeedsResult(BaseModel):
    queued: list[str]
    rejected: dict[str, str]


@router.post("/v1/crawl/seeds", response_model=SeedsResult, tags=["admin"])
def add_seeds(request: Request, _admin: AdminDep, body: Annotated[SeedsRequest, Body()]) -> SeedsResult:
    queued: list[str] = []
    rejected: dict[str, str] = {}
    inserts = []
    for url in body.urls:
        canonical = canonicalize_url(url) if len(url) <= 4096 else ""
        if not canonical:
            rejected[url[:200]] = "not an http(s) URL with a host"
            continue
        inserts.append(NewUrl(url=canonical, host=host_of(canonical), depth=0, priority=1.0))
        queued.append(canonical)
    path = crawl_dir(request)
    path.mkdir(parents=True, exist_ok=True)
    # The configured frontier (PostgreSQL for a fleet), not always the directory's SQLite
    # file: on a fleet, seeds written there were never leased by any worker.
    db = open_store(CrawlDir(path), request.app.state.settings.crawl.frontier_url)
    try:
        db.apply(inserts=inserts, leases=[], updates=[], hosts=[], now=time.time())
    finally:
        db.close()
    return SeedsResult(queued=queued, rejected=rejected)


@router.get("/v1/crawl/status", tags=["admin"])
def crawl_status(request: Request, _admin: AdminDep) -> dict[str, Any]:
    """The crawl as ``trawl crawl status`` reports it, and the busiest hosts.

    On a PostgreSQL frontier (``TRAWL_CRAWL__FRONTIER_URL``) that is the fleet: workers
    alive, pages/s over the last minute, backlog and errors by class (``crawl.state.fleet``).
    """
    path = crawl_dir(request)
    frontier_url = request.app.state.settings.crawl.frontier_url
    status = fleet_status(path, frontier_url)
    top = (
        host_health(path, limit=20, frontier_url=frontier_url)
        if CrawlDir(path).has_crawl(frontier_url)
        else []
    )
    return status | {"hosts": [dataclasses.asdict(h) for h in top]}
