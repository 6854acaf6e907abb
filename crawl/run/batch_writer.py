"""The crawl's batched, durable writes: what the workers buffer, and the thread that stores it.

A batch's documents and link edges are written to their Parquet stores first, then its
crawl state is committed in one transaction. A crash between the two only means the
batch's URLs are fetched again on resume (the re-written documents supersede the earlier
copies by ``doc_id``); a URL acknowledged in the crawl database always has its document
on disk. WARC records are written as responses arrive and flushed with each batch.

The writing runs on one writer thread, off the event loop, so fetches go on meanwhile.
A batch is taken on the event loop in one step (its documents, edges and crawl state
together) and batches are written in the order they were taken, so an acknowledgement
never overtakes its document.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from core.deletions import DeletionLog, Removal
from core.errors import TrawlError
from core.linkgraph import Edge
from core.types import Document, doc_id_for
from crawl.frontier.leases import Batch, Lease
from crawl.run.counters import CrawlStats
from crawl.run.disk_stop import DiskStop
from crawl.run.outcomes import removal_reason
from crawl.run.parts import CrawlerParts
from crawl.state.content_claims import ContentClaims, LostClaim


@dataclass
class PendingWrites:
    """What the workers produced since the last flush, taken as one batch."""

    docs: list[Document] = field(default_factory=list)
    doc_leases: list[Lease] = field(default_factory=list)
    """The lease each buffered document was fetched under, pairwise with ``docs``."""
    edges: list[Edge] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    lastmods: dict[str, float] = field(default_factory=dict)
    """Sitemap hints for URLs that may be known already, stored after the batch's inserts."""

    def take(self) -> PendingWrites:
        """Everything buffered so far; the buffers start empty again."""
        taken = PendingWrites(self.docs, self.doc_leases, self.edges, self.removals, self.lastmods)
        self.docs, self.doc_leases, self.edges, self.removals, self.lastmods = [], [], [], [], {}
        return taken


