"""The seen-URL filter: an rbloom Bloom filter in front of the ``urls`` table (SQLite or PostgreSQL).

Most links a crawler extracts were seen before (navigation repeats on every page), so the
check must be cheap: the Bloom filter answers "certainly new" in O(1), and only its
"probably seen" answers go to the table, whose primary key is the truth. URLs accepted but
not yet committed are held in a set until the next commit, then in a bounded
two-generation cache, so links every page repeats cost no lookup each time.

The filter is rebuilt from the table at start (rbloom's hash is per-process) and at twice
the size when it fills past its capacity, so the false-positive rate stays near its target;
it starts small because a large filter is touched all over even by a small crawl.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rbloom import Bloom

if TYPE_CHECKING:
    from crawl.state.postgres import PgCrawlDb
    from crawl.state.sqlite import CrawlDb

logger = logging.getLogger(__name__)

__all__ = ["SeenUrls"]


class SeenUrls:
    """Answers "has this canonical URL been seen?" and records new ones."""

    def __init__(
        self, db: CrawlDb | PgCrawlDb, *, capacity: int = 1 << 17, error_rate: float = 0.001
    ) -> None:
        self._db = db
        self._error_rate = error_rate
        self._uncommitted: set[str] = set()
        self._recent: set[str] = set()
        self._older: set[str] = set()
        self._recent_max = 200_000
        started = time.monotonic()
        count = db.count_urls()
        self._capacity = max(capacity, count * 2)
        self._bloom = Bloom(self._capacity, error_rate)
        self._count = 0
        for url in db.iter_urls():
            self._bloom.add(url)
            self._count += 1
        self.table_lookups = 0
        logger.info("Seen filter loaded %d URLs in %.2f s", self._count, time.monotonic() - started)

    def __len__(self) -> int:
        return self._count

    def surely_seen(self, url: str) -> bool:
        """True when the URL is certainly known, without a table lookup (False: maybe new).

        The crawl loop asks first for every extracted link, so the links each page
        repeats skip the scope check and the admission step."""
        return url in self._uncommitted or url in self._recent or url in self._older

    def add_if_new(self, url: str) -> bool:
        """Record the URL; True when it was not seen before."""
        if url in self._bloom:
            if url in self._uncommitted or url in self._recent or url in self._older:
                return False
            self.table_lookups += 1
            if self._db.exists(url):
                self._remember(url)
                return False
        self._bloom.add(url)
        self._uncommitted.add(url)
        self._count += 1
        if self._count > self._capacity:
            self._grow()
        return True

    def committed(self, urls: Iterable[str]) -> None:
        """The frontier wrote a batch: the table now knows these URLs.

        Only the batch's own URLs: others accepted while it was being written are not
        in the table yet, and a rebuild of the filter must still add them.
        """
        for url in urls:
            if url in self._uncommitted:
                self._uncommitted.discard(url)
                self._remember(url)

    def _remember(self, url: str) -> None:
        self._recent.add(url)
        if len(self._recent) >= self._recent_max:
            self._older, self._recent = self._recent, set()

    def _grow(self) -> None:
        self._capacity *= 2
        logger.info("Seen filter full; rebuilding with capacity %d", self._capacity)
        bloom = Bloom(self._capacity, self._error_rate)
        for url in self._db.iter_urls():
            bloom.add(url)
        for url in self._uncommitted:
            bloom.add(url)
        self._bloom = bloom
