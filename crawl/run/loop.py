"""The crawl loop: N async workers taking leases from the frontier until the work runs out.

Per URL: the operator's block list, the address guard, robots.txt (fetched in the
host's own politeness slot, :mod:`crawl.run.robots_fetch`), the fetch, then the
response (:mod:`crawl.run.responses`). A bad page is data, not an exception: every
outcome becomes a ``UrlUpdate`` and the loop moves on. Results are stored in batches
by :mod:`crawl.run.batch_writer`. The parts a run needs are built together
(``crawl.run.parts.CrawlerParts``); the HTTP transport or client can be passed in.

Example::

    crawler = Crawler(Path("data/crawl"), CrawlSettings(allow_loopback=True), seeds=["http://127.0.0.1:8000/"])
    summary = asyncio.run(crawler.run())
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import sniffio

from core.blocklist import BlockList
from core.crawldir import CrawlDir
from core.deletions import Removal
from core.errors import FetchError, OutOfScope, RobotsDenied, TooLarge
from core.settings import CrawlSettings
from core.types import doc_id_for
from crawl.fetch.fetcher import FetchResult, HopCheck
from crawl.fetch.guard import Resolver, system_resolver
from crawl.frontier.leases import Feedback, Lease
from crawl.run.batch_writer import BatchWriter
from crawl.run.counters import CrawlStats, CrawlSummary
from crawl.run.disk_stop import DiskStop
from crawl.run.outcomes import error_kind, removal_reason, retry_after_s, retry_or_fail
from crawl.run.parts import CrawlerParts
from crawl.run.responses import ResponseHandler
from crawl.run.robots_fetch import RobotsFetcher
from crawl.scope import Scope
from crawl.state.content_claims import ContentClaims
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.urls import canonicalize_url, host_of, origin_of

if TYPE_CHECKING:
    from crawl.run.metrics import FetchObserver

logger = logging.getLogger(__name__)

__all__ = ["Crawler"]

_SEED_PRIORITY = 1.0


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
        running = _CrawlRun(parts, self.settings, self.scope, self.stats, observer=self.observer)
        self._running = running
        if self._stopped:
            parts.frontier.stop()
        try:
            try:
                await running.crawl(self.seeds)
            finally:
                self._running = None
                try:
                    await running.finish()
                finally:
                    await parts.aclose()
        except Exception as exc:
            if running.disk.caught(exc) and running.disk.error is not None:
                raise running.disk.error from exc
            raise
        if running.disk.error is not None:
            raise running.disk.error  # a clean stop: the rest stays queued for a resume
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
    """The workers of one ``Crawler.run``: each takes a lease and sees its URL through."""

    def __init__(
        self,
        parts: CrawlerParts,
        settings: CrawlSettings,
        scope: Scope,
        stats: CrawlStats,
        *,
        observer: FetchObserver | None = None,
    ) -> None:
        self.parts = parts
        self.settings = settings
        self.scope = scope
        self.stats = stats
        self.observer = observer
        """Told of every exchange and new URL (``crawl.run.metrics``)."""
        self._frontier = parts.frontier
        self._fetcher = parts.fetcher
        self._guard = parts.guard
        self._robots = RobotsFetcher(parts, settings, stats, self._record_exchange).cache
        claims = ContentClaims(parts.db, settings.near_dup_max_distance)
        self.disk = DiskStop(parts.layout.root, parts.frontier.stop)
        """Stops the crawl at the first write that fails for lack of space (``crawl.run.disk_stop``)."""
        self._writes = BatchWriter(parts, stats, claims, settings.flush_interval_s, disk=self.disk)
        self._blocklist = BlockList(parts.layout.blocklist)
        self._responses = ResponseHandler(
            parts, settings, scope, stats, claims=claims, pending=self._writes.pending, observer=observer
        )

    # -- lifecycle -----------------------------------------------------------

    async def crawl(self, seeds: Sequence[str]) -> None:
        for seed in seeds:
            self._frontier.add(NewUrl(seed, host_of(seed), 0, _SEED_PRIORITY))
        # httpcore asks sniffio which event loop runs on every request (its locks and
        # cancellation shields), and sniffio answers by calling asyncio's ``current_task``
        # in Python, a visible share of a worker's CPU. Said once here, every task below
        # inherits the answer (sniffio's own context variable for this).
        said = sniffio.current_async_library_cvar.set("asyncio")
        workers = [asyncio.create_task(self._worker()) for _ in range(self.settings.concurrency)]
        flusher = asyncio.create_task(self._writes.flush_periodically())
        sniffio.current_async_library_cvar.reset(said)
        try:
            await asyncio.gather(*workers)
        finally:
            flusher.cancel()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(flusher, *workers, return_exceptions=True)

    async def finish(self) -> None:
        """Store what is buffered (after any batch still being written), then repair cluster sizes;
        after a full disk, give back what this worker holds of a shared frontier instead."""
        try:
            await self._writes.finish()
        finally:
            if self.disk.error is not None:
                await asyncio.to_thread(self._frontier.abandon)

    async def _worker(self) -> None:
        frontier = self._frontier
        while (lease := await frontier.lease()) is not None:
            try:
                await self._handle(lease)
            except Exception as exc:  # a bug on one page must not stop the crawl
                if self.disk.caught(exc):  # nor be stored: the URL stays queued for the resume
                    frontier.defer(lease, Feedback(requested=False))
                    continue
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
            if frontier.uncommitted >= self.settings.flush_every and not self._writes.flushes_in_flight:
                await self._writes.flush()

    # -- one URL -------------------------------------------------------------

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
            self._writes.pending.removals.append(
                Removal(doc_id_for(lease.url), lease.url, reason, time.time())
            )
        self._frontier.finish(lease, update, feedback)

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
                self._responses.add_sitemap(sitemap, 0, parent=f"{origin}/robots.txt")
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
                retry_or_fail(
                    lease,
                    Outcome.ROBOTS_UNAVAILABLE,
                    policy.status or None,
                    max_retries=self.settings.max_retries,
                ),
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
            kind = error_kind(exc)
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
            kind = error_kind(exc)
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
                retry_or_fail(
                    lease, Outcome.ERROR, None, max_retries=self.settings.max_retries, detail=exc.reason
                ),
                Feedback(error=True, crawl_delay_s=crawl_delay, retry_after_s=recover_s),
            )
            return
        self._record_exchange(result)
        if lease.due_at and self.observer is not None:
            self.observer.recrawled((result.fetched_at or time.time()) - lease.due_at)
        feedback = Feedback(response_s=result.elapsed_s, crawl_delay_s=crawl_delay)
        self._finish(lease, await self._responses.handle(lease, result), self._feedback_for(result, feedback))

    def _feedback_for(self, result: FetchResult, ok: Feedback) -> Feedback:
        if result.status == 429 or result.status >= 500:
            self.stats.errors[f"http_{result.status}"] += 1
            retry_after = retry_after_s(result.headers.get("retry-after", ""), time.time())
            return Feedback(
                response_s=ok.response_s,
                error=True,
                retry_after_s=retry_after,
                crawl_delay_s=ok.crawl_delay_s,
            )
        return ok
