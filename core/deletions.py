"""The removal log: documents that left the web (or the index) after being written.

The docstore only ever grows, so a page that turned 404/410, became ``noindex``, is
now disallowed by robots.txt, found its canonical, or was blocked by an operator needs
a record of its own. A removal is a tombstone row stored with the docstore's own
machinery (append-only segments and a manifest, ``core.docstore``): the same atomic
appends, the same per-worker folders, the same tailing by segment name.

Ordering rule (one for the incremental indexer and for a full rebuild): a removal at
time ``t`` hides every version of its document fetched at or before ``t``; a later
fetch of the page brings it back.

Example: ``DeletionLog(CrawlDir(data).deletions).record([Removal(doc_id, url, "http 404", now)])``
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from core.docstore import DocStore
from core.types import DocId, Document

__all__ = ["DeletionLog", "Removal", "is_removed"]


@dataclass(frozen=True, slots=True)
class Removal:
    """One document taken out: why, and when (seconds since the epoch)."""

    doc_id: DocId
    url: str
    reason: str
    at: float


def _as_row(removal: Removal) -> Document:
    return Document(
        doc_id=removal.doc_id,
        url=removal.url,
        title="",
        body="",
        description=removal.reason,
        fetched_at=removal.at,
    )


def _from_row(doc: Document) -> Removal:
    return Removal(doc.doc_id, doc.url, doc.description, float(doc.fetched_at or 0.0))


class DeletionLog:
    """Append-only tombstones under ``root`` (``worker``: this writer's own folder)."""

    def __init__(self, root: Path, *, worker: str | None = None) -> None:
        self.store = DocStore(Path(root), worker=worker)

    def record(self, removals: Iterable[Removal]) -> str:
        """Append removals as one segment; returns its name (``""`` when none)."""
        return self.store.append(_as_row(r) for r in removals)

    def segments(self) -> list[str]:
        return self.store.segments()

    def removals_in(self, segment: str) -> Iterator[Removal]:
        return (_from_row(doc) for doc in self.store.iter_documents(segment))

    def latest(self) -> dict[DocId, Removal]:
        """The latest removal of every document ever removed."""
        found: dict[DocId, Removal] = {}
        if not self.store.root.exists():
            return found
        for segment in self.segments():
            for removal in self.removals_in(segment):
                found[removal.doc_id] = removal
        return found


def is_removed(doc: Document, removal: Removal | None) -> bool:
    """Whether ``removal`` hides this version of the document (fetched at or before it)."""
    return removal is not None and float(doc.fetched_at or 0.0) <= removal.at
