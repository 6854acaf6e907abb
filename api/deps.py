"""Typed access to what the app opened in its lifespan."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, Request

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


def search_limiter(settings: Settings) -> anyio.CapacityLimiter:
    """How many searches may run at once (``api.search_threads``)."""
    return anyio.CapacityLimiter(settings.api.search_threads or 2 * (os.cpu_count() or 1))


async def in_search_thread(request: Request, work: Callable[[], T]) -> T:
    """Run blocking search work in a worker thread, as many at once as the limiter allows.

    Searches encode with a model and rank with numpy and LightGBM (CPU work): they must
    not block the event loop, and more of them side by side than cores only adds GIL
    contention (see ``ApiSettings.search_threads``).
    """
    return await anyio.to_thread.run_sync(work, limiter=request.app.state.search_limiter)


SearchDep = Annotated[SearchService, Depends(get_search)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
