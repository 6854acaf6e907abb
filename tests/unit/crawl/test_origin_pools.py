"""PerOriginTransport: one pool per origin, reused, and surplus pools closed only when idle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from crawl.fetch.origin_pools import PerOriginTransport


class _Body(httpx.AsyncByteStream):
    """A body read lazily, as a connection pool's is (not already in memory)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._data


class _Pool(httpx.MockTransport):
    """A transport that answers with its own serial number and records being closed."""

    made: list[_Pool] = []

    def __init__(self) -> None:
        self.serial = len(_Pool.made)
        self.closed = False
        _Pool.made.append(self)
        super().__init__(lambda request: httpx.Response(200, stream=_Body(str(self.serial).encode())))

    async def aclose(self) -> None:
        self.closed = True


def _fresh() -> None:
    _Pool.made = []


def test_each_origin_gets_its_own_pool_and_keeps_it() -> None:
    _fresh()

    async def go() -> list[str]:
        async with httpx.AsyncClient(transport=PerOriginTransport(_Pool, max_origins=8)) as client:
            urls = [
                "http://a.test/1",
                "http://b.test/1",
                "http://a.test/2",
                "https://a.test/",
                "http://a.test:81/",
            ]
            return [(await client.get(url)).text for url in urls]

    assert asyncio.run(go()) == ["0", "1", "0", "2", "3"]
    assert all(pool.closed for pool in _Pool.made)  # closing the client closes every pool


def test_surplus_pool_is_closed_once_its_response_is_read() -> None:
    _fresh()

    async def go() -> None:
        transport = PerOriginTransport(_Pool, max_origins=1)
        async with httpx.AsyncClient(transport=transport) as client:
            async with client.stream("GET", "http://a.test/") as open_response:
                await client.get("http://b.test/")
                assert not _Pool.made[0].closed  # a.test's body is still being read
                await open_response.aread()
            await client.get("http://c.test/")
            assert [pool.closed for pool in _Pool.made] == [True, True, False]
            assert len(transport) == 1

    asyncio.run(go())
