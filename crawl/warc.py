"""Raw responses to WARC files (ISO 28500) with warcio, gzip per record.

Per-record gzip lets a reader seek to any record (CDX indexes store offsets) and
means a crash loses at most the record being written. A new file is started per
process run and when a file passes ``max_file_bytes``, so a resumed crawl never
appends to a file that may end in a torn record.

httpx hands us the decoded body, so the stored HTTP headers drop
``Content-Encoding``/``Transfer-Encoding`` and carry the decoded length: the record
replays as what the parser saw (Heritrix keeps the wire bytes; reprocessing is what
we need them for).
"""

from __future__ import annotations

import io
import logging
import os
import queue
import threading
import time
from http import HTTPStatus
from pathlib import Path
from types import TracebackType

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawl.fetcher import FetchResult

logger = logging.getLogger(__name__)

__all__ = ["WarcSink"]

_DROPPED_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


class WarcSink:
    """Appends request/response record pairs to rolling ``*.warc.gz`` files in a folder."""

    def __init__(
        self, folder: Path, *, max_file_bytes: int = 1 << 30, prefix: str = "trawl", background: bool = True
    ) -> None:
        self._folder = folder
        self._folder.mkdir(parents=True, exist_ok=True)
        self._max_file_bytes = max_file_bytes
        self._prefix = prefix
        self._serial = 0
        self._file: io.BufferedWriter | None = None
        self._writer: WARCWriter | None = None
        self.records = 0
        # Digests and gzip cost ~0.3 ms per exchange and release the GIL on big buffers:
        # a writer thread takes them off the event loop. ``flush`` waits for it.
        self._queue: queue.Queue[FetchResult | None] | None = (
            queue.Queue(maxsize=1024) if background else None
        )
        self._error: BaseException | None = None
        # ``flush`` may run on another thread than the writer (the crawl loop flushes from
        # a worker thread) and must not flush a file the writer is rotating away.
        self._file_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if self._queue is not None:
            self._thread = threading.Thread(target=self._drain, name="warc-writer", daemon=True)
            self._thread.start()

    def _drain(self) -> None:
        assert self._queue is not None
        while True:
            result = self._queue.get()
            try:
                if result is None:
                    return
                if self._error is None:
                    self._write_now(result)
            except BaseException as exc:  # kept and re-raised by flush(): acks must stop
                self._error = exc
            finally:
                self._queue.task_done()

    def _open(self) -> WARCWriter:
        if self._writer is not None and self._file is not None and self._file.tell() < self._max_file_bytes:
            return self._writer
        self._close_file()
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        self._serial += 1
        path = self._folder / f"{self._prefix}-{stamp}-{os.getpid()}-{self._serial:05d}.warc.gz"
        self._file = open(path, "ab")
        self._writer = WARCWriter(self._file, gzip=True)
        logger.info("Writing WARC records to %s", path)
        return self._writer

    def write(self, result: FetchResult) -> None:
        """Write (or queue for the writer thread) the records of one exchange."""
        if self._queue is None:
            self._write_now(result)
        else:
            self._queue.put(result)

    def _write_now(self, result: FetchResult) -> None:
        with self._file_lock:
            self._write_locked(result)

    def _write_locked(self, result: FetchResult) -> None:
        writer = self._open()
        target = result.final_url
        path = "/" + target.partition("://")[2].partition("/")[2]
        request_headers = StatusAndHeaders(
            f"GET {path} HTTP/1.1",
            [("Host", target.partition("://")[2].split("/", 1)[0])]
            + [(k, v) for k, v in result.request_headers.items() if k.lower() != "host"],
            is_http_request=True,
        )
        headers = [(k, v) for k, v in result.headers.items() if k not in _DROPPED_HEADERS]
        headers.append(("Content-Length", str(len(result.body))))
        response_headers = StatusAndHeaders(
            f"{result.status} {_reason(result.status)}", headers, protocol=result.http_version
        )
        date = _warc_date(result.fetched_at)
        response = writer.create_warc_record(
            target,
            "response",
            payload=io.BytesIO(result.body),
            http_headers=response_headers,
            warc_headers_dict={"WARC-Date": date, "WARC-IP-Address": result.address},
        )
        request = writer.create_warc_record(
            target,
            "request",
            payload=io.BytesIO(b""),
            http_headers=request_headers,
            warc_headers_dict={
                "WARC-Date": date,
                "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID"),
            },
        )
        writer.write_record(response)
        writer.write_record(request)
        self.records += 2

    def flush(self) -> None:
        """Wait until every queued exchange is written, and push it to the OS."""
        if self._queue is not None:
            self._queue.join()
        if self._error is not None:
            raise OSError(f"Writing WARC records failed: {self._error}") from self._error
        with self._file_lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        if self._queue is not None and self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        with self._file_lock:
            self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None
        self._writer = None

    def __enter__(self) -> WarcSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _warc_date(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp or time.time()))


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
