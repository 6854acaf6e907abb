"""Raw responses to WARC files (ISO 28500, WARC/1.1), gzip per record; warcio reads them.

Per-record gzip lets a reader seek to any record (CDX indexes store offsets), and a crash
loses at most the record being written. A new file starts per process run and past
``max_file_bytes``, so a resumed crawl never appends to a file that may end torn.

Per exchange: a ``response`` record with the body as it came over the wire (encoding as
sent, chunking undone, at most the page cap) and its payload and block digests; or a
``revisit`` instead when the URL's archive already has that payload
(``identical-payload-digest``) or the server answered 304 (``server-not-modified``), naming
the original response; and a ``request`` record beside it (``WARC-Concurrent-To``). Header
lines are archived as they came, less the framing headers the payload no longer has.

Readers get decoded bodies from :func:`read_responses`, capped (``crawl.fetch.decoding``):
warcio's own ``content_stream`` would decode without a limit.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO

from crawl.fetch.decoding import BodyDecoder, DecodedTooLarge, DecodingFailed
from crawl.fetch.fetcher import FetchResult

if TYPE_CHECKING:
    from warcio.recordloader import ArcWarcRecord

logger = logging.getLogger(__name__)

__all__ = [
    "IDENTICAL_PAYLOAD",
    "SERVER_NOT_MODIFIED",
    "StoredResponse",
    "WarcSink",
    "decoded_payload",
    "payload_digest",
    "read_responses",
    "warc_time",
]

IDENTICAL_PAYLOAD = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
SERVER_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"

_LENGTH_HEADERS = frozenset({"transfer-encoding", "content-length"})
"""Re-stated for the stored payload: chunking is undone by the client, the length is ours."""
_DECODED_HEADERS = _LENGTH_HEADERS | {"content-encoding"}
_READ_STEP = 64 * 1024
GZIP_LEVEL = 1
"""The default ``warc_gzip_level``. warcio's fixed level 9 spent ~1.7× the CPU of level 6
per record for archives 0.5% smaller on the Python docs (3.2 vs 1.9 ms a page); level 1
spends 0.43 ms a Python-docs page against level 6's 1.0 for archives 26% bigger (17.3%
of the raw bytes against 13.7%). A crawl worker is CPU-bound on 2 cores and disk is the
cheap resource, so level 1 by default; an archive that is kept for years can ask for 6
(or 9) with ``TRAWL_CRAWL__WARC_GZIP_LEVEL``. Any level reads the same."""


_RESPONSE = "application/http; msgtype=response"
_REQUEST = "application/http; msgtype=request"
_EMPTY_DIGEST = "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"
"""``payload_digest(b"")``: a request record's (empty) payload."""


def _b32_digest(digest: bytes) -> str:
    return "sha1:" + base64.b32encode(digest).decode("ascii")


def _record(
    warc_type: str,
    target: str,
    date: str,
    fields: list[tuple[str, str]],
    http_block: bytes,
    payload: bytes,
    content_type: str,
    record_id: str,
) -> bytes:
    """One WARC/1.1 record: headers, block, the closing blank lines.

    Written here rather than with warcio's record builder: the builder spent ~0.1 ms of
    Python a page (header objects, two digest passes, a stream per record), a sixth of
    a crawl worker's event loop on the crawl benchmark, and raised on a response header
    value that it could not percent-encode, which stopped the whole crawl's WARC output.
    warcio still reads every file (``read_responses``) and checks them in the tests.
    """
    block_digest = hashlib.sha1(http_block)
    block_digest.update(payload)
    head = [
        "WARC/1.1",
        f"WARC-Type: {warc_type}",
        f"WARC-Record-ID: {record_id}",
        f"WARC-Target-URI: {target}",
        f"WARC-Date: {date}",
    ]
    head.extend(f"{name}: {value}" for name, value in fields)
    head.append(f"WARC-Block-Digest: {_b32_digest(block_digest.digest())}")
    head.append(f"Content-Type: {content_type}")
    head.append(f"Content-Length: {len(http_block) + len(payload)}")
    head.append("\r\n")
    return b"".join(("\r\n".join(head).encode("utf-8"), http_block, payload, b"\r\n\r\n"))


