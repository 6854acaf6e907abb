"""Domain types, settings, errors and storage shared by every Trawl package."""

from core.errors import QueryError, TrawlError
from core.types import DocId, Document, Hit, Query, ScoredDoc, SearchResponse, doc_id_for

__all__ = [
    "DocId",
    "Document",
    "Hit",
    "Query",
    "QueryError",
    "ScoredDoc",
    "SearchResponse",
    "TrawlError",
    "doc_id_for",
]
