"""Admin: publish and roll back index generations; the crawl's block list. Needs ``X-API-Key``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, Field

from api.crawl_data import crawl_dir
from api.deps import SearchDep
from api.params import StrictParams
from api.protection import AdminDep
from core.blocklist import BlockList, BlockRule, block
from core.crawldir import CrawlDir
from core.errors import BadParameter, ManifestError, NothingToRollBack, UnknownGeneration
from retrieval.index.manifest import is_generation_id
from retrieval.index.root import IndexRoot

router = APIRouter(tags=["admin"], dependencies=[StrictParams])


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


def _writer(request: Request) -> IndexRoot:
    """The index root, for a change: waits ``index.lock_wait_s`` for another writer (a
    ``trawl run`` step), then answers 409 naming it (``DirectoryBusy``)."""
    settings = request.app.state.settings
    return IndexRoot(request.app.state.index_dir, lock_wait_s=settings.index.lock_wait_s)


@router.get("/v1/index/generations", response_model=list[GenerationModel])
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


@router.post("/v1/index/publish", response_model=PublishResult)
def publish(
    request: Request, service: SearchDep, _admin: AdminDep, body: Annotated[PublishRequest, Body()]
) -> PublishResult:
    """Serve ``generation``: 400 for a malformed id, 404 for one the index root does not hold.

    Both are the caller's mistake, not an unavailable index (``ManifestError`` is a 503
    elsewhere: a serving generation gone from disk). 409 while another writer holds the root."""
    root = _writer(request)
    if not is_generation_id(body.generation):
        raise BadParameter(f"{body.generation!r} is not a generation id; see GET /v1/index/generations.")
    try:
        root.publish(body.generation)
    except ManifestError as exc:
        raise UnknownGeneration(str(exc)) from None
    service.generations.refresh()
    return PublishResult(serving=service.generation.id)


@router.post("/v1/index/rollback", response_model=PublishResult)
def rollback(request: Request, service: SearchDep, _admin: AdminDep) -> PublishResult:
    """Serve the generation published before the current one; 409 when there is none (or it
    is gone from disk)."""
    try:
        _writer(request).rollback()
    except ManifestError as exc:
        raise NothingToRollBack(str(exc)) from None
    service.generations.refresh()
    return PublishResult(serving=service.generation.id)


class BlockRequest(BaseModel):
    value: str = Field(min_length=1, max_length=2048, description="A host, or a URL glob like http://h/x/*.")
    kind: Literal["host", "pattern"] | None = Field(
        None, description="Default: pattern if it has :// or * ? [."
    )
    reason: str = Field("", max_length=1000, description="Why; kept for trawl inspect.")


class BlockModel(BaseModel):
    kind: str
    value: str
    reason: str
    added_at: float


class BlockResult(BaseModel):
    rule: BlockModel
    removed: int
    """Stored pages the rule took out of the index (they leave search within the indexer's lag)."""


def _model(rule: BlockRule) -> BlockModel:
    return BlockModel(kind=rule.kind, value=rule.value, reason=rule.reason, added_at=rule.added_at)


@router.get("/v1/admin/blocks", response_model=list[BlockModel])
def list_blocks(request: Request, _admin: AdminDep) -> list[BlockModel]:
    return [_model(r) for r in BlockList(CrawlDir(crawl_dir(request)).blocklist).rules()]


@router.post("/v1/admin/blocks", response_model=BlockResult)
def add_block(request: Request, _admin: AdminDep, body: Annotated[BlockRequest, Body()]) -> BlockResult:
    """Block at once: no worker leases a matching URL from its next lease on."""
    rule, removed = block(crawl_dir(request), body.value, reason=body.reason, kind=body.kind)
    return BlockResult(rule=_model(rule), removed=removed)


@router.delete("/v1/admin/blocks", response_model=list[BlockModel])
def remove_block(
    request: Request, _admin: AdminDep, value: Annotated[str, Query(min_length=1, max_length=2048)]
) -> list[BlockModel]:
    """Drop the rules with this value; returns the rules left."""
    rules = BlockList(CrawlDir(crawl_dir(request)).blocklist)
    if not rules.remove(value):
        raise BadParameter(f"No block rule for {value!r}.")
    return [_model(r) for r in rules.rules()]
