"""``/indexnow``: sites tell Trawl which of their URLs changed (the IndexNow protocol).

``GET /indexnow?url=U&key=K[&keyLocation=L]`` notifies one URL, ``POST /indexnow`` with
``{"host", "key", "keyLocation"?, "urlList"}`` up to 10,000. The key (8–128 of
``[a-zA-Z0-9-]``) proves the sender controls the URLs' origin: ``{origin}/{key}.txt``, or
``keyLocation`` on the same scheme, host and port with no query (then only URLs under its
directory, the protocol's rule), must answer 200 with the key as its whole body. That file
is fetched before anything is queued, through the crawler's client and address guard (no
redirects, a size cap); a failed check answers one 403 that never says what the fetch saw.

Only sites the crawl covers are taken, checked before the key file is fetched
(DECISIONS 43). Accepted URLs are queued ahead of everything the crawl found itself
(``PUSH_PRIORITY``), and the next crawl round fetches them under robots and politeness.
Two throttles (``_throttle``, ``_key_checks``) keep anyone but the site from spending
its quota.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
from cachetools import TTLCache
from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, Field

from api.params import StrictParams
from api.schemas import ErrorModel
from core.crawldir import CrawlDir
from core.errors import (
    BadParameter,
    CrawlDataMissing,
    CrawlError,
    PushHostNotCrawled,
    PushKeyRejected,
    PushThrottled,
    PushUrlsRejected,
)
from core.settings import CrawlSettings
from crawl.fetch.fetcher import make_client
from crawl.fetch.guard import AddressGuard, DnsCache, system_resolver
from crawl.frontier.interface import CrawlStore, open_store
from crawl.state.records import NewUrl
from crawl.urls import canonicalize_url, host_of

logger = logging.getLogger(__name__)
router = APIRouter(dependencies=[StrictParams])

PUSH_PRIORITY = 2.0
"""Above every priority the crawl gives (seeds 1.0, links 1 / (1 + depth))."""
PER_HOST_PER_MINUTE = 60
KEY_CHECKS_PER_HOST_PER_MINUTE = 20
VERIFIED_KEY_TTL_S = 3600.0
MAX_URLS = 10_000
KEY_FILE_BYTES = 64 * 1024
KEY_FETCH_TIMEOUT_S = 5.0
_KEY = re.compile(r"[a-zA-Z0-9-]{8,128}")


class Notification(BaseModel):
    host: str = Field(min_length=1, max_length=255)
    key: str = Field(max_length=256)
    keyLocation: str | None = Field(None, max_length=4096)  # noqa: N815 (the protocol's name)
    urlList: list[str] = Field(min_length=1, max_length=MAX_URLS)  # noqa: N815


class _Throttle:
    """At most ``limit`` notifications per host in any 60 s window (one per process)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: dict[str, collections.deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, host: str, now: float) -> None:
        with self._lock:
            times = self._seen.setdefault(host, collections.deque())
            while times and times[0] <= now - 60:
                times.popleft()
            if len(times) >= self.limit:
                raise PushThrottled(
                    f"{host} sent {self.limit} notifications in the last minute; retry later."
                )
            times.append(now)


_throttle = _Throttle(PER_HOST_PER_MINUTE)
"""Verified notifications per host: only those count against the host's quota, so that
nobody but the site can spend it."""
_key_checks = _Throttle(KEY_CHECKS_PER_HOST_PER_MINUTE)
"""Key-file fetches per host: what a notification with a key not verified lately costs.
Forged keys can use these up (the price of not fetching without limit on a stranger's
word), never the site's own quota."""
_verified: TTLCache[tuple[str, str], bool] = TTLCache(maxsize=10_000, ttl=VERIFIED_KEY_TTL_S)
"""(key file URL, key) pairs that answered with the key lately: their notifications fetch nothing."""
_verified_lock = threading.Lock()


def _split_host(host: str) -> tuple[str, int | None]:
    """``example.org`` or ``127.0.0.1:8080`` → (host name, port or None)."""
    try:
        parts = urlsplit(f"//{host.strip()}")
        name, port = parts.hostname, parts.port
    except ValueError as exc:
        raise BadParameter(f"host {host!r} is not a host name: {exc}") from None
    if not name or parts.path or parts.query:
        raise BadParameter(f"host {host!r} is not a host name, like example.org.")
    return name, port


