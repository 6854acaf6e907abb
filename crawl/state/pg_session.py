"""The PostgreSQL crawl database's connections, and the primitives the shared methods run on.

Two connections: the main one (the frontier's rounds of leases and releases, on the pump's
thread, and robots and reads) and the batch writer's (``apply``, content claims), each
behind its own lock, so a commit never interleaves with a lease in one transaction.
``retry_on_conflict`` (``crawl.state.pg_retry``) runs a call again when PostgreSQL chose
it as a deadlock victim, or when the connection was lost (a restart): reconnecting here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from crawl.state.base import POSTGRES, CrawlDbBase, Writer
from crawl.state.pg_batch import insert_urls
from crawl.state.pg_retry import Reconnecting, retry_on_conflict
from crawl.state.records import NewUrl

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

__all__ = ["PgSession", "connect", "retry_on_conflict"]


_CONNECT_TIMEOUT_S = 10
"""Unless the DSN says otherwise: an unreachable host fails a (re)connection in this long,
so an outage's retries keep their pace instead of waiting for TCP's own timeout."""


def connect(dsn: str) -> psycopg.Connection[dict[str, Any]]:
    """An autocommit connection whose rows are dicts."""
    import psycopg  # lazy: a SQLite crawl never loads the driver
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import dict_row

    if "connect_timeout" not in conninfo_to_dict(dsn):
        return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=_CONNECT_TIMEOUT_S)
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


class PgSession(Reconnecting, CrawlDbBase):
    """The connections of one PostgreSQL crawl database and ``CrawlDbBase``'s primitives over them.

    Connections the server closed (a restart) are replaced before a call runs again
    (``_reopen``, ``_writer``), never in the middle of one."""

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
        if self._wconn is None or self._wconn.closed:
            self._wconn = connect(self.dsn)
        return self._wconn

    def _reopen(self) -> None:
        with self._lock:
            if self._conn.closed:
                self._conn = connect(self.dsn)

    def _where(self) -> str:
        from psycopg.conninfo import conninfo_to_dict  # lazy: as ``connect``

        info = conninfo_to_dict(self.dsn)
        return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        with self._wlock:
            if self._wconn is not None:
                self._wconn.close()

    @retry_on_conflict
    def _one(self, sql: str, params: Any = None) -> dict[str, Any] | None:
        with self._lock:
            row: dict[str, Any] | None = self._conn.execute(sql, params).fetchone()
        return row

    @retry_on_conflict
    def _all(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    @retry_on_conflict
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
