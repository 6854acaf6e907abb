"""The response cache that the workers of one ``trawl serve`` share: one SQLite file.

Each worker keeps its own in-memory cache (:mod:`retrieval.query.cache`), and a query
stream split over two workers found a repeat in its worker's cache about half as often:
on the serving bench the hit rate at 8 clients fell from 47% to 36%, and hybrid served
fewer queries/s with two workers than with one (DECISIONS 74). This second level, a WAL
SQLite file in the run's shared folder, lets an answer computed by one worker serve the
others. Entries carry a wall-clock expiry (the workers share no monotonic clock); the
key's digest is of its ``repr``, plain data (generation view, analysed terms, page).
A cache never fails a search: a locked or broken file reads as a miss and skips a put.
Puts are written by a thread of their own, batched: a search no longer waits on the other
worker's write lock (SQLite sleeps 1 ms and more), and a put that lost that race is written
late instead of dropped (DECISIONS 78).
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import queue
import sqlite3
import threading
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

from core.settings import SearchSettings
from retrieval.query.cache import TtlLruCache

logger = logging.getLogger(__name__)

V = TypeVar("V")
TRIM_EVERY_PUTS = 256
"""Expired rows and those past ``max_entries`` are deleted once in this many puts."""
PENDING_PUTS = 1024
"""Puts waiting for the writer thread; past this a put is dropped (a cache may forget)."""
BATCH_PUTS = 64
"""Puts the writer commits in one transaction: one lock taken for all that waited."""


class SharedCache(Generic[V]):
    """TTL entries in one SQLite file, for every process that opens it."""

    def __init__(self, path: Path, max_entries: int, ttl_s: float) -> None:
        self.path = Path(path)
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._local = threading.local()
        self._puts = 0
        self._pending: queue.Queue[tuple[bytes, V]] = queue.Queue(PENDING_PUTS)
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)  # every worker at once
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key BLOB PRIMARY KEY, expires REAL, value BLOB)"
            )
        finally:
            db.close()
        # Started once the file is known to be a cache: a broken one leaves no thread behind.
        threading.Thread(target=self._write_forever, name="shared-cache", daemon=True).start()

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:  # one connection a thread: sqlite3 connections are not shared
            db = sqlite3.connect(self.path, timeout=0.05, isolation_level=None)
            db.execute("PRAGMA synchronous=OFF")  # a cache: losing it with the machine is fine
            self._local.db = db
        return db

    @staticmethod
    def _digest(key: Hashable) -> bytes:
        return hashlib.blake2b(repr(key).encode("utf-8"), digest_size=16).digest()

    def get(self, key: Hashable) -> V | None:
        try:
            row = (
                self._db()
                .execute(
                    "SELECT value FROM responses WHERE key = ? AND expires > ?",
                    (self._digest(key), time.time()),
                )
                .fetchone()
            )
            return pickle.loads(row[0]) if row is not None else None  # noqa: S301 - written by these workers
        except (sqlite3.Error, pickle.UnpicklingError, EOFError) as exc:
            logger.debug("shared cache read missed: %s", exc)
            return None

    def put(self, key: Hashable, value: V) -> None:
        """Queue ``value`` for the writer thread; the search that computed it does not wait."""
        try:
            self._pending.put_nowait((self._digest(key), value))
        except queue.Full:
            logger.debug("shared cache write skipped: %d puts waiting", PENDING_PUTS)

    def flush(self) -> None:
        """Wait until every put queued so far is written (or skipped)."""
        self._pending.join()

    def _write_forever(self) -> None:
        db = sqlite3.connect(self.path, timeout=1.0, isolation_level=None)  # waits off the request path
        db.execute("PRAGMA synchronous=OFF")
        while True:
            batch = [self._pending.get()]
            while len(batch) < BATCH_PUTS:
                try:
                    batch.append(self._pending.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write(db, batch)
            except (sqlite3.Error, pickle.PicklingError, TypeError) as exc:
                logger.debug("shared cache write skipped: %s", exc)
                if db.in_transaction:
                    db.execute("ROLLBACK")
            finally:
                for _ in batch:
                    self._pending.task_done()

    def _write(self, db: sqlite3.Connection, batch: list[tuple[bytes, V]]) -> None:
        expires = time.time() + self.ttl_s
        rows = [(digest, expires, pickle.dumps(value, pickle.HIGHEST_PROTOCOL)) for digest, value in batch]
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?)", rows)
        before, self._puts = self._puts, self._puts + len(rows)
        if before // TRIM_EVERY_PUTS != self._puts // TRIM_EVERY_PUTS:
            db.execute("DELETE FROM responses WHERE expires <= ?", (time.time(),))
            db.execute(
                "DELETE FROM responses WHERE key IN (SELECT key FROM responses ORDER BY expires DESC "
                "LIMIT -1 OFFSET ?)",
                (self.max_entries,),
            )
        db.execute("COMMIT")

    def clear(self) -> None:
        try:
            self._db().execute("DELETE FROM responses")
        except sqlite3.Error as exc:
            logger.warning("shared response cache not cleared: %s", exc)


class LayeredCache(Generic[V]):
    """This process's in-memory cache in front of the workers' shared one."""

    def __init__(self, local: TtlLruCache[V], shared: SharedCache[V] | None) -> None:
        self.local = local
        self.shared = shared

    def get(self, key: Hashable) -> V | None:
        value = self.local.get(key)
        if value is None and self.shared is not None:
            value = self.shared.get(key)
            if value is not None:
                self.local.put(key, value)
        return value

    def put(self, key: Hashable, value: V) -> None:
        self.local.put(key, value)
        if self.shared is not None:
            self.shared.put(key, value)

    def clear(self) -> None:
        self.local.clear()
        if self.shared is not None:
            self.shared.clear()


def open_shared_cache(settings: SearchSettings) -> SharedCache[Any] | None:
    """The workers' shared cache when ``trawl serve`` runs several (None otherwise, or when
    the response cache is off); one that cannot be opened is left out, with a warning."""
    if settings.shared_cache_path is None or settings.cache_entries <= 0:
        return None
    try:
        return SharedCache(settings.shared_cache_path, settings.cache_entries, settings.cache_ttl_s)
    except sqlite3.Error as exc:
        logger.warning(
            "shared response cache %s not opened (%s): each worker caches alone",
            settings.shared_cache_path,
            exc,
        )
        return None
