"""Impression and click logs: buffered appends to Parquet parts, nothing lost on shutdown.

Each log is a directory of immutable Parquet parts. A flush writes the buffered rows as one
new part with ``core.atomic``, so a reader (``scan_parquet`` on ``part-*.parquet``) sees
whole parts only and a crash leaves at worst a stray ``.tmp``. Part names carry the time,
the process id and a sequence number, so restarts append, never rewrite or duplicate.

Buffering is bounded: a log flushes when ``max_buffer_rows`` rows wait (in the caller's
thread) and every ``flush_interval_s`` (a background thread); rows the disk refuses stay
buffered and are retried, up to ``max_buffer_rows × RETRY_FACTOR``, beyond which the oldest
are dropped and counted (an ERROR). A row that does not fit the schema is dropped and counted
in ``rejected`` on its own: the rest of its batch is written. ``close`` (the service's
shutdown, and ``atexit``) flushes what is left; a SIGKILL loses at most the unflushed buffer.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from core import atomic
from core.settings import Settings

logger = logging.getLogger(__name__)

RETRY_FACTOR = 8
PART_GLOB = "part-*.parquet"

IMPRESSION_SCHEMA = pa.schema(
    [
        ("impression_id", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("experiment", pa.string()),
        ("variant", pa.string()),
        ("unit_id", pa.string()),
        ("query", pa.string()),
        ("ranker", pa.string()),
        ("generation", pa.string()),
        ("page", pa.int32()),
        ("size", pa.int32()),
        ("doc_ids", pa.list_(pa.int64())),
        ("teams", pa.list_(pa.string())),
    ]
)
"""One row per search response; ``doc_ids[i]`` was shown at position ``i + 1`` of the page;
``teams`` is aligned with it for interleaving (empty otherwise)."""

CLICK_SCHEMA = pa.schema(
    [
        ("click_id", pa.string()),
        ("impression_id", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("doc_id", pa.int64()),
        ("position", pa.int32()),
        ("experiment", pa.string()),
        ("variant", pa.string()),
        ("team", pa.string()),
    ]
)


def resolve_log_dir(settings: Settings) -> Path:
    return settings.experiments.log_dir or settings.data_dir / "experiments" / "logs"


class ParquetLog:
    """An append-only log of rows with a fixed schema, stored as Parquet parts in ``directory``."""

    def __init__(
        self,
        directory: Path,
        schema: pa.Schema,
        *,
        max_buffer_rows: int = 512,
        flush_interval_s: float | None = 5.0,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.schema = schema
        self.max_buffer_rows = max_buffer_rows
        self.dropped = 0
        self.rejected = 0
        self.written = 0
        self._rows: list[Mapping[str, Any]] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._token = uuid.uuid4().hex[:8]
        self._closed = False
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if flush_interval_s is not None:
            self._timer = threading.Thread(
                target=self._flush_periodically,
                args=(flush_interval_s,),
                daemon=True,
                name="parquet-log-flush",
            )
            self._timer.start()
        # atexit holds a weak reference: an abandoned log is still flushed by the GC's close.
        atexit.register(_close_at_exit, weakref.ref(self))

    @property
    def pending(self) -> int:
        return len(self._rows)

    def append(self, row: Mapping[str, Any]) -> None:
        """Buffer one row (a mapping over the schema's names); flushes when the buffer is full."""
        if self._closed:
            raise RuntimeError(f"log {self.directory} is closed")
        with self._lock:
            self._rows.append(row)
            # Read under the lock: a row that passed the check above while ``close`` ran
            # arrives after close's last flush, and would stay in the buffer for ever.
            full = self._closed or len(self._rows) >= self.max_buffer_rows
        if full:
            self.flush()

    def flush(self) -> int:
        """Write the buffered rows as one new part; returns how many were written."""
        with self._lock:
            if not self._rows:
                return 0
            rows = self._rows
            self._rows = []
            table = self._table(rows)
            if table.num_rows != len(rows):
                rows = table.to_pylist()  # a retry keeps the good rows only
            try:
                self._write_part(table)
            except OSError as exc:
                keep = self.max_buffer_rows * RETRY_FACTOR
                lost = max(0, len(rows) - keep)
                self._rows = rows[lost:] + self._rows
                if lost:
                    self.dropped += lost
                    logger.error(
                        "dropped %d log rows for %s after write failures: %s", lost, self.directory, exc
                    )
                else:
                    logger.warning(
                        "log write to %s failed, %d rows kept for retry: %s", self.directory, len(rows), exc
                    )
                return 0
            self.written += table.num_rows
            return int(table.num_rows)

    def _table(self, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
        """The rows as one table; when one does not convert, each alone, dropping the bad ones."""
        try:
            return pa.Table.from_pylist(list(rows), schema=self.schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        good: list[pa.Table] = []
        for row in rows:
            try:
                good.append(pa.Table.from_pylist([row], schema=self.schema))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                self.rejected += 1
                logger.error("dropped a log row for %s that does not fit its schema: %s", self.directory, exc)
        return pa.concat_tables(good) if good else self.schema.empty_table()

    def _write_part(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._seq += 1
        name = f"part-{time.time_ns():020d}-{os.getpid()}-{self._token}-{self._seq:06d}.parquet"
        atomic.write_with(self.directory / name, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
        logger.debug("wrote %d rows to %s", table.num_rows, name)

    def _flush_periodically(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the timer must survive to flush again; close() retries
                logger.exception("periodic flush of %s failed", self.directory)

    def close(self) -> None:
        """Stop the timer and flush what is left. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(timeout=5)
        self.flush()
        if self._rows:
            logger.error("closing %s with %d unwritten rows", self.directory, len(self._rows))

    def __enter__(self) -> ParquetLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_at_exit(ref: weakref.ReferenceType[ParquetLog]) -> None:
    log = ref()
    if log is not None:
        log.close()


def part_files(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob(PART_GLOB))


def read_log(directory: Path, schema: pa.Schema) -> pa.Table:
    """Every row written so far (whole parts only), as one Arrow table in write order."""
    parts = part_files(directory)
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([pq.read_table(p, schema=schema) for p in parts])


@dataclass(frozen=True, slots=True)
class LogPaths:
    impressions: Path
    clicks: Path

    @classmethod
    def under(cls, log_dir: Path) -> LogPaths:
        return cls(Path(log_dir) / "impressions", Path(log_dir) / "clicks")


class ExperimentLogs:
    """The two logs the service writes: impressions (per search) and clicks."""

    def __init__(
        self, log_dir: Path, *, max_buffer_rows: int = 512, flush_interval_s: float | None = 5.0
    ) -> None:
        self.paths = LogPaths.under(log_dir)
        self.impressions = ParquetLog(
            self.paths.impressions,
            IMPRESSION_SCHEMA,
            max_buffer_rows=max_buffer_rows,
            flush_interval_s=flush_interval_s,
        )
        self.clicks = ParquetLog(
            self.paths.clicks,
            CLICK_SCHEMA,
            max_buffer_rows=max_buffer_rows,
            flush_interval_s=flush_interval_s,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> ExperimentLogs:
        s = settings.experiments
        return cls(
            resolve_log_dir(settings), max_buffer_rows=s.buffer_rows, flush_interval_s=s.flush_interval_s
        )

    def flush(self) -> None:
        self.impressions.flush()
        self.clicks.flush()

    def close(self) -> None:
        self.impressions.close()
        self.clicks.close()
