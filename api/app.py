"""``create_app(settings, index_dir=...)``: the FastAPI application.

The lifespan opens the index (the published generation of an index root, or a broker
over remote shards) and, when the index has vectors, the embedding model for query
encoding; both live in ``app.state`` with typed access in ``api.deps``. Nothing here
builds settings: the caller does (``app_from_environment`` is the one exception, for
multi-worker uvicorn, which imports a factory by name).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import anyio
from fastapi import FastAPI

from api import metrics
from api.deps import search_limiter
from api.docs import install_docs
from api.errors import register_error_handlers
from api.experiments import check_rankers, open_experiments
from api.protection import ProtectionMiddleware
from api.push import PushWriter
from api.routes import admin, crawl, documents, experiments, health, indexnow, push, search, suggest, web
from api.workers import die_with_parent
from core.errors import ConfigError
from core.settings import Settings
from retrieval.query.service import SearchService
from retrieval.remote.shard_http import connect_shards

if TYPE_CHECKING:
    from retrieval.ray_serve.deploy import RayShards

logger = logging.getLogger(__name__)


def open_search_service(settings: Settings, index_dir: Path, *, remote: Any = None) -> SearchService:
    """The search service over ``index_dir`` (or ``remote`` shards), with every ranker it can serve.

    One implementation, :func:`rerank.pipeline.open_search_service`, shared with ``trawl
    eval`` so offline figures come from the served path.
    """
    from rerank.pipeline import open_search_service as open_served  # lazy: LightGBM loads with it

    return open_served(settings, index_dir, remote=remote)


def create_app(
    settings: Settings, *, index_dir: Path, shard_urls: str | None = None, ray_shards: RayShards | None = None
) -> FastAPI:
    """Build the app serving ``index_dir``. The index is opened at start-up: in this process,
    over ``shard_urls`` (``trawl shard serve`` processes), or over ``ray_shards`` (Ray Serve
    deployments this app starts, and deletes when it stops)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.ray_shards = ray_shards

        def open_service() -> tuple[Any, SearchService]:
            remote: Any = None
            if shard_urls:
                remote = connect_shards(shard_urls, timeout_s=settings.search.deadline_s * 2)
            elif ray_shards is not None:
                remote = ray_shards.start()
            try:
                service = open_search_service(settings, index_dir, remote=remote)
            except BaseException:
                if ray_shards is not None:
                    ray_shards.close()
                raise
            service.warm(service.generation)  # ready only once a first query costs what later ones do
            return remote, service

        # In a thread: Ray Serve's handles refuse to block an event loop, and nothing else runs yet.
        remote, service = await anyio.to_thread.run_sync(open_service)
        metrics.serving_generation(service.generation.id)

        def on_publish(generation: Any) -> None:
            metrics.serving_generation(generation.id)

        service.generations.listeners.append(on_publish)
        if remote is None:
            service.watch_files()  # content hashes in the background; shard processes check their own
        app.state.settings = settings
        app.state.search = service
        app.state.search_limiter = search_limiter(settings, remote_shards=remote is not None)
        app.state.index_dir = Path(index_dir)
        app.state.push = None
        if settings.api.push_data is not None:
            if remote is not None:
                service.close()
                raise ConfigError("api.push_data needs the index on this machine, not --shard-urls.")
            app.state.push = PushWriter(settings.api.push_data, Path(index_dir), settings)
            app.state.push.start()
        app.state.experiments = open_experiments(settings)
        if settings.api.suggest_at_start and remote is None:
            suggest.start_suggestions(app, service)
        try:
            check_rankers(app.state.experiments.book, service.stages)
        except Exception:
            app.state.experiments.close()
            service.close()
            raise
        app.state.ready = True
        try:
            yield
        finally:
            if app.state.push is not None:
                app.state.push.close()
            app.state.experiments.close()  # flushes impression and click logs
            for stage in service.stages.values():
                close = getattr(stage, "close", None)
                if close is not None:
                    close()  # e.g. the LTR stage's feature log
            service.close()
            if ray_shards is not None:
                ray_shards.close()
            metrics.worker_exiting()

    app = FastAPI(
        title="Trawl",
        version="0.1.0",
        description="Web search: crawl, index, rank and serve. Errors are JSON: {error, detail}.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.ready = False
    register_error_handlers(app)
    app.include_router(search.router)
    app.include_router(suggest.router)
    app.include_router(documents.router)
    app.include_router(push.router)
    app.include_router(admin.router)
    app.include_router(experiments.router)
    app.include_router(health.router)
    app.include_router(web.router)
    app.mount("/static", web.static, name="static")
    app.include_router(crawl.router)
    app.include_router(indexnow.router)
    install_docs(app)
    app.add_middleware(
        ProtectionMiddleware,
        rate_per_s=settings.api.rate_limit_per_s,
        burst=settings.api.rate_limit_burst,
        max_request_bytes=settings.api.max_request_bytes,
        trusted_proxies=settings.api.trusted_proxies,
    )
    app.add_middleware(metrics.RequestMetrics)  # outermost: rate-limited requests count too
    return app


def app_from_environment() -> FastAPI:
    """Factory for ``uvicorn --factory`` with several workers (``trawl serve --workers N``)."""
    index = os.environ.get("TRAWL_SERVE_INDEX")
    if not index:
        raise RuntimeError("TRAWL_SERVE_INDEX is not set; start the service with `trawl serve`.")
    die_with_parent()
    return create_app(Settings(), index_dir=Path(index), shard_urls=os.environ.get("TRAWL_SERVE_SHARDS"))
