"""The PostgreSQL crawl database's connections, and the primitives the shared methods run on.

Two connections: the main one (the frontier's rounds of leases and releases, on the pump's
thread, and robots and reads) and the batch writer's (``apply``, content claims), each
behind its own lock, so a commit never interleaves with a lease in one transaction.
``retry_on_conflict`` runs a write again when PostgreSQL chose it as a deadlock victim.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from crawl.state.base import POSTGRES, CrawlDbBase, Writer
from crawl.state.pg_batch import insert_urls
from crawl.state.records import NewUrl

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

__all__ = ["PgSession", "connect", "retry_on_conflict"]


def connect(dsn: str) -> psycopg.Connection[dict[str, Any]]:
    """An autocommit connection whose rows are dicts."""
    import psycopg  # lazy: a SQLite crawl never loads the driver
    from psycopg.rows import dict_row

    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


P = ParamSpec("P")
R = TypeVar("R")
_RETRIES = 5


def retry_on_conflict(method: Callable[P, R]) -> Callable[P, R]:
    """Run a write again when PostgreSQL aborted it as a deadlock or serialization victim.

    Workers write overlapping rows (a URL one worker leases, another discovers again;
    its lease renewal beside their batch), and PostgreSQL breaks a lock cycle by failing
    one transaction: it was rolled back whole, and every write here is idempotent, so
    running it again is the documented remedy.
    """

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from psycopg import errors  # lazy: as ``connect``

        for attempt in range(_RETRIES):
            try:
                return method(*args, **kwargs)
            except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
                if attempt == _RETRIES - 1:
                    raise
                logger.info("retrying %s after %s", method.__name__, type(exc).__name__)
                time.sleep(0.01 * 2**attempt)
        raise AssertionError("unreachable")

    return wrapper


class PgSession(CrawlDbBase):
    """The connections of one PostgreSQL crawl database and ``CrawlDbBase``'s primitives over them."""

    _STYLE = POSTGRES
    _ORDER = "id"
    admission_cap: int | None = None
    """The fleet's per-host page cap (``max_pages_per_host``), set by the frontier leasing
    from this database: new pending pages of a host past it are stored blocked."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn = connect(dsn)
        self._lock = threading.RLock()
        self._wconn: psycopg.Connection[dict[str, Any]] | None = None
        self._wlock = threading.Lock()

    def _writer(self) -> psycopg.Connection[dict[str, Any]]:
        if self._wconn is None:
            self._wconn = connect(self.dsn)
        return self._wconn

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        with self._wlock:
            if self._wconn is not None:
                self._wconn.close()

    def _one(self, sql: str, params: Any = None) -> dict[str, Any] | None:
        with self._lock:
            row: dict[str, Any] | None = self._conn.execute(sql, params).fetchone()
        return row

    def _all(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _execute(self, sql: str, params: Any = None) -> int:
        with self._lock:
            return self._conn.execute(sql, params).rowcount

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            yield cur

    @contextmanager
    def _batch_transaction(self) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        """One transaction on the batch writer's connection (opened when first needed)."""
        with self._wlock:
            conn = self._writer()
            with conn.transaction(), conn.cursor() as cur:
                yield cur

    def _insert_urls(self, cur: Writer, inserts: Sequence[NewUrl], now: float) -> None:
        insert_urls(cur, inserts, now, self.admission_cap)
