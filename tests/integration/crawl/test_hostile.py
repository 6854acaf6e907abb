"""Hostile servers on loopback: decompression bombs, DNS rebinding over http and https,
deep nesting, redirect tricks, hostile robots.txt and mislabelled bodies."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import brotli
import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from core.errors import OutOfScope, TooLarge
from core.settings import CrawlSettings
from crawl.fetch.fetcher import Fetcher, make_client
from crawl.fetch.guard import AddressGuard, DnsCache
from crawl.run.loop import Crawler
from crawl.state.sqlite import CrawlDb
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose, self_signed_cert

ROOT = Path(__file__).resolve().parents[3]
BOMB = b"\0" * (256 << 20)
"""256 MiB decoded: gzip sends ~250 KB of it, ``gzip, gzip`` ~1 KB, br ~200 bytes."""


def _bomb_site() -> Site:
    site = Site()
    bodies = {
        "/gzip": (gzip.compress(BOMB, 9), "gzip"),
        "/gzip2": (gzip.compress(gzip.compress(BOMB, 9), 9), "gzip, gzip"),
        "/br": (brotli.compress(BOMB), "br"),
    }
    links = [(path, path) for path in bodies]
    site.page("/", html_page("Bombs", prose(1), links=links))
    # The normal crawl: pages of the same host that never lead to a bomb.
    normal_links = [(f"/normal/{i}", f"n{i}") for i in range(5)]
    site.page(
        "/normal",
        f"<html><body><p>{prose(2)}</p>" + "".join(f'<a href="{h}">{t}</a>' for h, t in normal_links),
    )
    for i in range(5):
        site.page(f"/normal/{i}", f"<html><body><h1>Normal {i}</h1><p>{prose(10 + i)}</p></body></html>")
    for path, (wire, coding) in bodies.items():

        def handler(request: Request, wire: bytes = wire, coding: str = coding) -> Response:
            return Response(wire, headers={"content-encoding": coding, "content-type": "text/html"})

        async def serve(request: Request, handler=handler) -> Response:  # noqa: ANN001
            return handler(request)

        site.routes[path] = serve
    return site


@pytest.fixture(scope="module")
def bombs() -> Iterator[HostServer]:
    server = HostServer(_bomb_site(), "127.0.0.7").start()
    yield server
    server.stop()


def _fetcher(guard: AddressGuard, client: httpx.AsyncClient, max_bytes: int = 5 << 20) -> Fetcher:
    return Fetcher(
        client, guard, user_agent="TrawlBot/test", max_bytes=max_bytes, max_redirects=5, timeout_s=5
    )


@pytest.mark.parametrize("path", ["/gzip", "/gzip2", "/br"])
def test_bombs_are_cut_at_the_page_cap(bombs: HostServer, path: str) -> None:
    async def go() -> None:
        guard = AddressGuard(DnsCache(), allowed_networks=["127.0.0.7/32"])
        async with make_client(timeout_s=5, guard=guard) as client:
            with pytest.raises(TooLarge, match="decodes to more than"):
                await _fetcher(guard, client).fetch(bombs.url(path))

    asyncio.run(go())


_RSS_SCRIPT = """
import asyncio, json, resource, sys
from pathlib import Path
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
settings = CrawlSettings(allowed_networks=["127.0.0.7/32"], min_delay_s=0, response_time_factor=0,
                         concurrency=4, flush_interval_s=0.2, parse_workers=1)
