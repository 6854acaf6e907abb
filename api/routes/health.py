"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import SearchDep
from api.metrics import REGISTRY
from api.schemas import HealthModel

router = APIRouter()


@router.get("/healthz", response_model=HealthModel)
async def healthz(service: SearchDep) -> HealthModel:
    return HealthModel(
        status="ok",
        documents=service.num_docs,
        generation=service.generation.id,
        rankers=service.ranker_names(),
    )


@router.get("/readyz", response_model=HealthModel, responses={503: {"description": "Not ready"}})
async def readyz(request: Request, service: SearchDep) -> Response:
    """Ready when the index is open and every shard answers its size."""
    if not request.app.state.ready:
        return Response(
            '{"error":"not_ready","detail":"starting"}', status_code=503, media_type="application/json"
        )
    body = HealthModel(
        status="ready",
        documents=service.num_docs,
        generation=service.generation.id,
        rankers=service.ranker_names(),
    )
    return Response(body.model_dump_json(), media_type="application/json")


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
