"""One small connection pool per origin, in front of httpcore's pool.

httpcore's ``AsyncConnectionPool`` scans all of its connections twice per request, and
once per idle connection inside that scan (``len([... for c in connections])``), so a
request costs O(connections²). A crawler keeps a connection open to every host it
visits: with 20 hosts that scan was ~18% of a crawl's CPU (cProfile, 2,000 pages), and
it grows with the square of the hosts. Routed by origin (scheme, host, port), each
pool holds the one or two connections of its own host and the scan is trivial.

Pools are kept for the ``max_origins`` most recently used origins; a pool beyond that
is closed once none of its responses is still being read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from types import TracebackType

import httpx

__all__ = ["PerOriginTransport"]

_Origin = tuple[bytes, bytes, int | None]


class PerOriginTransport(httpx.AsyncBaseTransport):
    """Routes each request to the transport of its origin, made by ``factory`` on first use."""

    def __init__(self, factory: Callable[[], httpx.AsyncBaseTransport], *, max_origins: int) -> None:
        self._factory = factory
        self._max_origins = max(1, max_origins)
        self._pools: OrderedDict[_Origin, httpx.AsyncBaseTransport] = OrderedDict()
        self._reading: dict[_Origin, int] = {}
        """Responses per origin not yet closed: their pool must stay open."""

    def __len__(self) -> int:
        return len(self._pools)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.raw_scheme, url.raw_host, url.port)
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = self._factory()
            await self._close_surplus(keep=origin)
        else:
            self._pools.move_to_end(origin)
        self._reading[origin] = self._reading.get(origin, 0) + 1
        try:
            response = await pool.handle_async_request(request)
        except BaseException:
            self._done(origin)
            raise
        response.stream = _Tracked(response.stream, lambda: self._done(origin))
        return response

    def _done(self, origin: _Origin) -> None:
        left = self._reading[origin] - 1
        if left:
            self._reading[origin] = left
        else:
            del self._reading[origin]

    async def _close_surplus(self, *, keep: _Origin) -> None:
        """Close the least recently used pools beyond ``max_origins`` that nothing is reading."""
        surplus = len(self._pools) - self._max_origins
        idle = [o for o in self._pools if o != keep and o not in self._reading]
        for origin in idle[: max(0, surplus)]:
            await self._pools.pop(origin).aclose()

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            await pool.aclose()

    async def __aenter__(self) -> PerOriginTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        await self.aclose()


class _Tracked(httpx.AsyncByteStream):
    """A response body that reports, once, when it is closed."""

    def __init__(
        self, inner: httpx.AsyncByteStream | httpx.SyncByteStream, on_close: Callable[[], None]
    ) -> None:
        self._inner = inner
        self._on_close: Callable[[], None] | None = on_close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            if isinstance(self._inner, httpx.AsyncByteStream):
                await self._inner.aclose()
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()
