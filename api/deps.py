"""Typed access to what the app opened in its lifespan."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from core.settings import Settings
from retrieval.search import SearchService

# ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop
# per request (an eighth of the event loop's time per search, profiled) for reading an
# attribute.


async def get_search(request: Request) -> SearchService:
    service: SearchService = request.app.state.search
    return service


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SearchDep = Annotated[SearchService, Depends(get_search)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
