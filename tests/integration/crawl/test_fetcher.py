"""The guarded fetcher against a real server: guard, Host header, caps, redirects, conditional GET."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from core.errors import FetchError, OutOfScope, RobotsDenied, TooLarge
from crawl.fetch.fetcher import Fetcher, FetchResult, make_client
from crawl.fetch.guard import AddressGuard, DnsCache
from tests.fixtures.crawl.web import HostServer, Site

ETAG = '"v1"'


def _site() -> Site:
    site = Site()
    site.page("/", "<html><body>hello</body></html>")

    async def stream(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(100):
                yield b"x" * 1024
                await asyncio.sleep(0)

        return StreamingResponse(chunks(), media_type="text/html")

    async def gzipped(request: Request) -> Response:
        body = gzip.compress(b"<html><body>" + b"compressed " * 100 + b"</body></html>")
        return Response(body, headers={"content-encoding": "gzip", "content-type": "text/html"})

    async def conditional(request: Request) -> Response:
        if request.headers.get("if-none-match") == ETAG:
            return Response(status_code=304, headers={"etag": ETAG})
        return Response(b"<p>v1</p>", headers={"etag": ETAG, "content-type": "text/html"})

    async def host_echo(request: Request) -> Response:
        return Response(request.headers.get("host", "").encode(), media_type="text/plain")

    def redirect(target: str):  # noqa: ANN202
        async def handler(request: Request) -> Response:
            return Response(status_code=301, headers={"location": target})

        return handler

    site.routes["/stream"] = stream
    site.routes["/gzip"] = gzipped
    site.routes["/conditional"] = conditional

    async def set_cookie(request: Request) -> Response:
        return Response(b"<p>welcome</p>", headers={"set-cookie": "session=secret; Path=/"})

    async def cookie_echo(request: Request) -> Response:
        return Response(request.headers.get("cookie", "").encode(), media_type="text/plain")

    site.routes["/host"] = host_echo
    site.routes["/set-cookie"] = set_cookie
    site.routes["/cookie"] = cookie_echo
    site.routes["/r1"] = redirect("/r2")
    site.routes["/r2"] = redirect("/")
    site.routes["/to-denied"] = redirect("/denied")
    site.routes["/elsewhere"] = redirect("http://other.test/page")
    return site


@pytest.fixture(scope="module")
def server() -> Iterator[HostServer]:
    srv = HostServer(_site(), "127.0.0.6").start()
    yield srv
    srv.stop()


async def _resolve(host: str) -> list[str]:
    table = {
        "site.test": ["127.0.0.6"],
        "other.test": ["127.0.0.6"],  # another site on the same address
        "rebind.test": ["127.0.0.6", "10.0.0.1"],
    }
    if host not in table:
        raise OSError(host)
    return table[host]


def _fetch(
    url: str,
    *,
    allow: tuple[str, ...] = ("127.0.0.6/32",),
    allow_loopback: bool = False,
    max_bytes: int = 1 << 20,
    transport: httpx.AsyncBaseTransport | None = None,
    **kw: object,
) -> FetchResult:
    async def go() -> FetchResult:
        guard = AddressGuard(DnsCache(_resolve), allow_loopback=allow_loopback, allowed_networks=allow)
        async with make_client(timeout_s=2.0, transport=transport) as client:
            fetcher = Fetcher(
                client, guard, user_agent="TrawlBot/test", max_bytes=max_bytes, max_redirects=3, timeout_s=2.0
            )
            return await fetcher.fetch(url, **kw)  # type: ignore[arg-type]

    return asyncio.run(go())


def test_guard_refuses_loopback_unless_allowed(server: HostServer) -> None:
    before = len(server.recorder.paths())
    with pytest.raises(OutOfScope, match="non-public address 127.0.0.6"):
        _fetch(server.url("/"), allow=())
    with pytest.raises(OutOfScope, match="non-public address 10.0.0.1"):
        _fetch(f"http://rebind.test:{server.port}/")  # one forbidden answer refuses the name
    with pytest.raises(OutOfScope, match="does not resolve"):
        _fetch(f"http://nowhere.test:{server.port}/")
    assert len(server.recorder.paths()) == before
    assert _fetch(server.url("/"), allow=(), allow_loopback=True).status == 200


def test_connects_to_the_checked_address_with_the_host_header(server: HostServer) -> None:
    result = _fetch(f"http://site.test:{server.port}/host")
    assert result.body == f"site.test:{server.port}".encode()
    assert result.address == "127.0.0.6"


def test_the_crawler_keeps_no_cookies(server: HostServer) -> None:
    """Every fetch is stateless, as search engines' crawlers are: a cookie one site sets is
    sent back to no one. A kept cookie also leaked: plain-HTTP requests go to the vetted
    address, so a jar keyed by the request's host gave it to every site on that address."""

    async def go() -> list[bytes]:
        guard = AddressGuard(DnsCache(_resolve), allowed_networks=("127.0.0.6/32",))
        async with make_client(timeout_s=2.0, guard=guard) as client:
            fetcher = Fetcher(
                client, guard, user_agent="TrawlBot/test", max_bytes=1 << 20, max_redirects=3, timeout_s=2.0
            )
            first = await fetcher.fetch(f"http://site.test:{server.port}/set-cookie")
            assert first.status == 200 and "set-cookie" in first.headers
            client.cookies.set("added", "by-hand")  # nor can one be added by hand
            assert not client.cookies
            return [
                (await fetcher.fetch(f"http://{host}:{server.port}/cookie")).body
                for host in ("site.test", "other.test")
            ]

    assert asyncio.run(go()) == [b"", b""]