summary = asyncio.run(Crawler(Path(sys.argv[1]), settings, seeds=sys.argv[2:]).run())
print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "outcomes": dict(summary.outcomes)}))
"""


def _crawl_rss(tmp: Path, seeds: list[str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(tmp), *seeds],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_crawl_of_bombs_costs_what_a_normal_crawl_does(bombs: HostServer, tmp_path: Path) -> None:
    normal = _crawl_rss(tmp_path / "normal", [bombs.url("/normal")])
    bombed = _crawl_rss(tmp_path / "bombs", [bombs.url("/")])
    assert bombed["outcomes"]["too large"] == 3  # type: ignore[index]
    assert float(bombed["rss_mb"]) - float(normal["rss_mb"]) < 50  # type: ignore[arg-type]


# -- DNS pinning --------------------------------------------------------------


class _Rebinding:
    """An in-process resolver whose answer changes: the allowed address first, then the refused one."""

    def __init__(self) -> None:
        self.answers = ["127.0.0.2"]
        self.calls = 0

    async def __call__(self, host: str) -> list[str]:
        if host != "rebind.test":
            raise OSError(host)
        self.calls += 1
        answer = self.answers[0] if self.calls == 1 else "127.0.0.3"
        return [answer]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    # Never a skip: the rebinding test is the proof that https connects to the vetted address.
    assert shutil.which("openssl"), "the openssl command (Debian's openssl) makes the test certificate"
    return self_signed_cert(tmp_path_factory.mktemp("tls"), "rebind.test")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_rebinding_answer_cannot_steer_the_connection(scheme: str, tls_files: tuple[str, str]) -> None:
    tls = tls_files if scheme == "https" else None
    site = Site()
    site.page("/", "<html><body>allowed</body></html>")
    allowed = HostServer(site, "127.0.0.2", tls=tls).start()
    refused = _bind_same_port(site, "127.0.0.3", allowed.port, tls)  # a rebinding keeps the port
    try:
        verify = ssl.create_default_context(cafile=tls[0]) if tls else True

        async def go() -> None:
            resolver = _Rebinding()
            # TTL 0: every lookup asks the resolver, as a TTL-0 rebinding answer forces.
            guard = AddressGuard(
                DnsCache(resolver, ttl_s=0, negative_ttl_s=0), allowed_networks=["127.0.0.2/32"]
            )
            async with make_client(timeout_s=5, guard=guard, verify=verify) as client:
                url = f"{scheme}://rebind.test:{allowed.port}/"
                result = await _fetcher(guard, client).fetch(url)
                assert (result.status, result.body, result.address) == (
                    200,
                    b"<html><body>allowed</body></html>",
                    "127.0.0.2",
                )
                assert resolver.calls == 1  # the connection used the vetted answer, no second lookup
                with pytest.raises(OutOfScope):
                    await _fetcher(guard, client).fetch(url)
            # The pool's own connections are vetted too, even without the fetcher's pin.
            async with make_client(timeout_s=5, guard=guard, verify=verify) as client:
                with pytest.raises(OutOfScope):
                    await client.get(f"{scheme}://rebind.test:{allowed.port}/other")

        asyncio.run(go())
        assert allowed.recorder.paths() == ["/"]
        assert refused.recorder.paths() == []
    finally:
        allowed.stop()
        refused.stop()


def _bind_same_port(site: Site, address: str, port: int, tls: tuple[str, str] | None) -> HostServer:
    server = HostServer(site, address, tls=tls)
    server._sock.close()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    server._sock, server.port = sock, port
    server._thread = threading.Thread(target=server.server.run, kwargs={"sockets": [sock]}, daemon=True)
    return server.start()


# -- one crawl over hostile hosts ---------------------------------------------

DEEP = (
    "<html><head><title>Deep</title></head><body><p>"
    + prose(9)
    + "</p>"
    + "<div>" * 200_000
    + "</div>" * 200_000
)


def _hostile_site() -> Site:
    site = Site()
    links = [(p, p) for p in ("/deep", "/js", "/file", "/utf16", "/nul", "/binary", "/boom")]
    site.page("/", html_page("Hostile", prose(3), links=links))
    site.page("/deep", DEEP)

    async def js(request: Request) -> Response:
        return Response(status_code=302, headers={"location": "javascript:alert(1)"})

    async def to_file(request: Request) -> Response:
        return Response(status_code=302, headers={"location": "file:///etc/passwd"})

    site.routes["/js"] = js
    site.routes["/file"] = to_file
    site.raw(
        "/utf16", html_page("Plain ascii title", prose(4)).encode(), content_type="text/html; charset=utf-16"
    )
    site.raw("/nul", html_page("Title with a \0 NUL", prose(5)).encode(), content_type="text/html")
    binary = html_page("Looks like text", "x").encode()[:800] + bytes(range(256)) * 1000
    site.raw("/binary", binary, content_type="text/html")
    site.page("/boom", html_page("Boom", prose(6)))
    return site


def _healthy_site(n: int) -> Site:
    site = Site()
    site.page("/", html_page("Healthy", prose(100), links=[(f"/p{i}", f"p{i}") for i in range(n)]))
    for i in range(n):
        site.page(f"/p{i}", html_page(f"Healthy {i}", prose(200 + i)))
    return site


def _robots_site(kind: str) -> Site:
    site = Site()
    site.page("/", html_page(f"Robots {kind}", prose(50), links=[("/private/x", "private"), ("/ok", "ok")]))
    site.page("/ok", html_page(f"Ok {kind}", prose(51 + len(kind))))
    site.page("/private/x", html_page(f"Private {kind}", prose(60 + len(kind))))

    async def robots(request: Request) -> Response:
        if kind == "huge":
            body = b"User-agent: *\nDisallow: /private\n" + b"# padding\n" * (600 * 1024)
            return Response(body, media_type="text/plain")
        if kind == "loop":
            return Response(status_code=301, headers={"location": "/robots.txt"})
        return Response(status_code=301, headers={"location": "file:///etc/robots.txt"})

    site.routes["/robots.txt"] = robots
    return site


class _Boom(httpx.AsyncBaseTransport):
    """A real transport that fails one path with an exception no layer expects (a bug)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/boom":
            raise RuntimeError("a bug")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_one_crawl_over_hostile_hosts(tmp_path: Path) -> None:
    hosts = {
        "hostile": HostServer(_hostile_site(), "127.0.0.8").start(),
        "healthy": HostServer(_healthy_site(12), "127.0.0.9").start(),
        "huge": HostServer(_robots_site("huge"), "127.0.0.10").start(),
        "loop": HostServer(_robots_site("loop"), "127.0.0.11").start(),
        "file": HostServer(_robots_site("file"), "127.0.0.12").start(),
    }
    networks = [f"{s.address}/32" for s in hosts.values()]
    try:
        settings = CrawlSettings(
            allowed_networks=networks,
            min_delay_s=0.05,
            response_time_factor=0,
            concurrency=6,
            flush_interval_s=0.2,
            fetch_timeout_s=3,
            parse_timeout_s=20,
        )
        seeds = [s.url("/") for s in hosts.values()]
        started = time.monotonic()
        summary = asyncio.run(Crawler(tmp_path, settings, seeds=seeds, transport=_Boom()).run())
        elapsed = time.monotonic() - started
        db = CrawlDb(tmp_path / "frontier.sqlite")
        rows = {url: db.row(url) for url in db.iter_urls()}
        db.close()
    finally:
        for server in hosts.values():
            server.stop()
    h = hosts["hostile"].url
    print(f"hostile crawl: {elapsed:.1f} s, outcomes {dict(summary.outcomes)}")
    assert elapsed < 60
    # The deep page is handled in bounded time and healthy fetches never time out meanwhile.
    assert rows[h("/deep")]["outcome"] == "indexed"
    assert all(rows[hosts["healthy"].url(f"/p{i}")]["outcome"] == "indexed" for i in range(12))
    assert "timeout" not in dict(summary.errors)
    # Unfollowable Locations are clean, permanent outcomes.
    for path in ("/js", "/file"):
        assert rows[h(path)]["status"] == "failed"
        assert rows[h(path)]["outcome"].startswith("error: unfollowable redirect")
    assert hosts["hostile"].recorder.paths().count("/js") == 1
    # Mislabelled bodies.
    assert rows[h("/utf16")]["outcome"] == "indexed"
    assert rows[h("/nul")]["outcome"] == "indexed"
    assert rows[h("/binary")]["outcome"] == "not html"
    # A bug on one page is an internal error, counted in the summary.
    assert dict(summary.outcomes).get("internal error") == 1
    assert rows[h("/boom")]["outcome"] == "internal error: RuntimeError"
    # robots.txt: the first 500 KiB of a huge file apply; a loop or a file: target is unavailable = allow.
    assert rows[hosts["huge"].url("/ok")]["outcome"] == "indexed"
    assert rows[hosts["huge"].url("/private/x")]["status"] == "blocked"
    for kind in ("loop", "file"):
        assert rows[hosts[kind].url("/private/x")]["outcome"] == "indexed"
        assert hosts[kind].recorder.paths().count("/robots.txt") <= 6


