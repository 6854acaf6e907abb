"""Liveness, readiness and Prometheus metrics; what is live (generation, ranker, backfill)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import SearchDep
from api.metrics import REGISTRY
from api.params import StrictParams
from api.schemas import BackfillModel, HealthModel
from retrieval.query.service import SearchService
from retrieval.vectors.backfill_progress import read_progress

router = APIRouter()


def backfill_status(request: Request) -> BackfillModel | None:
    """The progress file of the index root's embeddings backfill, when one ran."""
    progress = read_progress(Path(request.app.state.index_dir))
    if progress is None:
        return None
    raw: dict[str, Any] = asdict(progress)
    return BackfillModel(
        **{k: v for k, v in raw.items() if k in BackfillModel.model_fields}, percent=progress.percent
    )


def live_status(request: Request, service: SearchService) -> dict[str, Any]:
    """What the home page shows: the serving generation, its default ranker, the backfill."""
    generation = service.generation
    return {
        "generation": generation.id,
        "ranker": service.default_ranker(generation),
        "vectors": service.can_use_vectors(generation),
        "backfill": backfill_status(request),
    }


def _health(request: Request, service: SearchService, status: str) -> HealthModel:
    return HealthModel(
        status=status,
        documents=service.num_docs,
        generation=service.generation.id,
        rankers=service.ranker_names(),
        ranker=service.default_ranker(service.generation),
        ranker_reason=service.default_reason(service.generation),
        backfill=backfill_status(request),
    )


@router.get("/healthz", response_model=HealthModel, dependencies=[StrictParams])
async def healthz(request: Request, service: SearchDep) -> HealthModel:
    return _health(request, service, "ok")


@router.get(
    "/readyz",
    response_model=HealthModel,
    responses={503: {"description": "Not ready"}},
    dependencies=[StrictParams],
)
async def readyz(request: Request, service: SearchDep) -> Response:
    """Ready when the index is open and every shard answers its size."""
    if not request.app.state.ready:
        return Response(
            '{"error":"not_ready","detail":"starting"}', status_code=503, media_type="application/json"
        )
    return Response(_health(request, service, "ready").model_dump_json(), media_type="application/json")


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
