"""Fetching robots.txt for the run's robots cache, politely, redirects included.

RFC 9309 §2.5: the first 500 KiB are parsed; a longer file is cut, not refused. Its
redirects are followed across hosts, each other host in its own politeness slot
(:mod:`crawl.frontier.host_slots`). A redirect to another origin's robots.txt whose
answer is cached stops there: the file the redirects end at applies, so that answer is
the first origin's too, without asking again.
"""

from __future__ import annotations

from collections.abc import Callable

from core.errors import CrawlError
from core.settings import CrawlSettings
from crawl.fetch.fetcher import FetchResult, HopCheck
from crawl.fetch.robots import MAX_ROBOTS_BYTES, RobotsCache
from crawl.frontier.host_slots import HostSlots
from crawl.run.counters import CrawlStats
from crawl.run.parts import CrawlerParts
from crawl.urls import host_of, origin_of


class _KnownRobots(CrawlError):
    """A robots.txt redirect reached a robots.txt whose answer is cached: the chain stops there."""

    def __init__(self, url: str, status: int, body: bytes) -> None:
        super().__init__(f"robots.txt at {url} is known")
        self.status = status
        self.body = body


class RobotsFetcher:
    """The run's ``RobotsCache`` (``cache``) and the fetches that fill it."""

    def __init__(
        self,
        parts: CrawlerParts,
        settings: CrawlSettings,
        stats: CrawlStats,
        record_exchange: Callable[[FetchResult], None],
    ) -> None:
        self.settings = settings
        self.stats = stats
        self._frontier = parts.frontier
        self._fetcher = parts.fetcher
        self._record_exchange = record_exchange
        """Counts an exchange, writes its WARC records and tells the run's observer."""
        self.cache = RobotsCache(
            self._fetch,
            user_agent=settings.user_agent,
            ttl_s=settings.robots_ttl_s,
            error_ttl_s=settings.robots_error_ttl_s,
            store=parts.db,
        )

    async def _fetch(self, url: str) -> tuple[int, bytes]:
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
            self.cache.learn(final_origin, result.status, result.body)
        return result.status, result.body

    def _known_robots_hop(self, origin: str) -> HopCheck:
        """A robots.txt redirect to another origin's robots.txt whose answer is known: that
        answer is the first origin's too."""

        async def check(target: str) -> None:
            target_origin = origin_of(target)
            if target_origin == origin or target != f"{target_origin}/robots.txt":
                return
            policy = self.cache.cached(target_origin)
            if policy is not None:
                raise _KnownRobots(target, policy.status, policy.body.encode("utf-8"))

        return check

    def _known_crawl_delay(self, url: str) -> float:
        """The Crawl-delay of ``url``'s origin if its robots.txt is known already, else 0."""
        policy = self.cache.cached(origin_of(url))
        return policy.crawl_delay(self.cache.agent) if policy is not None else 0.0
