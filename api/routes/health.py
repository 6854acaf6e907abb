"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import SearchDep
from api.schemas import HealthModel

router = APIRouter()


@router.get("/healthz", response_model=HealthModel)
async def healthz(service: SearchDep) -> HealthModel:
    return HealthModel(status="ok", documents=service.num_docs, generation=service.generation.id)
