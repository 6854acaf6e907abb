"""``GET /v1/documents/{doc_id}``: one stored document of the serving generation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel

from api.deps import SearchDep
from api.params import StrictParams, parse_doc_id
from api.schemas import ErrorModel
from core.errors import DocumentNotFound
from core.types import DocId

router = APIRouter(dependencies=[StrictParams])


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


@router.get(
    "/v1/documents/{doc_id}",
    response_model=DocumentModel,
    responses={400: {"model": ErrorModel}, 404: {"model": ErrorModel}},
)
def get_document(
    service: SearchDep,
    doc_id: Annotated[str, Path(max_length=24, description="A doc_id from a search result.")],
) -> DocumentModel:
    doc = service.document(DocId(parse_doc_id(doc_id)))
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