def test_size_cap_while_streaming_and_decompression(server: HostServer) -> None:
    with pytest.raises(TooLarge, match="more than the 10000-byte cap"):
        _fetch(server.url("/stream"), max_bytes=10_000)
    assert len(_fetch(server.url("/stream")).body) == 100 * 1024
    result = _fetch(server.url("/gzip"))
    assert result.body.count(b"compressed") == 100


def test_same_origin_redirects_are_followed_and_checked(server: HostServer) -> None:
    result = _fetch(server.url("/r1"))
    assert (result.status, result.final_url, result.redirects) == (200, server.url("/"), 2)

    async def deny(target: str) -> None:
        if target.endswith("/denied"):
            raise RobotsDenied(f"robots.txt disallows {target}")

    with pytest.raises(RobotsDenied):
        _fetch(server.url("/to-denied"), hop_check=deny)
    with pytest.raises(FetchError, match="too many redirects"):
        _fetch(server.url("/r1"), redirects_so_far=2)


def test_cross_origin_redirect_is_returned_for_the_frontier(server: HostServer) -> None:
    result = _fetch(server.url("/elsewhere"))
    assert (result.status, result.redirect_to, result.final_url) == (
        301,
        "http://other.test/page",
        server.url("/elsewhere"),
    )


def test_conditional_get(server: HostServer) -> None:
    first = _fetch(server.url("/conditional"))
    assert (first.status, first.headers["etag"]) == (200, ETAG)
    again = _fetch(server.url("/conditional"), etag=first.headers["etag"])
    assert again.not_modified and again.body == b""


class _Recording(httpx.AsyncBaseTransport):
    """Hands every request to a real HTTP transport and keeps what went through it."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_an_injected_transport_carries_every_hop(server: HostServer) -> None:
    transport = _Recording()
    result = _fetch(f"http://site.test:{server.port}/r1", transport=transport)
    assert (result.status, result.final_url, result.body) == (
        200,
        f"http://site.test:{server.port}/",
        b"<html><body>hello</body></html>",
    )
    authority = f"site.test:{server.port}"
    assert [(r.url.host, r.url.path, r.headers["host"]) for r in transport.requests] == [
        ("127.0.0.6", "/r1", authority),
        ("127.0.0.6", "/r2", authority),
        ("127.0.0.6", "/", authority),
    ]
