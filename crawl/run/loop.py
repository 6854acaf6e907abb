"""The crawl loop: N async workers taking leases from the frontier until the work runs out.

Per URL: the address guard, robots.txt (fetched in the host's own politeness slot),
the fetch, then by outcome: parse, apply ``rel=canonical`` and meta robots, dedup,
and queue the outlinks. A bad page is data, not an exception: every outcome becomes
a ``UrlUpdate`` and the loop moves on.

Durability: results are committed in batches. A batch's documents and link edges are
written to their Parquet stores first, then the batch's crawl state is committed to
SQLite in one transaction. A crash between the two only means the batch's URLs are
fetched again on resume (the re-written documents supersede the earlier copies by
``doc_id``); a URL acknowledged in SQLite always has its document on disk. WARC
records are written as responses arrive.

The writing (Parquet, fsync, the SQLite commit) runs on one writer thread, off the
event loop, so fetches go on meanwhile. A batch is taken on the event loop in one
step — its documents, edges and crawl state together — and batches are written in
the order they were taken, so an acknowledgement never overtakes its document.

The parts a run needs are built together (``crawl.run.parts.CrawlerParts``); the HTTP
transport or client can be passed in.

Example::

    crawler = Crawler(Path("data/crawl"), CrawlSettings(allow_loopback=True), seeds=["http://127.0.0.1:8000/"])
    summary = asyncio.run(crawler.run())
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import sniffio

from core.blocklist import BlockList
from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal
from core.errors import CrawlError, FetchError, OutOfScope, RobotsDenied, TooLarge
from core.linkgraph import Edge
from core.settings import CrawlSettings
from core.types import Document, doc_id_for
from crawl.extraction.dedup import fingerprints
from crawl.extraction.documents import page_document
from crawl.extraction.page import ParsedPage
from crawl.extraction.parsing import PageJob, ParseTimeout
from crawl.extraction.sitemaps import parse_sitemap
from crawl.fetch.fetcher import FetchResult, HopCheck
from crawl.fetch.guard import Resolver, system_resolver
from crawl.fetch.robots import MAX_ROBOTS_BYTES, RobotsCache
from crawl.frontier.host_slots import HostSlots
from crawl.frontier.recrawl import next_interval
from crawl.frontier.sqlite import Batch, Feedback, Lease
from crawl.run.counters import CrawlStats, CrawlSummary
from crawl.run.parts import CrawlerParts
from crawl.scope import Scope
from crawl.state.content_claims import ContentClaims, LostClaim
from crawl.state.sqlite import NewUrl, Outcome, UrlKind, UrlStatus, UrlUpdate
from crawl.urls import canonicalize_url, host_of, origin_of

if TYPE_CHECKING:
    from crawl.run.metrics import FetchObserver

logger = logging.getLogger(__name__)

__all__ = ["Crawler"]

_MAX_SITEMAP_DEPTH = 3
_SEED_PRIORITY = 1.0
_SITEMAP_PRIORITY = 0.9
_SITEMAP_PAGE_PRIORITY = 0.8


def _retry_after_s(value: str, now: float) -> float | None:
    """``Retry-After`` as seconds from now (delta-seconds or an HTTP date)."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


_REMOVING = frozenset(
    {
        Outcome.HTTP,
        Outcome.NOINDEX,
        Outcome.CANONICALIZED,
        Outcome.DUPLICATE,
        Outcome.REDIRECT,
        Outcome.BLOCKED,
        Outcome.NOT_HTML,
    }
)


def removal_reason(lease: Lease, update: UrlUpdate) -> str:
    """Why a page fetched before must leave the index now (``""``: it need not).

    Only a page with an earlier fetch can have a document to remove; transient
    failures (5xx, timeouts, retries) remove nothing.
    """
    if not lease.fetch_count or lease.kind != UrlKind.PAGE or update.outcome not in _REMOVING:
        return ""  # a sitemap gone or disallowed has no document to remove
    if update.outcome == Outcome.HTTP and (update.http_status or 0) < 400:
        return ""
    return update.outcome_key


