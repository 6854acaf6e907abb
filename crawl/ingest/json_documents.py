"""A document given as a JSON object (a JSON Lines line) checked and turned into a ``Document``.

The fields: ``id``, ``url``, ``title`` and ``body`` (required); ``headings`` (a list of
strings), ``lang`` and ``published`` (ISO 8601 or Unix seconds), optional; any other field
is kept as the document's stored metadata. A document is keyed by its ``id``: the same id
again replaces it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import BadDocument
from core.types import Document, doc_id_for
from crawl.extraction.dedup import fingerprints
from crawl.urls import canonicalize_url, host_of

__all__ = ["BadDocument", "JsonDocument", "document_from_json", "id_key"]

KNOWN_FIELDS = frozenset({"id", "url", "title", "body", "headings", "lang", "published"})
MAX_ID_CHARS = 512


@dataclass(frozen=True, slots=True)
class JsonDocument:
    """A checked document and the fields Trawl does not index, kept beside it."""

    document: Document
    metadata: dict[str, Any]


def id_key(external_id: str) -> str:
    """The key a given id is stored under (its ``doc_id`` is the hash of it), apart from URLs."""
    return "doc:" + external_id


def document_from_json(value: object, *, where: str, fetched_at: float) -> JsonDocument:
    """``value`` as a document; raises ``BadDocument`` naming ``where`` and the field."""
    if not isinstance(value, Mapping):
        raise BadDocument(f"{where}: expected a JSON object, got {type(value).__name__}")
    external_id = _id(value.get("id"), where)
    url = _text(value, "url", where, required=True).strip()
    if not url:
        raise BadDocument(f'{where}: "url" is empty')
    canonical = canonicalize_url(url) if url.lower().startswith(("http://", "https://")) else url
    if not canonical:
        raise BadDocument(f'{where}: "url" {url[:200]!r} is not a URL')
    title = _text(value, "title", where, required=True)
    body = _text(value, "body", where, required=True)
    headings = value.get("headings", [])
    if not isinstance(headings, list) or not all(isinstance(h, str) for h in headings):
        raise BadDocument(f'{where}: "headings" must be a list of strings')
    lang = _text(value, "lang", where, required=False)
    text_hash, simhash, _ = fingerprints(body)
    host = host_of(canonical) if canonical.startswith(("http://", "https://")) else ""
    document = Document(
        doc_id=doc_id_for(id_key(external_id)),
        url=canonical,
        title=title,
        body=body,
        headings=tuple(headings),
        host=host if host.endswith("]") else host.rsplit(":", 1)[0],
        lang=lang.lower(),
        filetype="text",
        external_id=external_id,
        published_at=_published(value.get("published"), where),
        fetched_at=fetched_at,
        content_hash=text_hash,
        simhash=simhash,
    )
    metadata = {k: v for k, v in value.items() if k not in KNOWN_FIELDS}
    return JsonDocument(document, metadata)


def _id(value: object, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadDocument(f'{where}: "id" must be a string or an integer')
    text = str(value).strip()
    if not text or len(text) > MAX_ID_CHARS:
        raise BadDocument(f'{where}: "id" must have 1 to {MAX_ID_CHARS} characters')
    return text


def _text(value: Mapping[str, object], name: str, where: str, *, required: bool) -> str:
    found = value.get(name)
    if found is None:
        if required:
            raise BadDocument(f'{where}: "{name}" is missing')
        return ""
    if not isinstance(found, str):
        raise BadDocument(f'{where}: "{name}" must be a string, got {type(found).__name__}')
    return found


def _published(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
            return moment.timestamp()
    raise BadDocument(f'{where}: "published" must be an ISO 8601 date or Unix seconds, got {value!r:.80}')
