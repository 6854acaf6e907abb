"""Crawl visibility and admin: ``/v1/inspect``, ``/v1/hosts``, ``/v1/crawl/seeds``, ``/v1/crawl/status``.

They read the crawl data directory named by ``TRAWL_API__CRAWL_DATA`` (SQLite in WAL
mode, so a crawl can run meanwhile). Seeds posted here are queued in the crawl
database and fetched by the next ``trawl crawl --data DIR`` run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api.crawl_data import crawl_dir, inspection
from api.deps import SearchDep
from api.params import StrictParams
from api.protection import AdminDep
from core.crawldir import CrawlDir
from core.errors import BadParameter
from core.settings import CrawlSettings
from crawl.fetch.guard import AddressGuard, DnsCache, system_resolver, what_allows
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


async def _refuse_non_public(seeds: list[str], settings: CrawlSettings) -> None:
    """400 naming the first seed the crawl's address guard would refuse, and the setting that
    would allow it: queued, it would only fail later, in the crawl's log. A host that does not
    resolve here is taken (the crawler, maybe on another machine, decides when it fetches)."""
    guard = AddressGuard(
        DnsCache(system_resolver),
        allow_loopback=settings.allow_loopback,
        allow_private=settings.allow_private,
        allowed_networks=settings.allowed_networks,
    )
    hosts: dict[str, str] = {}  # host → its first seed
    for seed in seeds:
        hosts.setdefault(str(urlsplit(seed).hostname), seed)
    refused = await asyncio.gather(*(guard.refused_address(host) for host in hosts))
    for (host, seed), address in zip(hosts.items(), refused, strict=True):
        if address is not None:
            kind, setting = what_allows(address)
            said = "is" if host == address.split("%", 1)[0] else "resolves to"
            raise BadParameter(
                f"Seed {seed[:200]!r} is refused: its host {host} {said} a {kind} address, which the "
                f"crawl does not fetch. To crawl it, allow it with {setting}."
            )


@router.post("/v1/crawl/seeds", response_model=SeedsResult, tags=["admin"])
async def add_seeds(request: Request, _admin: AdminDep, body: Annotated[SeedsRequest, Body()]) -> SeedsResult:
    """Queue seeds for the next crawl run; 400 for a seed on a loopback, private or link-local
    address the crawl's settings do not allow (nothing is queued then)."""
    path = crawl_dir(request)
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
    await _refuse_non_public(queued, request.app.state.settings.crawl)
    frontier_url = request.app.state.settings.crawl.frontier_url
    await run_in_threadpool(_queue, path, frontier_url, inserts)
    return SeedsResult(queued=queued, rejected=rejected)


def _queue(path: Path, frontier_url: str | None, inserts: list[NewUrl]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    # The configured frontier (PostgreSQL for a fleet), not always the directory's SQLite
    # file: on a fleet, seeds written there were never leased by any worker.
    db = open_store(CrawlDir(path), frontier_url)
    try:
        db.apply(inserts=inserts, leases=[], updates=[], hosts=[], now=time.time())
    finally:
        db.close()


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
