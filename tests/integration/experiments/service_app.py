"""A search service wired for experiments, exactly as ``api.app`` should be; run as a real process.

``python -m tests.integration.experiments.service_app --index DIR --port N`` serves
``/v1/search`` and ``/v1/click`` with settings from ``TRAWL_*`` variables, and shuts
down gracefully on SIGTERM (uvicorn runs the lifespan's exit, which flushes the logs).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Query, Request, Response

from api.deps import SearchDep
from api.errors import register_error_handlers
from api.experiments import open_experiments, search_with_experiments
from api.routes import experiments
from api.schemas import SearchResponseModel
from core.settings import Settings
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService


def create_experiment_app(settings: Settings, *, index_dir: Path) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        app.state.search = SearchService.open(index_dir, settings.search)
        app.state.experiments = open_experiments(settings)
        try:
            yield
        finally:
            app.state.experiments.close()

    app = FastAPI(lifespan=lifespan)
    register_error_handlers(app)
    app.include_router(experiments.router)

    @app.get("/v1/search")
    async def search(
        request: Request,
        service: SearchDep,
        q: Annotated[str, Query()],
        page: Annotated[int, Query(ge=1)] = 1,
        size: Annotated[int | None, Query(ge=1)] = None,
    ) -> Response:
        outcome = search_with_experiments(request, service, SearchRequest(q, page=page, size=size))
        body = SearchResponseModel.from_domain(outcome.response).model_dump_json()
        http = Response(body, media_type="application/json")
        outcome.apply(http)
        return http

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = create_experiment_app(Settings(), index_dir=args.index)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
