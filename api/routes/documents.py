"""``GET /v1/documents/{doc_id}``: one stored document of the serving generation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel

from api.deps import SearchDep
from api.schemas import ErrorModel
from core.errors import DocumentNotFound, QueryError
from core.types import DocId

router = APIRouter()


class DocumentModel(BaseModel):
    doc_id: str
    url: str
    title: str
    host: str
    lang: str
    filetype: str
    description: str
    headings: list[str]
    body: str
    generation: str


@router.get("/v1/documents/{doc_id}", response_model=DocumentModel, responses={404: {"model": ErrorModel}})
def get_document(
    service: SearchDep,
    doc_id: Annotated[str, Path(max_length=24, description="A doc_id from a search result.")],
) -> DocumentModel:
    if not doc_id.isdigit() or int(doc_id) >= 1 << 63 or int(doc_id) == 0:
        raise QueryError(f"{doc_id!r} is not a document id; use the doc_id of a search result.")
    doc = service.document(DocId(int(doc_id)))
    if doc is None:
        raise DocumentNotFound(f"No document {doc_id} in generation {service.generation.id}.")
    return DocumentModel(
        doc_id=str(int(doc.doc_id)),
        url=doc.url,
        title=doc.title,
        host=doc.host,
        lang=doc.lang,
        filetype=doc.filetype,
        description=doc.description,
        headings=list(doc.headings),
        body=doc.body,
        generation=service.generation.id,
    )
