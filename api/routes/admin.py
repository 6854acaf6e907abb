"""Admin: publish and roll back index generations. Needs ``X-API-Key``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, Field

from api.deps import SearchDep
from api.protection import AdminDep
from retrieval.manifest import IndexRoot

router = APIRouter(prefix="/v1/index", tags=["admin"])


class PublishRequest(BaseModel):
    generation: str = Field(max_length=100, description="Generation id (see GET /v1/index/generations).")


class GenerationModel(BaseModel):
    generation: str
    documents: int
    shards: int
    built_at: float
    current: bool


class PublishResult(BaseModel):
    serving: str


@router.get("/generations", response_model=list[GenerationModel])
def list_generations(request: Request, _admin: AdminDep) -> list[GenerationModel]:
    root = IndexRoot(request.app.state.index_dir)
    return [
        GenerationModel(
            generation=g.generation,
            documents=g.manifest.docs,
            shards=g.manifest.shards,
            built_at=g.manifest.built_at,
            current=g.current,
        )
        for g in root.list()
    ]


@router.post("/publish", response_model=PublishResult)
def publish(
    request: Request, service: SearchDep, _admin: AdminDep, body: Annotated[PublishRequest, Body()]
) -> PublishResult:
    IndexRoot(request.app.state.index_dir).publish(body.generation)
    service.generations.refresh()
    return PublishResult(serving=service.generation.id)


@router.post("/rollback", response_model=PublishResult)
def rollback(request: Request, service: SearchDep, _admin: AdminDep) -> PublishResult:
    IndexRoot(request.app.state.index_dir).rollback()
    service.generations.refresh()
    return PublishResult(serving=service.generation.id)
