"""``create_app(settings, index_dir=...)``: the FastAPI application.

The index is opened once in the lifespan and kept in ``app.state`` (typed access in
``api.deps``). Nothing here builds settings: the caller does.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from api.errors import register_error_handlers
from api.routes import health, search, web
from core.settings import Settings
from retrieval.search import SearchService


def create_app(settings: Settings, *, index_dir: Path) -> FastAPI:
    """Build the app serving ``index_dir``. The index is opened at start-up."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        app.state.search = SearchService.open(index_dir, settings.search)
        yield

    app = FastAPI(
        title="Trawl",
        version="0.1.0",
        description="Web search: crawl, index, rank and serve.",
        lifespan=lifespan,
    )
    register_error_handlers(app)
    app.include_router(search.router)
    app.include_router(health.router)
    app.include_router(web.router)
    return app
