"""A crawl that never ends: rounds of new URLs and due recrawls until stopped.

Each round is one ``Crawler.run`` with ``recrawl`` (due pages made pending again, and
known sitemaps every ``crawl.sitemap_refetch_s``, whose newer ``<lastmod>`` dates make
their pages due in the round after), so each round keeps the crawler's durability:
batches written before they are acknowledged, leases of a killed process returned at
the next open. Between rounds the crawl waits ``idle_s`` for pages to come due.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from core.crawldir import CrawlDir
from core.settings import CrawlSettings
from crawl.run.loop import Crawler

logger = logging.getLogger(__name__)

__all__ = ["ContinuousCrawl"]


class ContinuousCrawl:
    def __init__(
        self, data_dir: Path, settings: CrawlSettings, *, seeds: Sequence[str], idle_s: float = 1.0
    ) -> None:
        self.data_dir = Path(data_dir)
        self.settings = settings
        self.seeds = list(seeds)
        self.idle_s = idle_s
        self.rounds = 0
        self._stopped = False
        self._crawler: Crawler | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def request_stop(self) -> None:
        """Finish the round's fetches in flight, store them, and return.

        Safe from any thread: ``trawl run``'s indexer thread calls it when it fails. The
        crawl's events and frontier belong to its event loop, and setting an
        ``asyncio.Event`` from another thread neither is safe nor wakes the loop (the stop
        waited for the idle timeout, or for the round's fetches), so the stop is handed to
        the loop.
        """
        self._stopped = True
        loop = self._loop
        if loop is not None and not _running_in(loop):
            try:
                loop.call_soon_threadsafe(self._stop_on_loop)
            except RuntimeError:  # the loop has closed: nothing is left to stop
                pass
            return
        self._stop_on_loop()

    def _stop_on_loop(self) -> None:
        if self._crawler is not None:
            self._crawler.request_stop()
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> int:
        """Crawl rounds until stopped; returns how many ran.

        The crawl directory's writer lock is held from the first round to the last, so no
        other crawl slips in between two rounds (``DirectoryBusy`` when one holds it now).
        """
        lock = CrawlDir(self.data_dir).writer_lock(self.settings.frontier_url, self.settings.worker_id)
        if lock is None:
            return await self._rounds()
        with lock.held():
            return await self._rounds()

    async def _rounds(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while not self._stopped:
            self._crawler = Crawler(self.data_dir, self.settings, seeds=self.seeds, recrawl=True)
            summary = await self._crawler.run()
            self._crawler = None
            self.rounds += 1
            logger.info("crawl round %d: %d pages", self.rounds, summary.pages)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.idle_s)
            except TimeoutError:
                pass
        return self.rounds


def _running_in(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the calling thread is running ``loop``."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