def _error_kind(exc: CrawlError) -> str:
    if isinstance(exc, TooLarge):
        return "too_large"
    if isinstance(exc, RobotsDenied):
        return "robots"
    if isinstance(exc, OutOfScope):
        return "guard"
    if isinstance(exc, FetchError):
        return exc.kind.value
    return type(exc).__name__


class _KnownRobots(CrawlError):
    """A robots.txt redirect reached a robots.txt whose answer is cached: the chain stops there."""

    def __init__(self, url: str, status: int, body: bytes) -> None:
        super().__init__(f"robots.txt at {url} is known")
        self.status = status
        self.body = body


class Crawler:
    """One crawl over one data directory; ``run`` until done, stopped or out of budget.

    ``transport`` (or a whole ``client``) replaces the HTTP client's connection pool,
    ``resolver`` the DNS lookups of the address guard.
    """

    def __init__(
        self,
        data_dir: Path,
        settings: CrawlSettings,
        *,
        seeds: Sequence[str],
        scope: Scope | None = None,
        recrawl: bool = False,
        resolver: Resolver = system_resolver,
        transport: httpx.AsyncBaseTransport | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.paths = CrawlDir(data_dir)
        self.settings = settings
        self.seeds = [u for u in (canonicalize_url(s) for s in seeds) if u]
        self.scope = scope or Scope.from_seeds(self.seeds, mode=settings.scope, max_depth=settings.max_depth)
        self.recrawl = recrawl
        self.stats = CrawlStats()
        self._resolver = resolver
        self._transport = transport
        self._client = client
        self._stopped = False
        self._running: _CrawlRun | None = None
        """The run in progress, for ``request_stop``."""
        self.observer: FetchObserver | None = None
        """Told of every exchange and new URL (``crawl.run.metrics``: latency per host, discovered)."""

    def request_stop(self) -> None:
        """Finish the fetches in flight, store everything, and return (Ctrl-C)."""
        if not self._stopped:
            logger.info("Stopping: finishing the fetches in flight")
        self._stopped = True
        if self._running is not None:
            self._running.parts.frontier.stop()

    async def run(self) -> CrawlSummary:
        parts = CrawlerParts.open(
            self.paths,
            self.settings,
            recrawl=self.recrawl,
            resolver=self._resolver,
            transport=self._transport,
            client=self._client,
        )
        running = _CrawlRun(parts, self.settings, self.scope, self.stats)
        running.observer = self.observer
        self._running = running
        if self._stopped:
            parts.frontier.stop()
        try:
            await running.crawl(self.seeds)
        finally:
            self._running = None
            try:
                await running.finish()
            finally:
                await parts.aclose()
        self.stats.queued = parts.frontier.pending
        summary = self.stats.summary(stopped=self._stopped)
        logger.info(
            "Crawl finished: %d pages, %d indexed, %d duplicates in %.1f s",
            summary.pages,
            summary.indexed,
            summary.duplicates,
            summary.elapsed_s,
        )
        return summary


class _CrawlRun:
    """The workers, the per-URL handling and the batched writes of one ``Crawler.run``."""

    def __init__(self, parts: CrawlerParts, settings: CrawlSettings, scope: Scope, stats: CrawlStats) -> None:
        self.parts = parts
        self.settings = settings
        self.scope = scope
        self.stats = stats
        self.observer: FetchObserver | None = None
        self._frontier = parts.frontier
        self._fetcher = parts.fetcher
        self._guard = parts.guard
        self._dedup = parts.dedup
        self._robots = RobotsCache(
            self._fetch_robots,
            user_agent=settings.user_agent,
            ttl_s=settings.robots_ttl_s,
            error_ttl_s=settings.robots_error_ttl_s,
            store=parts.db,
        )
        self._docs: list[Document] = []
        self._doc_leases: list[Lease] = []
        """The lease each buffered document was fetched under, pairwise with ``_docs``."""
        self._claims = ContentClaims(parts.db, settings.near_dup_max_distance)
        self._edges: list[Edge] = []
        self._removals: list[Removal] = []
        self._lastmods: dict[str, float] = {}
        """Sitemap hints for URLs that may be known already, stored after the batch's inserts."""
        self._deletions = DeletionLog(parts.layout.deletions, worker=parts.docstore.worker)
        self._blocklist = BlockList(parts.layout.blocklist)
        # One thread, so batches are written one at a time and in the order they were taken.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crawl-flush")
        self._flushes_in_flight = 0
        self._write_error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------

    async def crawl(self, seeds: Sequence[str]) -> None:
        for seed in seeds:
            self._frontier.add(NewUrl(seed, host_of(seed), 0, _SEED_PRIORITY))
        # httpcore asks sniffio which event loop runs on every request (its locks and
        # cancellation shields), and sniffio answers by calling asyncio's ``current_task``,
        # Python code in 3.11: 2.6% of a worker's CPU. Said once here, every task below
        # inherits the answer (sniffio's own context variable for this).
        said = sniffio.current_async_library_cvar.set("asyncio")
        workers = [asyncio.create_task(self._worker()) for _ in range(self.settings.concurrency)]
        flusher = asyncio.create_task(self._flush_periodically())
        sniffio.current_async_library_cvar.reset(said)
        try:
            await asyncio.gather(*workers)
        finally:
            flusher.cancel()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(flusher, *workers, return_exceptions=True)

    async def finish(self) -> None:
        """Store what is buffered (after any batch still being written), then repair cluster sizes."""
        try:
            await self.flush()
            if self._removals:  # a lost claim of the last batch removes a recrawled page's document
                await self.flush()
            await asyncio.to_thread(self._refresh_cluster_sizes)
        finally:
            self._writer.shutdown(wait=True)

    async def _flush_periodically(self) -> None:
        """Flush every ``flush_interval_s``, or sooner when the frontier asks (``flush_wanted``)."""
        wanted = self._frontier.flush_wanted
        while True:
            try:
                await asyncio.wait_for(wanted.wait(), timeout=self.settings.flush_interval_s)
            except TimeoutError:
                pass
            wanted.clear()
            await self.flush()

    async def flush(self) -> None:
        """Store documents and edges, then acknowledge their URLs in one SQLite commit.

        The batch is taken here, on the event loop, in one step; the writer thread
        stores it after every earlier batch. Cancelling the caller does not cancel the
        write: a batch once taken is always written, so none is lost or overtaken.
        """
        docs, self._docs = self._docs, []
        leases, self._doc_leases = self._doc_leases, []
        edges, self._edges = self._edges, []
        removals, self._removals = self._removals, []
        lastmods, self._lastmods = self._lastmods, {}
        batch = self._frontier.take_batch()
        writing = asyncio.get_running_loop().run_in_executor(
            self._writer, self._store, docs, edges, batch, removals, lastmods, leases
        )
        self._flushes_in_flight += 1
        writing.add_done_callback(lambda _: self._flush_done(batch, writing))
        await asyncio.shield(writing)

    def _flush_done(self, batch: Batch | None, writing: asyncio.Future[list[LostClaim]]) -> None:
        self._flushes_in_flight -= 1
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
            self._removals.append(Removal(doc_id_for(claim.lease.url), claim.lease.url, reason, time.time()))

    def _store(
        self,
        docs: list[Document],
        edges: list[Edge],
        batch: Batch | None,
        removals: Sequence[Removal] = (),
        lastmods: Mapping[str, float] | None = None,
        leases: Sequence[Lease] = (),
    ) -> list[LostClaim]:
        """On the writer thread: documents, edges and WARC records first, then the acknowledgements.

        New documents are claimed first (``ContentClaims``): those that copy another
        worker's document are not stored, and their URLs are acknowledged as duplicates.

        After one failed write every later one fails too: a batch whose predecessor was
        not stored would commit new URLs' results without their rows, so acks stop.
        """
        if self._write_error is not None:
            raise OSError(f"An earlier crawl batch could not be stored: {self._write_error}")
        try:
            docs, lost = self._claims.settle(docs, list(leases), batch)
            if docs:
                # Recorded before the append: a crash between the two leaves a size that
                # disagrees with the docstore, which the next run's repair rewrites.
                self.parts.db.record_cluster_sizes({doc.url: doc.dup_cluster_size for doc in docs})
                self.parts.docstore.append(docs)
            if edges:
                self.parts.links.append(edges)
            if removals:
                self._deletions.record(removals)
            self.parts.warc.flush()
            if batch is not None:
                self._frontier.write_batch(batch)
            if lastmods:
                self.parts.db.record_lastmod(lastmods)
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
        the whole docstore: a ``trawl run`` round on a large crawl no longer costs time
        and memory in proportion to the crawl. A killed run's leftovers are repaired too:
        sizes are recorded before documents are appended and after repairs are.
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

    async def _worker(self) -> None:
        frontier = self._frontier
        while (lease := await frontier.lease()) is not None:
            try:
                await self._handle(lease)
            except Exception as exc:  # a bug on one page must not stop the crawl
                logger.exception("Internal error on %s", lease.url)
                self.stats.errors["internal"] += 1
                self._finish(
                    lease,
                    UrlUpdate(
                        lease.url,
                        UrlStatus.FAILED,
                        Outcome.INTERNAL_ERROR,
                        detail=type(exc).__name__,
                        fetched=True,
                    ),
                    Feedback(error=True),
                )
            self.stats.queued = frontier.pending
            self.stats.in_flight = frontier.in_flight
            if frontier.uncommitted >= self.settings.flush_every and not self._flushes_in_flight:
                await self.flush()

    # -- one URL -------------------------------------------------------------

    async def _fetch_robots(self, url: str) -> tuple[int, bytes]:
        # RFC 9309 §2.5: parse the first 500 KiB; a longer file is cut, not refused. Its
        # redirects are followed across hosts, each other host in its own slot (host_slots).
        slots = HostSlots(
            self._frontier,
            host_of(url),
            wait_s=self.settings.fetch_timeout_s,
            crawl_delay=self._known_crawl_delay,
        )
        try:
            result = await self._fetcher.fetch(
                url,
                follow_cross_origin=True,
                host_gate=slots.enter,
                hop_check=self._known_robots_hop(origin_of(url)),
                hop_delay_s=self.settings.min_delay_s,
                max_bytes=MAX_ROBOTS_BYTES,
                truncate=True,
            )
        except _KnownRobots as known:
            return known.status, known.body
        finally:
            slots.release()
        self._record_exchange(result)
        self.stats.robots_fetches += 1
        final_origin = origin_of(result.final_url)
        if final_origin != origin_of(url) and result.final_url == f"{final_origin}/robots.txt":
            self._robots.learn(final_origin, result.status, result.body)
        return result.status, result.body

    def _known_robots_hop(self, origin: str) -> HopCheck:
        """A robots.txt redirect to another origin's robots.txt whose answer is known: that
        answer is the first origin's too, without asking again (RFC 9309: the file the
        redirects end at applies)."""

        async def check(target: str) -> None:
            target_origin = origin_of(target)
            if target_origin == origin or target != f"{target_origin}/robots.txt":
                return
            policy = self._robots.cached(target_origin)
            if policy is not None:
                raise _KnownRobots(target, policy.status, policy.body.encode("utf-8"))

        return check

    def _known_crawl_delay(self, url: str) -> float:
        """The Crawl-delay of ``url``'s origin if its robots.txt is known already, else 0."""
        policy = self._robots.cached(origin_of(url))
        return policy.crawl_delay(self._robots.agent) if policy is not None else 0.0

    def _record_exchange(self, result: FetchResult) -> None:
        self.stats.fetches += 1
        self.stats.bytes += len(result.body)
        self.parts.warc.write(result)
        if self.observer is not None:
            self.observer.fetched(host_of(result.final_url), result.elapsed_s)

    def _hop_check(self, depth: int) -> HopCheck:
        async def check(target: str) -> None:
            reason = self.scope.out_of_scope_reason(target, depth)
            if reason:
                raise OutOfScope(f"Redirect to {target!r} leaves the crawl scope: {reason}.")
            if not await self._robots.is_allowed(target):
                raise RobotsDenied(f"robots.txt disallows the redirect target {target!r}.")

        return check

    def _finish(self, lease: Lease, update: UrlUpdate, feedback: Feedback) -> None:
        self.stats.outcomes[update.outcome_key] += 1
        reason = removal_reason(lease, update)
        if reason:
            self._removals.append(Removal(doc_id_for(lease.url), lease.url, reason, time.time()))
        self._frontier.finish(lease, update, feedback)

    def _retry_or_fail(
        self, lease: Lease, outcome: Outcome, http_status: int | None, *, detail: str = ""
    ) -> UrlUpdate:
        if lease.retries < self.settings.max_retries:
            return UrlUpdate(
                lease.url, UrlStatus.PENDING, outcome, http_status, retries=lease.retries + 1, detail=detail
            )
        return UrlUpdate(
            lease.url,
            UrlStatus.FAILED,
            outcome,
            http_status,
            detail=detail,
            retries=lease.retries,
            fetched=True,
            last_fetch=time.time(),
        )

    async def _handle(self, lease: Lease) -> None:
        url = lease.url
        host = lease.host
        rule = self._blocklist.match(url)
        if rule is not None:
            self._finish(
                lease,
                UrlUpdate(
                    url, UrlStatus.BLOCKED, Outcome.BLOCKED, detail="block list",
                    blocked_reason=f"blocked by the operator ({rule.kind} {rule.value}): {rule.reason}",
                ),
                Feedback(requested=False),
            )  # fmt: skip
            return
        try:
            await self._guard.checked_address(host.rsplit(":", 1)[0] if not host.endswith("]") else host)
        except OutOfScope as exc:
            self.stats.errors["guard"] += 1
            self._finish(
                lease,
                UrlUpdate(
                    url, UrlStatus.BLOCKED, Outcome.BLOCKED, detail="address guard", blocked_reason=str(exc)
                ),
                Feedback(requested=False),
            )
            return
        origin = origin_of(url)
        policy = self._robots.cached(origin)
        if policy is None:
            started = time.monotonic()
            policy = await self._robots.policy(origin)
            for sitemap in policy.sitemaps:
                self._add_sitemap(sitemap, 0, parent=f"{origin}/robots.txt")
            self._frontier.defer(
                lease,
                Feedback(
                    response_s=time.monotonic() - started,
                    error=policy.mode == "deny_all",
                    crawl_delay_s=policy.crawl_delay(self._robots.agent),
                ),
            )
            return
        if policy.mode == "deny_all":
            self.stats.errors["robots_unavailable"] += 1
            self._finish(
                lease,
                self._retry_or_fail(lease, Outcome.ROBOTS_UNAVAILABLE, policy.status or None),
                Feedback(requested=False, error=True, retry_after_s=policy.expires_at - time.time()),
            )
            return
        if not policy.can_fetch(url, self._robots.agent):
            self._finish(
                lease,
                UrlUpdate(
                    url,
                    UrlStatus.BLOCKED,
                    Outcome.BLOCKED,
                    detail="robots.txt",
                    blocked_reason="disallowed by robots.txt",
                ),
                Feedback(requested=False),
            )
            return
        crawl_delay = policy.crawl_delay(self._robots.agent)
        try:
            result = await self._fetcher.fetch(
                url,
                etag=lease.etag,
                last_modified=lease.last_modified,
                hop_check=self._hop_check(lease.depth),
                redirects_so_far=lease.redirects,
                hop_delay_s=max(self.settings.min_delay_s, crawl_delay),
            )
        except (OutOfScope, RobotsDenied) as exc:
            kind = _error_kind(exc)
            self._finish(
                lease,
                UrlUpdate(
                    url,
                    UrlStatus.BLOCKED,
                    Outcome.BLOCKED,
                    detail=kind,
                    blocked_reason=str(exc),
                    fetched=True,
                ),
                Feedback(crawl_delay_s=crawl_delay),
            )
            return
        except TooLarge as exc:
            self.stats.errors["too_large"] += 1
            self._finish(
                lease,
                UrlUpdate(
                    url,
                    UrlStatus.DONE,
                    Outcome.TOO_LARGE,
                    blocked_reason=str(exc),
                    fetched=True,
                    last_fetch=time.time(),
                ),
                Feedback(crawl_delay_s=crawl_delay),
            )
            return
        except FetchError as exc:
            kind = _error_kind(exc)
            self.stats.errors[kind] += 1
            if exc.kind.permanent:
                # A redirect loop or an unfollowable Location answers the same every time:
                # no retry, and no backoff for a host that answered promptly.
                self._finish(
                    lease,
                    UrlUpdate(
                        url,
                        UrlStatus.FAILED,
                        Outcome.ERROR,
                        detail=exc.reason,
                        fetched=True,
                        last_fetch=time.time(),
                    ),
                    Feedback(crawl_delay_s=crawl_delay),
                )
                return
            # A request we gave up on may still be running on the server: give the host at
            # least as long again before the next one, so it never has two of ours at once.
            recover_s = self.settings.fetch_timeout_s if kind == "timeout" else None
            self._finish(
                lease,
                self._retry_or_fail(lease, Outcome.ERROR, None, detail=exc.reason),
                Feedback(error=True, crawl_delay_s=crawl_delay, retry_after_s=recover_s),
            )
            return
        self._record_exchange(result)
        if lease.due_at and self.observer is not None:
            self.observer.recrawled((result.fetched_at or time.time()) - lease.due_at)
        feedback = Feedback(response_s=result.elapsed_s, crawl_delay_s=crawl_delay)
        self._finish(lease, await self._handle_response(lease, result), self._feedback_for(result, feedback))

    def _feedback_for(self, result: FetchResult, ok: Feedback) -> Feedback:
        if result.status == 429 or result.status >= 500:
            self.stats.errors[f"http_{result.status}"] += 1
            retry_after = _retry_after_s(result.headers.get("retry-after", ""), time.time())
            return Feedback(
                response_s=ok.response_s,
                error=True,
                retry_after_s=retry_after,
                crawl_delay_s=ok.crawl_delay_s,
            )
        return ok

    async def _handle_response(self, lease: Lease, result: FetchResult) -> UrlUpdate:
        url = lease.url
        status = result.status
        now = result.fetched_at or time.time()  # the request's start: what "changed since" compares to
        if status == 429 or status >= 500:
            return self._retry_or_fail(lease, Outcome.HTTP, status)
        fetched = UrlUpdate(
            url, UrlStatus.DONE, Outcome.NONE, status, fetched=True, last_fetch=now, bytes=len(result.body),
            elapsed_s=result.elapsed_s,
        )  # fmt: skip
        if result.redirect_to:
            target = result.redirect_to
            if self.scope.contains(target, lease.depth) and result.redirects <= self.settings.max_redirects:
                self._add(
                    NewUrl(
                        target, host_of(target), lease.depth, lease.priority, kind=lease.kind, parent=url,
                        redirects=result.redirects,
                    )
                )  # fmt: skip
            return replace(fetched, outcome=Outcome.REDIRECT, dup_of=target)
        if lease.kind == UrlKind.SITEMAP:
            return self._handle_sitemap(lease, result, fetched)
        if status == 304:
            return replace(
                self._scheduled(fetched, lease, changed=False),
                outcome=Outcome.NOT_MODIFIED,
                etag=result.headers.get("etag", lease.etag),
                last_modified=result.headers.get("last-modified", lease.last_modified),
            )
        if status >= 300:
            return replace(self._scheduled(fetched, lease, changed=True), outcome=Outcome.HTTP)
        fetched = replace(
            fetched,
            etag=result.headers.get("etag", ""),
            last_modified=result.headers.get("last-modified", ""),
        )
        job = PageJob(
            body=result.body,
            media_type=result.media_type,
            charset=result.charset,
            url=result.final_url,
            x_robots_tag=result.headers.get("x-robots-tag", ""),
            max_links=self.settings.max_links_per_page * 2,
            max_depth=self.settings.max_html_depth,
        )
        try:
            page = await self.parts.parser.extract(job)
        except ParseTimeout as exc:
            self.stats.errors["parse_timeout"] += 1
            return replace(
                fetched, status=UrlStatus.FAILED, outcome=Outcome.PARSE_TIMEOUT, blocked_reason=str(exc)
            )
        if page is None:
            return replace(self._scheduled(fetched, lease, changed=True), outcome=Outcome.NOT_HTML)
        self.stats.pages += 1
        self._follow_links(lease, result.final_url, page)
        if result.final_url != url:
            self._add(
                NewUrl(
                    result.final_url, host_of(result.final_url), lease.depth, lease.priority,
                    status=UrlStatus.DONE, outcome=Outcome.FETCHED_VIA_REDIRECT, dup_of=url,
                )
            )  # fmt: skip
            self._moved(lease, result.final_url, now)
        return self._index_page(lease, result, page, fetched)

    def _moved(self, lease: Lease, final_url: str, now: float) -> None:
        """A page fetched before at ``lease.url`` now redirects within its host (the fetcher
        followed it): the document is indexed at ``final_url``, so the one at the old URL
        goes, as after a redirect that leaves the host (``Outcome.REDIRECT``)."""
        old = doc_id_for(lease.url)
        if lease.fetch_count and lease.kind == UrlKind.PAGE and old != doc_id_for(final_url):
            self._removals.append(Removal(old, lease.url, str(Outcome.REDIRECT), now))

    def _add(self, new: NewUrl) -> None:
        if self._frontier.add(new) and self.observer is not None:
            self.observer.found()

    def _scheduled(self, update: UrlUpdate, lease: Lease, *, changed: bool) -> UrlUpdate:
        """The update with the next fetch time after a fetch that did (not) see a change."""
        s = self.settings
        interval = next_interval(
            lease.interval_s,
            changed=changed,
            initial_s=s.recrawl_initial_s,
            min_s=s.recrawl_min_s,
            max_s=s.recrawl_max_s,
        )
        return replace(update, next_fetch=(update.last_fetch or time.time()) + interval, interval_s=interval)

    def _handle_sitemap(self, lease: Lease, result: FetchResult, fetched: UrlUpdate) -> UrlUpdate:
        """List the sitemap's pages and child sitemaps, and schedule its next fetch.

        Every answer, an error too, makes the sitemap due again ``sitemap_refetch_s`` after
        this fetch (``CrawlDb.schedule_recrawl`` makes it pending then), with its validators
        kept for a conditional GET: a changed ``<lastmod>`` is how a listed page becomes due.
        """
        interval = self.settings.sitemap_refetch_s
        fetched = replace(
            fetched,
            next_fetch=(fetched.last_fetch or time.time()) + interval,
            interval_s=interval,
            etag=result.headers.get("etag", lease.etag if result.not_modified else ""),
            last_modified=result.headers.get(
                "last-modified", lease.last_modified if result.not_modified else ""
            ),
        )
        if result.not_modified:
            return replace(fetched, outcome=Outcome.NOT_MODIFIED)
        if result.status >= 300:
            return replace(fetched, outcome=Outcome.HTTP)
        entries = parse_sitemap(result.body, max_bytes=self.settings.max_page_bytes)
        lastmods: dict[str, float] = {}
        now = time.time()
        for page in entries.pages:
            target = canonicalize_url(page, base=lease.url)
            if target and self.scope.contains(target, 1):
                when = entries.lastmod.get(page)
                if when is not None:
                    lastmods[target] = when = min(when, now)  # a future date would keep it due forever
                self._add(
                    NewUrl(target, host_of(target), 1, _SITEMAP_PAGE_PRIORITY, parent=lease.url, lastmod=when)
                )
        self._lastmods.update(lastmods)  # for URLs known already; a new one's NewUrl carries it
        for child in entries.sitemaps:
            self._add_sitemap(child, lease.depth + 1, parent=lease.url)
        return replace(fetched, outcome=Outcome.SITEMAP)

    def _add_sitemap(self, sitemap_url: str, depth: int, *, parent: str) -> None:
        target = canonicalize_url(sitemap_url, base=parent)
        if not target or depth > _MAX_SITEMAP_DEPTH or self.scope.out_of_scope_reason(target, 0):
            return
        self._frontier.add(
            NewUrl(target, host_of(target), depth, _SITEMAP_PRIORITY, kind=UrlKind.SITEMAP, parent=parent)
        )

    def _follow_links(self, lease: Lease, page_url: str, page: ParsedPage) -> None:
        if page.nofollow:
            return
        depth = lease.depth + 1
        priority = 1.0 / (1.0 + depth)
        taken = 0
        frontier = self._frontier
        for link in page.links:
            if link.nofollow:
                continue
            if taken >= self.settings.max_links_per_page:
                break
            taken += 1
            self._edges.append(Edge(page_url, link.url, link.anchor_text))
            if not frontier.surely_seen(link.url) and self.scope.contains(link.url, depth):
                self._add(NewUrl(link.url, host_of(link.url), depth, priority, parent=page_url))

    def _index_page(
        self, lease: Lease, result: FetchResult, page: ParsedPage, fetched: UrlUpdate
    ) -> UrlUpdate:
        """Apply canonical, noindex and dedup; buffer the document when it is to be indexed."""
        url = lease.url
        final = result.final_url
        canonical = page.canonical_url
        if canonical and canonical != final and self.scope.contains(canonical, lease.depth):
            self._add(NewUrl(canonical, host_of(canonical), lease.depth, lease.priority, parent=url))
            return replace(
                self._scheduled(fetched, lease, changed=True), outcome=Outcome.CANONICALIZED, dup_of=canonical
            )
        if page.noindex:
            return replace(self._scheduled(fetched, lease, changed=True), outcome=Outcome.NOINDEX)
        text_hash, fingerprint, word_count = fingerprints(page.body)
        changed = text_hash != lease.previous_hash
        fetched = replace(
            self._scheduled(fetched, lease, changed=changed), content_hash=text_hash, simhash=fingerprint
        )
        held = not word_count  # whether this very text is indexed under this URL already
        if word_count:
            verdict = self._dedup.check(text_hash, fingerprint)
            original = self._claims.original_of(verdict.of_url)
            if verdict.kind != "unique" and original not in (url, final):
                self.stats.duplicates += 1
                return replace(fetched, outcome=Outcome.DUPLICATE, detail=verdict.kind, dup_of=original)
            # Unchanged text that is not indexed (last time a copy of a page that has
            # since changed) is indexed again, or the page would stay out of search.
            held = verdict.kind == "exact"
            self._dedup.add(url, text_hash, fingerprint)
        if lease.fetch_count and not changed and held:
            return replace(fetched, outcome=Outcome.INDEXED)  # a recrawl that found the same text
        self._doc_leases.append(lease)
        self._docs.append(
            page_document(
                final,
                page,
                fetched_at=result.fetched_at,
                text_hash=text_hash,
                fingerprint=fingerprint,
                max_links=self.settings.max_links_per_page,
            )
        )
        self.stats.indexed += 1
        return replace(fetched, outcome=Outcome.INDEXED, changed=bool(lease.fetch_count) and changed)
