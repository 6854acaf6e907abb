"""Liveness, readiness and Prometheus metrics; what is live (generation, ranker, backfill)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from api.deps import SearchDep
from api.live import health
from api.metrics import CLUSTER_NODES, SHARD_REPLICAS, SHARD_SKIPPED, exposition
from api.params import StrictParams
from api.schemas import HealthModel

router = APIRouter()


@router.get("/healthz", response_model=HealthModel, dependencies=[StrictParams])
async def healthz(request: Request, service: SearchDep) -> HealthModel:
    """``ok``, or ``degraded`` with ``problems`` saying what is not served and why (still 200:
    the process is alive and answers, partially)."""
    return health(request, service, "ok")


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
    return Response(health(request, service, "ready").model_dump_json(), media_type="application/json")


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    service = getattr(request.app.state, "search", None)  # none while starting: the rest still counts
    for circuit in service.shard_circuits() if service is not None else []:
        SHARD_SKIPPED.labels(str(circuit.shard)).set(1 if circuit.open else 0)
    cluster = getattr(request.app.state, "ray_shards", None)
    if cluster is not None:
        replicas, nodes = cluster.seen
        SHARD_REPLICAS.clear()
        for shard, states in replicas.items():
            for state, count in states.items():
                SHARD_REPLICAS.labels(str(shard), state).set(count)
        alive = sum(1 for n in nodes if n["alive"])
        CLUSTER_NODES.labels("alive").set(alive)
        CLUSTER_NODES.labels("lost").set(len(nodes) - alive)
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)