class BatchWriter:
    """Takes what the workers buffered (``pending``) and stores it, batch after batch."""

    def __init__(
        self,
        parts: CrawlerParts,
        stats: CrawlStats,
        claims: ContentClaims,
        flush_interval_s: float,
        *,
        disk: DiskStop | None = None,
    ) -> None:
        self.parts = parts
        self._disk = disk or DiskStop(parts.layout.root, parts.frontier.stop)
        """A batch that fails for lack of space stops the crawl; nothing more is stored after it."""
        self.stats = stats
        self.pending = PendingWrites()
        self._frontier = parts.frontier
        self._claims = claims
        self._flush_interval_s = flush_interval_s
        self._deletions = DeletionLog(parts.layout.deletions, worker=parts.docstore.worker)
        # One thread, so batches are written one at a time and in the order they were taken.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crawl-flush")
        self.flushes_in_flight = 0
        self._write_error: BaseException | None = None

    async def finish(self) -> None:
        """Store what is buffered (after any batch still being written), then repair cluster sizes."""
        try:
            await self.flush()
            if self.pending.removals:  # a lost claim of the last batch removes a recrawled page's document
                await self.flush()
            if self._disk.error is None:
                await asyncio.to_thread(self._refresh_cluster_sizes)
        finally:
            self._writer.shutdown(wait=True)

    async def flush_periodically(self) -> None:
        """Flush every ``flush_interval_s``, or sooner when the frontier asks (``flush_wanted``)."""
        wanted = self._frontier.flush_wanted
        while True:
            try:
                await asyncio.wait_for(wanted.wait(), timeout=self._flush_interval_s)
            except TimeoutError:
                pass
            wanted.clear()
            await self.flush()

    async def flush(self) -> None:
        """Store documents and edges, then acknowledge their URLs in one commit.

        The batch is taken here, on the event loop, in one step; the writer thread
        stores it after every earlier batch. Cancelling the caller does not cancel the
        write: a batch once taken is always written, so none is lost or overtaken. After a
        full disk nothing more is stored: the crawl is stopping, and what it did not store
        is fetched again on resume.
        """
        if self._disk.error is not None:
            return
        taken = self.pending.take()
        batch = self._frontier.take_batch()
        writing = asyncio.get_running_loop().run_in_executor(self._writer, self._store, taken, batch)
        self.flushes_in_flight += 1
        writing.add_done_callback(lambda _: self._flush_done(batch, writing))
        try:
            await asyncio.shield(writing)
        except Exception as exc:
            if not self._disk.caught(exc):
                raise

    def _flush_done(self, batch: Batch | None, writing: asyncio.Future[list[LostClaim]]) -> None:
        self.flushes_in_flight -= 1
        stored = not writing.cancelled() and writing.exception() is None
        if stored:
            for claim in writing.result():
                self._lost_claim(claim)
        if batch is None:
            return
        if stored:
            self._frontier.batch_committed(batch)
        else:
            self._frontier.batch_lost(batch)

    def _lost_claim(self, claim: LostClaim) -> None:
        """Count a document another worker's copy displaced as the duplicate it was stored as."""
        stats = self.stats
        stats.indexed -= 1
        stats.duplicates += 1
        stats.outcomes[claim.counted_as] -= 1
        stats.outcomes[claim.update.outcome_key] += 1
        reason = removal_reason(claim.lease, claim.update)
        if reason:  # a recrawled page whose new text another URL holds: its old document goes
            self.pending.removals.append(
                Removal(doc_id_for(claim.lease.url), claim.lease.url, reason, time.time())
            )

    def _store(self, taken: PendingWrites, batch: Batch | None) -> list[LostClaim]:
        """On the writer thread: documents, edges and WARC records first, then the acknowledgements.

        New documents are claimed first (``ContentClaims``): those that copy another
        worker's document are not stored, and their URLs are acknowledged as duplicates.

        After one failed write every later one fails too: a batch whose predecessor was
        not stored would commit new URLs' results without their rows, so acks stop.
        """
        if isinstance(self._write_error, TrawlError):
            raise self._write_error  # it says what and where already (the database gone for good)
        if self._write_error is not None:
            raise OSError(
                f"An earlier crawl batch could not be stored: {self._write_error}"
            ) from self._write_error
        try:
            docs, lost = self._claims.settle(taken.docs, list(taken.doc_leases), batch)
            if docs:
                # Recorded before the append: a crash between the two leaves a size that
                # disagrees with the docstore, which the next run's repair rewrites.
                self.parts.db.record_cluster_sizes({doc.url: doc.dup_cluster_size for doc in docs})
                self.parts.docstore.append(docs)
            if taken.edges:
                self.parts.links.append(taken.edges)
            if taken.removals:
                self._deletions.record(taken.removals)
            self.parts.warc.flush()
            if batch is not None:
                self._frontier.write_batch(batch)
            if taken.lastmods:
                self.parts.db.record_lastmod(taken.lastmods)
        except BaseException as exc:
            self._write_error = exc
            raise
        return lost

    def _refresh_cluster_sizes(self) -> None:
        """Re-append originals whose duplicate cluster grew, with the new ``dup_cluster_size``.

        A duplicate often arrives after its original was written; the docstore is
        append-only, so the original is written again (the later version supersedes).
        The crawl database says which originals are stale (``urls.cluster_written``, kept
        with every document written), so the end of a run reads only those documents, not
        the whole docstore. A killed run's leftovers are repaired too: sizes are recorded
        before documents are appended and after repairs are.
        """
        stale = self.parts.db.stale_clusters()
        if not stale:
            return
        docstore = self.parts.docstore
        found = docstore.documents_by_url(stale)
        rewrite = [
            replace(doc, dup_cluster_size=stale[url][0])
            for url, doc in found.items()
            if doc.dup_cluster_size != stale[url][0]
        ]
        if rewrite:
            docstore.append(rewrite)
        # Found: the size its latest document now has; not found: no document (0).
        self.parts.db.record_cluster_sizes({url: stale[url][0] if url in found else 0 for url in stale})
