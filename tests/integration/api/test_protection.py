"""The rate limiter's idea of the client: X-Forwarded-For counts only from trusted proxies."""

from __future__ import annotations

import asyncio

import httpx
from starlette.types import Receive, Scope, Send

from api.protection import ProtectionMiddleware


async def ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def statuses(peer: str, trusted: list[str], forwarded: list[str]) -> list[int]:
    """Status of one request per X-Forwarded-For value, from ``peer``, with a burst of 2."""
    app = ProtectionMiddleware(ok, rate_per_s=0.001, burst=2, max_request_bytes=4096, trusted_proxies=trusted)

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=(peer, 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [(await client.get("/", headers={"x-forwarded-for": f})).status_code for f in forwarded]

    return asyncio.run(run())


ROTATING = [f"203.0.113.{i}" for i in range(6)]


def test_a_rotating_forwarded_header_from_a_client_is_ignored() -> None:
    assert statuses("198.51.100.7", [], ROTATING) == [200, 200, 429, 429, 429, 429]
    assert statuses("198.51.100.7", ["10.0.0.0/8"], ROTATING) == [200, 200, 429, 429, 429, 429]


def test_a_trusted_proxy_names_each_client() -> None:
    assert statuses("10.1.2.3", ["10.0.0.0/8"], ROTATING) == [200] * 6
    # The rightmost untrusted hop is the client: a client-written prefix changes nothing.
    spoofed = [f"{fake}, 203.0.113.9" for fake in ROTATING]
    assert statuses("10.1.2.3", ["10.0.0.0/8"], spoofed) == [200, 200, 429, 429, 429, 429]