def _of_host(url: str, name: str, port: int | None) -> bool:
    parts = urlsplit(url)
    return parts.hostname == name and (port is None or parts.port == port)


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL (default ports already dropped)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _key_location(key_location: str, canonical: list[str], host: str) -> str:
    """The canonical ``keyLocation``, once it is where the protocol allows; raises 400 or 422 errors.

    It must be on the scheme, host and port of every URL (a file on another port, such as
    a page of Trawl's own API, proves nothing about the site), carry no query, and every
    URL must lie under its directory: ``/catalog/k.txt`` vouches for ``/catalog/…`` only."""
    location = canonicalize_url(key_location) if len(key_location) <= 4096 else ""
    if not location:
        raise BadParameter(f"keyLocation {key_location[:200]!r} is not an http(s) URL.")
    parts = urlsplit(location)
    if parts.query:
        raise PushUrlsRejected(f"keyLocation {location[:200]!r} has a query: it must name a file.")
    origin = _origin(location)
    elsewhere = [u for u in canonical if _origin(u) != origin]
    if elsewhere:
        raise PushUrlsRejected(
            f"keyLocation {location[:200]!r} is not on the scheme, host and port of "
            f"{elsewhere[0][:200]!r} (host {host})."
        )
    directory = parts.path.rpartition("/")[0] + "/"
    outside = [u for u in canonical if not urlsplit(u).path.startswith(directory)]
    if outside:
        raise PushUrlsRejected(
            f"{outside[0][:200]!r} is not under {origin}{directory[:200]}, the directory of keyLocation."
        )
    return location


def _checked(host: str, key: str, key_location: str | None, urls: list[str]) -> tuple[list[str], list[str]]:
    """(canonical URLs, key file URLs) of a well-formed notification; raises 400 or 422 errors.

    Without ``keyLocation`` the key file is ``/{key}.txt`` at each origin the URLs are on
    (``http`` and ``https`` of one host are two origins, each proven on its own)."""
    if not _KEY.fullmatch(key):
        raise BadParameter("The key must be 8 to 128 characters of a-z, A-Z, 0-9 and '-'.")
    name, port = _split_host(host)
    canonical = []
    for url in urls:
        found = canonicalize_url(url) if len(url) <= 4096 else ""
        if not found:
            raise BadParameter(f"{url[:200]!r} is not an http(s) URL with a host.")
        canonical.append(found)
    foreign = [u for u in canonical if not _of_host(u, name, port)]
    if foreign:
        raise PushUrlsRejected(f"{len(foreign)} URL(s) are not of host {host}, e.g. {foreign[0][:200]!r}.")
    if key_location:
        return canonical, [_key_location(key_location, canonical, host)]
    return canonical, [f"{origin}/{key}.txt" for origin in dict.fromkeys(map(_origin, canonical))]


async def _key_file_says(key_url: str, key: str, settings: CrawlSettings) -> str | None:
    """None when ``key_url`` answers 200 with ``key`` as its whole body, else what it did instead."""
    guard = AddressGuard(
        DnsCache(system_resolver),
        allow_loopback=settings.allow_loopback,
        allow_private=settings.allow_private,
        allowed_networks=settings.allowed_networks,
    )
    body = b""
    try:
        async with make_client(timeout_s=KEY_FETCH_TIMEOUT_S, max_connections=2, guard=guard) as client:
            async with client.stream("GET", key_url, headers={"User-Agent": settings.user_agent}) as response:
                if response.status_code != 200:
                    return f"answered HTTP {response.status_code}"
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > KEY_FILE_BYTES:
                        return f"is over {KEY_FILE_BYTES} bytes"
    except (httpx.HTTPError, CrawlError, OSError) as exc:
        return f"could not be fetched: {type(exc).__name__}: {exc}"
    if body.decode("utf-8-sig", "replace").strip() != key:
        return f"does not hold the key alone ({len(body)} bytes)"
    return None


async def _verify_key(key_url: str, key: str, settings: CrawlSettings) -> None:
    """Raise ``PushKeyRejected`` unless ``key_url`` answers 200 with ``key`` as its whole body.

    Every failure answers the same words: telling a refused connection from an HTTP 404
    would make this endpoint a port scanner for anyone. The operator's log says which."""
    problem = await _key_file_says(key_url, key, settings)
    if problem is not None:
        logger.warning("IndexNow key file %s %s", key_url, problem)
        raise PushKeyRejected(
            f"The key could not be verified: {key_url} must answer HTTP 200 with the key as its whole body."
        )


def _crawl_dir(request: Request) -> Path:
    path = request.app.state.settings.api.crawl_data
    if path is None:
        raise CrawlDataMissing(
            "IndexNow is not enabled here: it needs a crawl data directory (TRAWL_API__CRAWL_DATA=DIR)."
        )
    return Path(path)


