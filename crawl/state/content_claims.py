"""One original per content across a fleet: new documents are claimed when their batch is stored.

A worker decides at once, with its in-memory ``NearDupIndex``, whether a page copies one
it knows. But the workers of a fleet do not see each other's new documents there, so two
workers that fetch copies of one page both indexed it: on the crawl bench's site (twenty
exact copies among 5,000 pages) two workers indexed 5,003 to 5,016 documents where one
indexes 5,000. So every new document is claimed in the crawl database when its batch is
written (``CrawlStore.claim_contents``, which PostgreSQL arbitrates for the whole fleet):
a document whose content another URL's document already holds is dropped from the batch,
and its URL is recorded a duplicate of that one, as the worker would have recorded it
had it known. The SQLite backend (one process) never loses a claim, so this costs it
one empty call per batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.types import Document
from crawl.extraction.dedup import ContentClaim, DupVerdict
from crawl.frontier.interface import CrawlStore
from crawl.frontier.leases import Batch, Lease
from crawl.state.records import Outcome, UrlUpdate

__all__ = ["ContentClaims", "LostClaim"]


@dataclass(frozen=True, slots=True)
class LostClaim:
    """A document dropped from its batch because another URL's document holds its content."""

    lease: Lease
    update: UrlUpdate
    """The URL's result as written: a duplicate of the fleet's original."""
    counted_as: str
    """The outcome the crawl statistics counted for it before (``indexed``)."""


class ContentClaims:
    """Claims a batch's new documents and rewrites the results of those that lost.

    Used on the batch writer's thread only, but for ``original_of``, which the event loop
    calls: single dictionary reads and writes, which the GIL keeps whole.
    """

    def __init__(self, store: CrawlStore, max_distance: int) -> None:
        self._store = store
        self._max_distance = max_distance
        self._originals: dict[str, str] = {}
        """URL whose claim was lost → the original its document copies. The worker's own index
        still names the loser as an original, so duplicates it finds of it are sent here."""

    def original_of(self, url: str) -> str:
        """The fleet's original for a document this worker's index calls an original."""
        return self._originals.get(url, url)

    def settle(
        self, docs: list[Document], leases: list[Lease], batch: Batch | None
    ) -> tuple[list[Document], list[LostClaim]]:
        """The documents to store, and the claims lost; ``leases[i]`` fetched ``docs[i]``.

        The lost documents' URLs become duplicates in ``batch`` (changed in place), and
        every duplicate result there that names a lost document as its original names the
        winner instead (in a batch without documents too).
        """
        claims = [ContentClaim(doc.url, doc.content_hash, doc.simhash) for doc in docs]
        lost: dict[str, DupVerdict] = self._store.claim_contents(claims, self._max_distance) if claims else {}
        if not lost and not self._originals:
            return docs, []
        for url, verdict in lost.items():
            self._originals[url] = verdict.of_url
        pairs = zip(docs, leases, strict=True)
        by_lease = {lease.url: (lease, lost[doc.url]) for doc, lease in pairs if doc.url in lost}
        given_up: list[LostClaim] = []
        updates = batch.updates if batch is not None else []
        for i, update in enumerate(updates):
            found = by_lease.get(update.url)
            if found is not None and update.outcome is Outcome.INDEXED:
                lease, verdict = found
                rewritten = replace(
                    update, outcome=Outcome.DUPLICATE, detail=verdict.kind, dup_of=verdict.of_url
                )
                updates[i] = rewritten
                given_up.append(LostClaim(lease, rewritten, update.outcome_key))
            elif update.outcome is Outcome.DUPLICATE and update.dup_of in self._originals:
                updates[i] = replace(update, dup_of=self._originals[update.dup_of])
        return [doc for doc in docs if doc.url not in lost], given_up
