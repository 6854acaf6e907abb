"""Typed access to what the app opened in its lifespan."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, Request

from api.workers import serving_workers
from core.settings import Settings
from retrieval.query.service import SearchService

# ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, and a thread
# hop per request costs the event loop far more than reading an attribute.


async def get_search(request: Request) -> SearchService:
    service: SearchService = request.app.state.search
    return service


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


T = TypeVar("T")


def search_limiter(settings: Settings, *, remote_shards: bool = False) -> anyio.CapacityLimiter:
    """How many searches may run at once (``api.search_threads``, else :func:`default_search_threads`)."""
    return anyio.CapacityLimiter(settings.api.search_threads or default_search_threads(remote_shards))


def default_search_threads(remote_shards: bool) -> int:
    """One search at a time in a worker of several with the shards in process: the workers
    already keep the cores busy, and a second thread only made the GIL change hands (LTR at 8
    clients on two workers: 93 q/s and p99 189 ms against 79 q/s and 251 ms with four threads
    each, DECISIONS 82). Twice the CPUs for one process, or when shards answer over the network
    (a search then mostly waits)."""
    if serving_workers() > 1 and not remote_shards:
        return 1
    return 2 * (os.cpu_count() or 1)


async def in_search_thread(request: Request, work: Callable[[], T]) -> T:
    """Run blocking search work in a worker thread, as many at once as the limiter allows.

    Searches encode with a model and rank with numpy and LightGBM (CPU work): they must
    not block the event loop, and more of them side by side than cores only adds GIL
    contention (see ``ApiSettings.search_threads``).
    """
    return await anyio.to_thread.run_sync(work, limiter=request.app.state.search_limiter)


SearchDep = Annotated[SearchService, Depends(get_search)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
