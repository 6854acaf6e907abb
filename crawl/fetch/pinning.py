"""DNS pinning for every scheme: connections go to the address the guard vetted.

For plain HTTP the fetcher puts the vetted IP in the URL and sends ``Host``. HTTPS
cannot do that (the TLS handshake needs the host name for SNI and the certificate
check), so the connection pool gets a network backend that connects to an address
instead of resolving the name again: the address the fetcher vetted for this request
(pinned in a context variable around the send), else one the guard vets right there.
httpcore then runs TLS over that socket with ``server_hostname`` = the URL's host, so
SNI and certificate checks are against the name. A DNS answer that changes between
the check and the connect (rebinding) therefore cannot steer the connection.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType

import httpcore
import httpx

from core.errors import OutOfScope
from crawl.fetch.guard import AddressGuard

__all__ = ["PinnedBackend", "pinned", "pinned_transport"]

_NO_PINS: Mapping[str, str] = MappingProxyType({})
_PINS: ContextVar[Mapping[str, str]] = ContextVar("trawl_pinned_addresses", default=_NO_PINS)


@contextlib.contextmanager
def pinned(host: str, address: str) -> Iterator[None]:
    """Within the block, a new connection to ``host`` (in this task) goes to ``address``."""
    token = _PINS.set({**_PINS.get(), host.strip("[]").lower(): address})
    try:
        yield
    finally:
        _PINS.reset(token)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to vetted addresses only; everything else is the wrapped backend's."""

    def __init__(self, guard: AddressGuard, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._guard = guard
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        name = host.strip("[]").lower()
        address = _PINS.get().get(name) or await self._guard.checked_address(name)
        if not self._guard.is_allowed_address(address):
            raise OutOfScope(f"Host {host!r} is pinned to a refused address.")
        return await self._inner.connect_tcp(
            address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise OutOfScope("The crawler does not connect to Unix sockets.")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def pinned_transport(
    guard: AddressGuard, *, limits: httpx.Limits, verify: ssl.SSLContext | bool = True
) -> httpx.AsyncHTTPTransport:
    """httpx's own transport with its connection pool on a ``PinnedBackend``.

    httpx does not take a network backend, so the pool it built is replaced by the
    same pool on the pinned backend (``_pool`` is the one attribute httpx reads).
    """
    transport = httpx.AsyncHTTPTransport(verify=verify, limits=limits, trust_env=False)
    built = transport._pool
    if not isinstance(built, httpcore.AsyncConnectionPool):
        raise TypeError(f"httpx built a {type(built).__name__}; pinning needs an httpcore connection pool")
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=built._ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=False,
        network_backend=PinnedBackend(guard),
    )
    return transport
