"""Protection at the edge: admin API key, per-client rate limit, request size limits.

Implemented as pure ASGI middleware (cheaper than ``BaseHTTPMiddleware``, and it never
buffers a body): an over-long URL gets 414, an over-large body 413, a client over its
token bucket 429 with ``Retry-After``.

The client is the connection's peer address. ``X-Forwarded-For`` is read only when the
peer is one of ``api.trusted_proxies`` (a reverse proxy we run), and then from the
right: the first address that is not a trusted proxy is the client. Anyone else could
put a fresh address in the header on every request and never be limited. (uvicorn's
own proxy-header rewriting is off in ``trawl serve`` so this is the only reader.)
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import math
import threading
import time
from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, Header, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.metrics import RATE_LIMITED
from core.errors import AdminDisabled, AdminKeyRejected, BodyTooLarge


async def require_admin(request: Request, x_api_key: Annotated[str | None, Header()] = None) -> None:
    key = request.app.state.settings.api.admin_api_key
    if key is None:
        raise AdminDisabled("Admin endpoints are off: set TRAWL_API__ADMIN_API_KEY to enable them.")
    if x_api_key is None or not hmac.compare_digest(x_api_key.encode(), key.get_secret_value().encode()):
        raise AdminKeyRejected("Missing or wrong X-API-Key header for an admin endpoint.")


AdminDep = Annotated[None, Depends(require_admin)]


class TokenBuckets:
    """One token bucket per client address; old buckets are swept."""

    def __init__(self, rate_per_s: float, burst: int, max_clients: int = 100_000) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, client: str) -> float:
        """0 when allowed, else seconds until a token is available."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[client] = (tokens - 1.0, now)
                wait = 0.0
            else:
                self._buckets[client] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
            if len(self._buckets) > self.max_clients:
                cutoff = now - self.burst / max(self.rate, 1e-9)
                self._buckets = {k: v for k, v in self._buckets.items() if v[1] >= cutoff}
        return wait


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


class ClientAddress:
    """Who a request comes from, honouring ``X-Forwarded-For`` only from trusted proxies."""

    def __init__(self, trusted_proxies: Sequence[str]) -> None:
        self.trusted: tuple[Network, ...] = tuple(
            ipaddress.ip_network(c, strict=False) for c in trusted_proxies
        )

    def _is_trusted(self, text: str) -> bool:
        address = _address(text)
        return address is not None and any(address in net for net in self.trusted)

    def of(self, scope: Scope) -> str:
        peer = str((scope.get("client") or ("unknown", 0))[0])
        if not self.trusted or not self._is_trusted(peer):
            return peer
        hops = [
            hop.strip()
            for name, value in scope.get("headers", [])
            if name == b"x-forwarded-for"
            for hop in value.decode("latin-1").split(",")
            if hop.strip()
        ]
        for hop in reversed(hops):
            if not self._is_trusted(hop):
                return hop if _address(hop) is not None else peer
        return hops[0] if hops else peer


async def _reply(
    send: Send, status: int, code: str, detail: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    body = json.dumps({"error": code, "detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ProtectionMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        rate_per_s: float,
        burst: int,
        max_request_bytes: int,
        trusted_proxies: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.buckets = TokenBuckets(rate_per_s, burst) if rate_per_s > 0 else None
        self.clients = ClientAddress(trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) > self.max_request_bytes:
            await _reply(send, 414, "uri_too_long", f"The URL exceeds {self.max_request_bytes} bytes.")
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_request_bytes:
                await _reply(
                    send, 413, "too_large", f"The request body exceeds {self.max_request_bytes} bytes."
                )
                return
        if self.buckets is not None and scope.get("path", "") not in ("/healthz", "/readyz", "/metrics"):
            client = self.clients.of(scope)
            wait = self.buckets.take(client)
            if wait > 0:
                RATE_LIMITED.inc()
                await _reply(
                    send,
                    429,
                    "rate_limited",
                    f"Too many requests from {client}; retry in {wait:.1f} s.",
                    ((b"retry-after", str(max(1, math.ceil(wait))).encode()),),
                )
                return
        received = 0
        started = replied = False

        async def limited_receive() -> Message:
            # The 413 goes out here, not where BodyTooLarge is caught: FastAPI's body
            # parsing catches every exception and answers 400 "error parsing the body",
            # so a chunked body (no Content-Length) never reached an ``except`` below.
            nonlocal received, replied
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_request_bytes:
                    if not started and not replied:
                        replied = True
                        await _reply(
                            send,
                            413,
                            "too_large",
                            f"The request body exceeds {self.max_request_bytes} bytes.",
                        )
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            """Pass the app's response on, unless the 413 has already answered the request."""
            nonlocal started
            if replied:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            pass  # answered in limited_receive (or the app had already started its own answer)
