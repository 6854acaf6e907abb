"""The guarded HTTP fetcher: one pooled ``httpx.AsyncClient``, caps enforced while streaming.

Redirects are followed by hand so that every hop is checked: the address guard on every
hop, the caller's ``hop_check`` (scope, robots) on same-origin hops. A redirect to another
origin is returned as ``redirect_to`` and goes through the frontier, to wait for its own
host's politeness slot and robots rules (as in Nutch), so "one request in flight per host"
holds for redirects too; robots.txt, whose redirects RFC 9309 follows across authorities,
waits for the other host's slot through ``host_gate``. A redirect loop, a chain over
``max_redirects`` or a ``Location`` the crawler cannot follow is a permanent ``FetchError``.

Connections go to the address the guard approved (plain HTTP: that IP with a ``Host``
header; HTTPS: pinned in the pool's network backend, ``crawl.fetch.pinning``), so a DNS
answer cannot change between check and connect. Bodies are read raw and decoded here
(``crawl.fetch.decoding``), so the size cap applies to the decoded bytes of any
Content-Encoding stack. No cookie is kept or sent (:class:`StatelessClient`).
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Self

import httpx

from core.errors import FetchError, FetchFailure, TooLarge
from core.settings import CrawlSettings
from crawl.fetch.content import parse_content_type
from crawl.fetch.decoding import ACCEPT_ENCODING, BodyDecoder, DecodedTooLarge, DecodingFailed
from crawl.fetch.guard import AddressGuard
from crawl.fetch.origin_pools import PerOriginTransport
from crawl.fetch.pinning import pinned, pinned_transport
from crawl.urls import canonicalize_url, host_of, origin_of

logger = logging.getLogger(__name__)

__all__ = ["FetchResult", "Fetcher", "HopCheck", "make_client"]

HopCheck = Callable[[str], Awaitable[None]]
"""Raises a ``CrawlError`` when a redirect target may not be fetched."""

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One HTTP exchange as the crawler saw it (after same-origin redirects)."""

    url: str
    """The canonical URL that was asked for."""
    final_url: str
    """The canonical URL that answered (differs after same-origin redirects)."""
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers, names lower-cased (repeated headers joined with ``", "``)."""
    body: bytes = b""
    """The decoded (decompressed) body, at most the size cap."""
    raw_bytes: int = 0
    """Bytes that came over the wire for the body (before Content-Encoding decoding)."""
    wire_body: bytes = b""
    """The body as it came over the wire (Content-Encoding as sent), at most the size cap:
    what the WARC record keeps. The same object as ``body`` when nothing was encoded."""
    elapsed_s: float = 0.0
    redirect_to: str = ""
    """Canonical target of a cross-origin redirect, for the frontier; ``""`` otherwise."""
    redirects: int = 0
    address: str = ""
    request_headers: dict[str, str] = field(default_factory=dict)
    http_version: str = "HTTP/1.1"
    raw_headers: tuple[tuple[bytes, bytes], ...] = ()
    """The response's header lines as they came (names in their case, values as bytes),
    for the WARC record; ``headers`` is what the crawler reads."""
    reason_phrase: bytes = b""
    """The status line's reason phrase as sent (``b""``: the standard one is written)."""
    fetched_at: float = 0.0
    """When the request that got this response was sent (Unix seconds), not when the answer
    was read: the content is at least as new as this, so a change the server made while a
    slow answer was on its way counts as after the fetch. ``elapsed_s`` is the duration."""

    @property
    def media_type(self) -> str:
        return parse_content_type(self.headers.get("content-type", ""))[0]

    @property
    def charset(self) -> str:
        return parse_content_type(self.headers.get("content-type", ""))[1]

    @property
    def not_modified(self) -> bool:
        return self.status == 304


class _DiscardingJar(http.cookiejar.CookieJar):
    """A jar every cookie falls through, however it is added."""

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        """Discard it."""


class _NoCookies(httpx.Cookies):
    """httpx's cookie mapping over a jar that keeps nothing (one instance serves every client)."""

    def __init__(self) -> None:
        super().__init__(_DiscardingJar())

    def extract_cookies(self, response: httpx.Response) -> None:
        """Ignore the response's ``Set-Cookie`` headers without parsing them."""


_NO_COOKIES = _NoCookies()


class StatelessClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` without a cookie jar: every fetch stands alone.

    A crawler that keeps cookies fetches pages as one long session, so what it indexes
    depends on the order it crawled in (a consent wall passed once, a session id), which
    search engines' crawlers avoid by fetching statelessly. httpx's jar also leaked:
    it keys cookies by the request's host, and a plain-HTTP request goes to the address
    the guard vetted (``Host`` set by hand), so one site's cookies went to every site on
    that address. Skipping the jar also saves ~18 µs a response of ``Set-Cookie``
    parsing. The jar is replaced through the public ``cookies`` property, which httpx
    reads wherever it would store or send cookies."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        raise TypeError("the crawler's client keeps no cookies")


def make_client(
    *,
    timeout_s: float,
    max_connections: int = 100,
    transport: httpx.AsyncBaseTransport | None = None,
    guard: AddressGuard | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncClient:
    """The crawl's one client: pooled keep-alive connections, no automatic redirects.

    With a ``guard`` (and no ``transport``) connections are pinned to vetted addresses
    (``crawl.fetch.pinning``), HTTPS included. ``transport`` replaces httpx's own connection
    pool (its limits and the pinning then do not apply): a recording or fault-injecting
    transport for tests, a proxy transport, another backend. ``verify`` is the TLS trust
    (a test's own CA, say).
    """
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    if transport is None and guard is not None:
        # One pool per origin (``crawl.fetch.origin_pools``), all sharing one TLS context: loading
        # the CA bundle per host would cost ~1 ms and a few hundred kB each.
        tls = (
            verify
            if isinstance(verify, ssl.SSLContext)
            else httpx.create_ssl_context(verify, trust_env=False)
        )
        vetted = guard
        transport = PerOriginTransport(
            lambda: pinned_transport(vetted, limits=limits, verify=tls), max_origins=max_connections
        )
    return StatelessClient(
        follow_redirects=False,
        timeout=httpx.Timeout(timeout_s),
        limits=limits,
        trust_env=False,
        transport=transport,
        verify=verify,
    )


class Fetcher:
    """Fetches one URL with the guard, redirect, size and time limits applied."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        guard: AddressGuard,
        *,
        user_agent: str,
        max_bytes: int,
        max_redirects: int,
        timeout_s: float,
    ) -> None:
        self._client = client
        self._guard = guard
        self._user_agent = user_agent
        self._max_bytes = max_bytes
        self._max_redirects = max_redirects
        self._timeout_s = timeout_s
        self._timeouts = client.timeout.as_dict()
        """What ``build_request`` would add to each request: the client's timeouts."""

    @classmethod
    def from_settings(cls, s: CrawlSettings, client: httpx.AsyncClient, guard: AddressGuard) -> Self:
        return cls(
            client,
            guard,
            user_agent=s.user_agent,
            max_bytes=s.max_page_bytes,
            max_redirects=s.max_redirects,
            timeout_s=s.fetch_timeout_s,
        )

    async def fetch(
        self,
        url: str,
        *,
        etag: str = "",
        last_modified: str = "",
        hop_check: HopCheck | None = None,
        follow_cross_origin: bool = False,
        host_gate: HopCheck | None = None,
        max_bytes: int | None = None,
        redirects_so_far: int = 0,
        hop_delay_s: float = 0.0,
        truncate: bool = False,
    ) -> FetchResult:
        """GET a canonical URL. Raises ``FetchError``, ``TooLarge`` or ``OutOfScope``.

        ``follow_cross_origin`` is for robots.txt and sitemaps, which RFC 9309 says to
        follow across authorities; pages leave cross-origin hops to the frontier.
        ``host_gate`` is awaited before such a hop lands on another host: it holds that
        host's politeness slot (``crawl.frontier.host_slots``) or raises.
        ``hop_delay_s`` is waited before each redirect hop: a hop is one more request to
        the same host, and politeness applies to it too. ``truncate`` keeps the first
        ``max_bytes`` of a longer body instead of raising ``TooLarge`` (robots.txt).
        """
        cap = max_bytes if max_bytes is not None else self._max_bytes
        started = time.monotonic()
        current = url
        hops = redirects_so_far
        visited = {url}
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                while True:
                    result = await self._fetch_once(
                        url,
                        current,
                        etag=etag,
                        last_modified=last_modified,
                        max_bytes=cap,
                        hops=hops,
                        truncate=truncate,
                    )
                    if result.status not in _REDIRECTS:
                        return replace(result, elapsed_s=time.monotonic() - started)
                    location = result.headers.get("location", "").strip()
                    if not location:
                        return replace(result, elapsed_s=time.monotonic() - started)
                    target = canonicalize_url(location, base=current)
                    if not target:
                        raise FetchError(
                            url,
                            f"unfollowable redirect to {location[:200]!r}",
                            FetchFailure.BAD_REDIRECT,
                        )
                    if target in visited:
                        raise FetchError(url, f"redirect loop back to {target}", FetchFailure.REDIRECT_LOOP)
                    visited.add(target)
                    hops += 1
                    if hops > self._max_redirects:
                        raise FetchError(url, "too many redirects", FetchFailure.TOO_MANY_REDIRECTS)
                    if origin_of(target) != origin_of(current) and not follow_cross_origin:
                        return replace(
                            result,
                            redirect_to=target,
                            redirects=hops,
                            elapsed_s=time.monotonic() - started,
                        )
                    if host_gate is not None and host_of(target) != host_of(current):
                        await host_gate(target)
                    if hop_check is not None:
                        await hop_check(target)
                    if hop_delay_s > 0:
                        await asyncio.sleep(hop_delay_s)
                    current = target
                    etag = last_modified = ""
        except TimeoutError:
            raise FetchError(url, "timeout", FetchFailure.TIMEOUT) from None

    async def _fetch_once(
        self,
        url: str,
        current: str,
        *,
        etag: str,
        last_modified: str,
        max_bytes: int,
        hops: int,
        truncate: bool = False,
    ) -> FetchResult:
        scheme, _, rest = current.partition("://")
        authority, slash, path = rest.partition("/")
        host = authority.rsplit(":", 1)[0] if not authority.endswith("]") else authority
        port = authority[len(host) + 1 :] if len(authority) > len(host) else ""
        address = await self._guard.checked_address(host)
        headers = {
            "User-Agent": self._user_agent,
            "Accept": "text/html,application/xhtml+xml,*/*;q=0.8",
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        target = current
        if scheme == "http":
            ip_host = f"[{address}]" if ":" in address else address
            target = f"http://{ip_host}{':' + port if port else ''}/{path}"
            headers["Host"] = authority
        # Built here rather than by ``client.build_request``, which merges the client's
        # default headers (all set above but ``Connection: keep-alive``, HTTP/1.1's
        # default) and re-parses the URL: half of the request's ~60 µs. The WARC request
        # record (``request_headers``) is now exactly the header set sent.
        request = httpx.Request("GET", target, headers=headers, extensions={"timeout": self._timeouts})
        sent_at = time.time()
        try:
            with pinned(host, address):
                response = await self._client.send(request, stream=True)
        except httpx.InvalidURL as exc:
            # httpx parses a redirect's Location while receiving it: ``javascript:...``
            # and other non-URLs fail there, before the response is returned.
            raise FetchError(current, f"unfollowable redirect: {exc}", FetchFailure.BAD_REDIRECT) from None
        except httpx.TimeoutException:
            raise FetchError(current, "timeout", FetchFailure.TIMEOUT) from None
        except httpx.TransportError as exc:
            logger.debug("Transport error on %s: %r", current, exc)
            raise FetchError(current, f"connect: {type(exc).__name__}", FetchFailure.CONNECT) from exc
        raw_size = 0
        try:
            declared = response.headers.get("content-length", "")
            if not truncate and declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
                raise TooLarge(f"{current} declares {declared} bytes, over the {max_bytes}-byte cap")
            decoder = BodyDecoder(response.headers.get("content-encoding", ""), max_bytes=max_bytes)
            chunks: list[bytes] = []
            wire: list[bytes] = []
            try:
                async for raw in response.aiter_raw():
                    room = max_bytes - raw_size
                    raw_size += len(raw)
                    if raw_size > max_bytes:
                        if truncate:  # keep the part of this read below the cap
                            wire.append(raw[:room])
                            chunks.append(decoder.feed(raw[:room]))
                        raise TooLarge(f"{current} sent more than the {max_bytes}-byte cap")
                    wire.append(raw)
                    chunks.append(decoder.feed(raw))
                chunks.append(decoder.finish())
            except (TooLarge, DecodedTooLarge) as exc:
                if not truncate:
                    raise
                logger.debug("%s: kept the first %d bytes (%s)", current, max_bytes, exc)
                if isinstance(exc, DecodedTooLarge):
                    chunks.append(exc.head)
                chunks = [b"".join(chunks)[:max_bytes]]
        except DecodedTooLarge:
            raise TooLarge(f"{current} decodes to more than the {max_bytes}-byte cap") from None
        except DecodingFailed as exc:
            raise FetchError(current, f"bad content-encoding: {exc}", FetchFailure.BAD_ENCODING) from exc
        except httpx.TimeoutException:
            raise FetchError(current, "timeout", FetchFailure.TIMEOUT) from None
        except httpx.TransportError as exc:
            raise FetchError(current, f"read: {type(exc).__name__}", FetchFailure.READ) from exc
        finally:
            await response.aclose()
        body = b"".join(chunks)
        wire_body = b"".join(wire)
        response_headers: dict[str, str] = {}
        for name, value in response.headers.multi_items():
            key = name.lower()
            response_headers[key] = f"{response_headers[key]}, {value}" if key in response_headers else value
        return FetchResult(
            url=url,
            final_url=current,
            status=response.status_code,
            headers=response_headers,
            body=body,
            raw_bytes=raw_size,
            wire_body=body if wire_body == body else wire_body,
            redirects=hops,
            address=address,
            request_headers=headers,
            http_version=response.http_version,
            raw_headers=tuple(response.headers.raw),
            reason_phrase=response.extensions.get("reason_phrase", b""),
            fetched_at=sent_at,
        )