def _header_block(status_line: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [status_line]
    lines.extend(name + b": " + value for name, value in headers)
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


def _encoded(text: str) -> bytes:
    """A header name or value given as text: ASCII as is, anything else as UTF-8."""
    return text.encode("ascii") if text.isascii() else text.encode("utf-8", "replace")


def _response_headers(result: FetchResult, dropped: frozenset[str], length: int) -> list[tuple[bytes, bytes]]:
    """The response's header lines as received (names in their case, values byte for byte),
    less ``dropped``; then the stored payload's ``Content-Length``."""
    if result.raw_headers:
        lines = [
            (name, value)
            for name, value in result.raw_headers
            if name.lower().decode("latin-1") not in dropped
        ]
    else:  # results built without the wire headers (tests, older callers)
        lines = [(_encoded(k), _encoded(v)) for k, v in result.headers.items() if k not in dropped]
    lines.append((b"Content-Length", str(length).encode("ascii")))
    return lines


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One response record of a crawl's WARC files, its body decoded."""

    url: str
    status: int
    headers: dict[str, str]
    """Names lower-cased; ``content-encoding`` dropped (the body is decoded)."""
    body: bytes
    fetched_at: float


@dataclass(frozen=True, slots=True)
class _Original:
    """What a revisit record names: the response that holds the payload."""

    sha1: bytes
    record: uuid.UUID
    seconds: int

    @property
    def digest(self) -> str:
        return _b32_digest(self.sha1)

    @property
    def record_id(self) -> str:
        return f"<urn:uuid:{self.record}>"

    @property
    def date(self) -> str:
        return _warc_date(self.seconds)


_PACKED = struct.Struct(">20s16sq")


class _Originals:
    """URL → the response record that holds its latest payload: what a revisit names.

    A worker holds one entry per URL its archive has, so entries are packed: a 16-byte
    key (BLAKE2b of the URL) and 44 bytes (the raw SHA-1, the record's UUID, the date's
    Unix seconds), ~170 bytes a URL against ~450 for three strings in a dataclass keyed by
    the URL (1.7 MB of a 5,000-page crawl worker's heap).
    """

    def __init__(self) -> None:
        self._packed: dict[bytes, bytes] = {}

    def __len__(self) -> int:
        return len(self._packed)

    @staticmethod
    def _key(url: str) -> bytes:
        return hashlib.blake2b(url.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def add(self, url: str, sha1: bytes, record: uuid.UUID, seconds: int) -> None:
        self._packed[self._key(url)] = _PACKED.pack(sha1, record.bytes, seconds)

    def add_read(self, url: str, digest: str, date: str, record_id: str) -> None:
        """A response record read back. One whose fields this writer would not have written
        as they are is left out, and forgets an earlier record of the URL: its next fetch
        stores a whole response instead of a revisit naming the wrong one."""
        try:
            original = _Original(
                base64.b32decode(digest.removeprefix("sha1:")),
                uuid.UUID(record_id.removeprefix("<urn:uuid:").removesuffix(">")),
                int(warc_time(date)),
            )
        except ValueError:  # binascii.Error is one
            original = None
        if original is None or (original.digest, original.record_id, original.date) != (
            digest,
            record_id,
            date,
        ):
            self._packed.pop(self._key(url), None)
            return
        self.add(url, original.sha1, original.record, original.seconds)

    def get(self, url: str) -> _Original | None:
        packed = self._packed.get(self._key(url))
        if packed is None:
            return None
        sha1, record, seconds = _PACKED.unpack(packed)
        return _Original(sha1, uuid.UUID(bytes=record), seconds)


def payload_digest(payload: bytes) -> str:
    """``sha1:BASE32`` as warcio (and Heritrix, and CDX files) write it."""
    return "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode("ascii")


class WarcSink:
    """Appends request/response record pairs to rolling ``*.warc.gz`` files in a folder."""

    def __init__(
        self,
        folder: Path,
        *,
        max_file_bytes: int = 1 << 30,
        prefix: str = "trawl",
        history: Path | None = None,
        gzip_level: int = GZIP_LEVEL,
    ) -> None:
        """``history``: the folder (searched recursively) whose earlier records revisits may name;
        ``gzip_level``: zlib's level for each record's gzip member (:data:`GZIP_LEVEL`)."""
        self._folder = folder
        self._history = history or folder
        self._originals: _Originals | None = None
        self._folder.mkdir(parents=True, exist_ok=True)
        self._max_file_bytes = max_file_bytes
        self._gzip_level = gzip_level
        self._prefix = prefix
        self._serial = 0
        self._file: io.BufferedWriter | None = None
        self._written = 0
        """Bytes written to ``_file``: what ``tell()`` says, without its ``lseek`` per exchange."""
        self.records = 0
        self.revisits = 0
        # Records are written on the caller's thread (the event loop): building them is
        # Python that holds the GIL either way, so a writer thread, or one for the zlib
        # step alone, measured slower (DECISIONS 33). ``flush`` may run on another thread
        # than the writes (the crawl's store thread) and must not flush a file that a
        # write is rotating away.
        self._file_lock = threading.Lock()
        self._error: BaseException | None = None
        """A failed write may leave a torn record: no record is appended after it."""

    def _open(self) -> io.BufferedWriter:
        if self._file is not None and self._written < self._max_file_bytes:
            return self._file
        self._close_file()
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        while True:  # a new file per writer: a second crawl in the same second and process must
            self._serial += 1  # not append to the first one's file
            path = self._folder / f"{self._prefix}-{stamp}-{os.getpid()}-{self._serial:05d}.warc.gz"
            try:
                self._file = open(path, "xb")
                self._written = 0
                break
            except FileExistsError:
                continue
        logger.info("Writing WARC records to %s", path)
        return self._file

    def write(self, result: FetchResult) -> None:
        """Write the records of one exchange (after a failed write, raise without writing)."""
        with self._file_lock:
            self._raise_if_failed()
            try:
                self._write_locked(result)
            except BaseException as exc:
                self._error = exc
                raise

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise OSError(f"Writing WARC records failed: {self._error}") from self._error

    def _write_locked(self, result: FetchResult) -> None:
        if self._originals is None:  # before this sink's own first file exists
            self._originals = _load_originals(self._history)
        out = self._open()
        target = result.final_url
        authority, _, path = target.partition("://")[2].partition("/")
        request_block = _header_block(
            f"GET /{path} HTTP/1.1".encode(),
            [(b"Host", _encoded(authority))]
            + [(_encoded(k), _encoded(v)) for k, v in result.request_headers.items() if k.lower() != "host"],
        )
        # Results built without the wire bytes (tests, older callers) store the decoded body.
        wire = bool(result.wire_body) or not result.body
        payload = result.wire_body if wire else result.body
        reason = result.reason_phrase or _reason(result.status).encode("ascii")
        response_block = _header_block(
            f"{result.http_version} {result.status} ".encode("ascii") + reason,
            _response_headers(result, _LENGTH_HEADERS if wire else _DECODED_HEADERS, len(payload)),
        )
        seconds = int(result.fetched_at or time.time())
        date = _warc_date(seconds)
        sha1 = hashlib.sha1(payload).digest()
        digest = _b32_digest(sha1)
        original = self._originals.get(target)
        fields = [("WARC-IP-Address", result.address)] if result.address else []
        record = uuid.uuid4()
        record_id = f"<urn:uuid:{record}>"
        if result.status == 304 or (original is not None and original.sha1 == sha1):
            profile = SERVER_NOT_MODIFIED if result.status == 304 else IDENTICAL_PAYLOAD
            fields.append(("WARC-Profile", profile))
            if original is not None:
                fields += [
                    ("WARC-Refers-To", original.record_id),
                    ("WARC-Refers-To-Target-URI", target),
                    ("WARC-Refers-To-Date", original.date),
                    ("WARC-Payload-Digest", original.digest),
                ]
            elif profile == IDENTICAL_PAYLOAD:
                fields.append(("WARC-Payload-Digest", digest))
            # A revisit keeps the HTTP headers only: the payload is the original's.
            response = _record("revisit", target, date, fields, response_block, b"", _RESPONSE, record_id)
            self.revisits += 1
        else:
            fields.append(("WARC-Payload-Digest", digest))
            response = _record(
                "response", target, date, fields, response_block, payload, _RESPONSE, record_id
            )
            self._originals.add(target, sha1, record, seconds)
        request = _record(
            "request",
            target,
            date,
            [("WARC-Concurrent-To", record_id), ("WARC-Payload-Digest", _EMPTY_DIGEST)],
            request_block,
            b"",
            _REQUEST,
            f"<urn:uuid:{uuid.uuid4()}>",
        )
        # One gzip member per record: a reader can seek to either.
        wbits = zlib.MAX_WBITS | 16
        self._written += out.write(zlib.compress(response, self._gzip_level, wbits=wbits))
        self._written += out.write(zlib.compress(request, self._gzip_level, wbits=wbits))
        self.records += 2

    def flush(self) -> None:
        """Push what was written to the OS (the crawl acknowledges URLs after this).

        Raises once any write failed, so the crawl stops acknowledging URLs."""
        with self._file_lock:
            self._raise_if_failed()
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._file_lock:
            self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None

    def __enter__(self) -> WarcSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _warc_files(folder: Path) -> list[Path]:
    """Every WARC file under ``folder`` (worker folders included), in writing order per folder."""
    return sorted(folder.rglob("*.warc.gz")) if folder.exists() else []


def _records(path: Path) -> Iterator[ArcWarcRecord]:
    """The records of one file; a torn last record (a crash mid-write) ends it with a warning.

    warcio is imported here, when there is a file to read: importing it (with the fsspec
    it pulls in) adds ~15 MB to a process, and a first crawl never reads a record."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    with path.open("rb") as stream:
        try:
            yield from ArchiveIterator(stream)
        except (ArchiveLoadFailed, EOFError, OSError) as exc:
            logger.warning("%s: stopped reading at a damaged record (%s)", path, exc)


def _load_originals(folder: Path) -> _Originals:
    """The latest response record per URL under ``folder``: what a revisit refers to."""
    originals = _Originals()
    for path in _warc_files(folder):
        for record in _records(path):
            if record.rec_type != "response":
                continue
            h = record.rec_headers
            url, digest = h.get_header("WARC-Target-URI"), h.get_header("WARC-Payload-Digest")
            if url and digest:
                originals.add_read(
                    url, digest, h.get_header("WARC-Date") or "", h.get_header("WARC-Record-ID") or ""
                )
    return originals


def read_responses(folder: Path, *, max_bytes: int) -> Iterator[StoredResponse]:
    """Every response record under ``folder`` (worker folders included), bodies decoded.

    Files are read by name, records in order. The payload is undone from its
    Content-Encoding with the crawl's page cap; a record that fails to decode, or
    decodes past the cap, is skipped with a warning (the crawl would not have kept it).
    """
    for path in _warc_files(folder):
        for record in _records(path):
            if record.rec_type != "response" or record.http_headers is None:
                continue
            url = record.rec_headers.get_header("WARC-Target-URI") or ""
            headers = {k.lower(): v for k, v in record.http_headers.headers}
            try:
                body = decoded_payload(record.raw_stream, headers.pop("content-encoding", ""), max_bytes)
            except (DecodingFailed, DecodedTooLarge) as exc:
                logger.warning("%s: skipped the stored response of %s (%s)", path, url, exc)
                continue
            headers.pop("content-length", None)
            status = int(record.http_headers.get_statuscode() or 0)
            yield StoredResponse(
                url, status, headers, body, warc_time(record.rec_headers.get_header("WARC-Date"))
            )


def decoded_payload(stream: BinaryIO, content_encoding: str, max_bytes: int) -> bytes:
    """A record's payload with its Content-Encoding undone, reading at most ``max_bytes`` raw."""
    decoder = BodyDecoder(content_encoding, max_bytes=max_bytes)
    out: list[bytes] = []
    read = 0
    while piece := stream.read(_READ_STEP):
        read += len(piece)
        if read > max_bytes:
            raise DecodedTooLarge(f"the stored payload passes the {max_bytes}-byte cap")
        out.append(decoder.feed(piece))
    out.append(decoder.finish())
    return b"".join(out)


def warc_time(value: str | None) -> float:
    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _warc_date(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