@pytest.mark.parametrize("coding", ["identity", "gzip"])
def test_a_truncated_body_keeps_exactly_the_first_max_bytes(coding: str) -> None:
    """robots.txt is cut at 500 KiB (RFC 9309), not refused. The chunk that crossed the cap
    was dropped whole, so up to a read's worth (64 KiB) of rules below the cap were lost."""
    cap = 500 * 1024
    text = b"".join(b"Disallow: /private/%07d\n" % i for i in range(40_000))  # ~1 MB of rules
    assert len(text) > 2 * cap
    site = Site()

    async def robots(request: Request) -> Response:
        if coding == "gzip":
            return Response(
                gzip.compress(text), media_type="text/plain", headers={"content-encoding": "gzip"}
            )
        return Response(text, media_type="text/plain")

    site.routes["/robots.txt"] = robots
    server = HostServer(site, "127.0.0.18").start()

    async def go() -> bytes:
        guard = AddressGuard(DnsCache(), allowed_networks=["127.0.0.18/32"])
        async with make_client(timeout_s=5, guard=guard) as client:
            fetched = await _fetcher(guard, client).fetch(
                server.url("/robots.txt"), max_bytes=cap, truncate=True
            )
        return fetched.body

    try:
        body = asyncio.run(go())
    finally:
        server.stop()
    assert body == text[:cap]
