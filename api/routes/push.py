"""``PUT``/``DELETE /v1/documents/{id}`` and ``POST /v1/documents``: push documents (admin key).

A pushed document has the fields of a JSON Lines line (``crawl.ingest.json_documents``):
``url``, ``title``, ``body``, and optional ``headings``, ``lang``, ``published``; others are
kept as metadata (not indexed). It is answered once written to disk (``api.push``) and is
searchable when the served index has applied it: ``api.push_poll_s`` plus one step.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Request
from pydantic import BaseModel, Field

from api.params import StrictParams
from api.protection import AdminDep
from api.push import PushWriter
from api.schemas import ErrorModel
from core.deletions import Removal
from core.errors import BadDocument, PushDisabled
from core.types import doc_id_for
from crawl.ingest.json_documents import MAX_ID_CHARS, document_from_json, id_key

router = APIRouter(tags=["push"], dependencies=[StrictParams])

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorModel},
    401: {"model": ErrorModel},
    403: {"model": ErrorModel},
    404: {"model": ErrorModel},
}
MAX_BATCH = 1000


class PushResult(BaseModel):
    written: int = Field(description="Documents stored.")
    deleted: int = Field(description="Deletions stored.")
    doc_ids: list[str] = Field(description="The doc_id of each document stored, in order.")
    backlog: int = Field(description="Pushed documents the served index has not applied yet.")


class PushBatch(BaseModel):
    documents: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_BATCH)
    """Each with an ``id`` and the fields of a single push."""
    delete: list[str] = Field(default_factory=list, max_length=MAX_BATCH)
    """Ids to delete (applied before this batch's documents)."""


def _writer(request: Request) -> PushWriter:
    writer: PushWriter | None = getattr(request.app.state, "push", None)
    if writer is None:
        raise PushDisabled(
            "Pushing documents is off: start the service with `--push-data DIR` (api.push_data)."
        )
    return writer


def _result(writer: PushWriter, written: list[str], deleted: int) -> PushResult:
    return PushResult(written=len(written), deleted=deleted, doc_ids=written, backlog=writer.backlog())


IdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS, description="Your id for the document.")]


@router.put("/v1/documents/{external_id}", response_model=PushResult, responses=_ERRORS)
def put_document(
    request: Request, external_id: IdPath, _admin: AdminDep, document: Annotated[dict[str, Any], Body()]
) -> PushResult:
    """Store (or replace) one document under your id."""
    writer = _writer(request)
    if "id" in document and str(document["id"]) != external_id:
        raise BadDocument(
            f'document {external_id}: its "id" {document["id"]!r} differs from the one in the path'
        )
    checked = document_from_json(
        {**document, "id": external_id}, where=f"document {external_id}", fetched_at=writer.now()
    )
    writer.write([checked.document], [])
    return _result(writer, [str(int(checked.document.doc_id))], 0)


@router.delete("/v1/documents/{external_id}", response_model=PushResult, responses=_ERRORS)
def delete_document(request: Request, external_id: IdPath, _admin: AdminDep) -> PushResult:
    """Take one pushed document out of the index (deleting an unknown id is not an error)."""
    writer = _writer(request)
    writer.write([], [_removal(external_id, writer.now())])
    return _result(writer, [], 1)


@router.post("/v1/documents", response_model=PushResult, responses=_ERRORS)
def push_batch(request: Request, _admin: AdminDep, batch: Annotated[PushBatch, Body()]) -> PushResult:
    """Store and delete many documents in one request (one segment on disk)."""
    writer = _writer(request)
    removals = [_removal(str(i), writer.now()) for i in batch.delete]
    fetched_at = writer.now()
    documents = [
        document_from_json(value, where=f"documents[{n}]", fetched_at=fetched_at).document
        for n, value in enumerate(batch.documents)
    ]
    writer.write(documents, removals)
    return _result(writer, [str(int(d.doc_id)) for d in documents], len(removals))


def _removal(external_id: str, at: float) -> Removal:
    return Removal(doc_id_for(id_key(external_id)), "", "deleted through the push API", at)