def _parent_domains(name: str) -> list[str]:
    """``a.b.example.org`` → ``b.example.org``, ``example.org`` (no IP addresses, no bare TLD)."""
    labels = name.split(".")
    if len(labels) < 3 or name.replace(".", "").isdigit() or ":" in name:
        return []
    return [".".join(labels[i:]) for i in range(1, len(labels) - 1)]


def _crawled_here(db: CrawlStore, host: str, mode: str) -> bool:
    """Whether ``host`` (``host[:port]``) belongs to the crawl: scope ``any`` takes every host;
    otherwise the crawl must hold URLs of it, or (scope ``domain``) of a domain above it."""
    if mode == "any" or db.knows_host(host):
        return True
    if mode != "domain":
        return False
    name = _split_host(host)[0]
    return any(db.knows_host(d) or db.knows_host("www." + d) for d in [name, *_parent_domains(name)])


def _refuse_hosts_not_crawled(path: Path, settings: CrawlSettings, hosts: set[str]) -> None:
    """Raise ``PushHostNotCrawled`` unless every host is one the crawl covers.

    Checked before the key file is fetched: a stranger's notification must neither put a
    site the operator never chose into the crawl nor make Trawl fetch from any host named."""
    if settings.scope == "any":
        return
    layout = CrawlDir(path)
    db = (
        open_store(layout, settings.frontier_url, readonly=True)
        if layout.has_crawl(settings.frontier_url)
        else None
    )
    try:
        outside = sorted(h for h in hosts if db is None or not _crawled_here(db, h, settings.scope))
    finally:
        if db is not None:
            db.close()
    if outside:
        raise PushHostNotCrawled(
            f"{outside[0]} is not crawled here: Trawl takes IndexNow notifications only for hosts "
            f"its crawl holds URLs of (crawl scope {settings.scope!r})."
        )


async def _accept(
    request: Request, host: str, key: str, key_location: str | None, urls: list[str]
) -> dict[str, Any]:
    """Check, verify and queue one notification (known fetched pages become pending again).

    Answers: 200 queued; 400 malformed (fields, URL, key format); 403 key not valid; 422 a
    URL or the key location not of the host, or a host the crawl does not cover; 429 over
    ``PER_HOST_PER_MINUTE`` notifications from one host, or over
    ``KEY_CHECKS_PER_HOST_PER_MINUTE`` key-file fetches; 404 when no crawl data directory
    is configured (not offered).
    """
    path = _crawl_dir(request)
    canonical, key_urls = _checked(host, key, key_location, urls)
    name = _split_host(host)[0]
    settings = request.app.state.settings.crawl
    _refuse_hosts_not_crawled(path, settings, {host_of(u) for u in canonical})
    for key_url in key_urls:
        with _verified_lock:
            known = _verified.get((key_url, key), False)
        if not known:
            _key_checks.admit(name, time.monotonic())
            await _verify_key(key_url, key, settings)
            with _verified_lock:
                _verified[(key_url, key)] = True
    _throttle.admit(name, time.monotonic())
    unique = list(dict.fromkeys(canonical))
    path.mkdir(parents=True, exist_ok=True)
    db = open_store(CrawlDir(path), settings.frontier_url)
    try:
        db.push(
            [NewUrl(url=u, host=host_of(u), depth=0, priority=PUSH_PRIORITY) for u in unique], time.time()
        )
    finally:
        db.close()
    return {"queued": len(unique)}


@router.get(
    "/indexnow",
    tags=["crawl"],
    responses={404: {"model": ErrorModel, "description": "IndexNow is not enabled (no crawl data)."}},
)
async def notify_one(
    request: Request,
    url: Annotated[str, Query(min_length=1, max_length=4096)],
    key: Annotated[str, Query(max_length=256)],
    key_location: Annotated[str | None, Query(alias="keyLocation", max_length=4096)] = None,
) -> dict[str, Any]:
    """IndexNow: one changed URL; the key file is checked on the URL's own host."""
    try:
        netloc = urlsplit(url).netloc if url.startswith(("http://", "https://")) else ""
    except ValueError:  # e.g. "http://[::1/": urlsplit refuses a broken IPv6 host
        netloc = ""
    if not netloc:
        raise BadParameter(f"{url[:200]!r} is not an http(s) URL with a host.")
    return await _accept(request, netloc.rpartition("@")[2], key, key_location, [url])


@router.post(
    "/indexnow",
    tags=["crawl"],
    responses={404: {"model": ErrorModel, "description": "IndexNow is not enabled (no crawl data)."}},
)
async def notify_many(request: Request, body: Annotated[Notification, Body()]) -> dict[str, Any]:
    """IndexNow: up to 10,000 changed URLs of one host."""
    return await _accept(request, body.host, body.key, body.keyLocation, body.urlList)
