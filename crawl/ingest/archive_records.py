"""The records of any WARC or ARC file, each with its offset, a damaged record skipped.

warcio stops at the first record it cannot read; an archive from elsewhere (a truncated
download, a crawler that wrote a wrong length, a block that is not HTTP) must still give
every readable record after the damage. After a failure the reader resynchronises at the
next record start (a gzip member header, or a ``WARC/1.`` line in a plain file) and goes
on. A damage counts once per damaged stretch, with the offset where it starts.

Block digests are checked while a record is read (warcio's ``check_digests``): a record
whose stored bytes differ from what its writer hashed is damaged, whatever its framing says.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from warcio.recordloader import ArcWarcRecord

logger = logging.getLogger(__name__)

__all__ = [
    "ARCHIVE_SUFFIXES",
    "Damage",
    "NotHttpPayload",
    "archive_files",
    "http_status",
    "read_records",
    "record_at",
]

ARCHIVE_SUFFIXES = (".warc", ".warc.gz", ".arc.gz", ".arc")
_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_LINE = b"\nWARC/1."
_SCAN_STEP = 1 << 20

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Damage:
    """A stretch of an archive that could not be read: where it starts and why."""

    path: Path
    offset: int
    what: str

    def __str__(self) -> str:
        return f"{self.path} at offset {self.offset}: {self.what}"


def archive_files(paths: list[str]) -> list[Path]:
    """Files, folders (searched for archives) and globs, as sorted archive files.

    Raises ``FileNotFoundError`` naming a path that matches nothing."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if any(c in given for c in "*?["):
            matches = sorted(Path(p) for p in _glob(given))
        elif path.is_dir():
            matches = sorted(p for p in path.rglob("*") if p.is_file() and _is_archive_name(p))
        else:
            matches = [path] if path.is_file() else []
        if not matches:
            raise FileNotFoundError(f"{given}: no WARC or ARC file there")
        found.extend(matches)
    return list(dict.fromkeys(found))


def _glob(pattern: str) -> list[str]:
    import glob

    return [p for p in glob.glob(pattern, recursive=True) if Path(p).is_file()]


def _is_archive_name(path: Path) -> bool:
    return path.name.endswith(ARCHIVE_SUFFIXES)


def _damage_errors() -> tuple[type[BaseException], ...]:
    from warcio.exceptions import ArchiveLoadFailed
    from warcio.statusandheaders import StatusAndHeadersParserException

    return (
        ArchiveLoadFailed,
        StatusAndHeadersParserException,
        EOFError,
        OSError,
        zlib.error,
        ValueError,  # a length or status that is not a number; UnicodeDecodeError is one
        IndexError,  # a header line warcio cannot split
    )


def read_records(
    path: Path,
    handle: Callable[[int, ArcWarcRecord], T],
    on_damage: Callable[[Damage], None],
    *,
    check_digests: bool = True,
) -> Iterator[T]:
    """``handle(offset, record)`` for every readable record of ``path``, in file order.

    ``handle`` reads what it needs of the record (its payload stream is bounded by the
    record); an error while it reads counts as the record's damage, and what it returned
    is dropped, as for a record whose block digest fails. ``check_digests=False`` is for a
    pass that a checking pass follows (hashing every block costs as much as reading it).
    """
    from warcio.archiveiterator import ArchiveIterator

    errors = _damage_errors()
    # Garbage after a damage can parse as an ARC header line: a .warc file reads as WARC only.
    known_format = "arc" if path.name.endswith((".arc", ".arc.gz")) else "warc"
    with path.open("rb") as stream:
        gzipped = stream.read(3) == _GZIP_MAGIC
        start: int | None = 0
        in_damage = False  # a record that cannot even start right after a resync: same stretch
        while start is not None:
            stream.seek(start)
            records = ArchiveIterator(stream, arc2warc=True, check_digests=check_digests)
            records.known_format = known_format
            offset, started = start, False
            try:
                for record in records:
                    started = True
                    result = handle(offset, record)
                    records.read_to_end()
                    failed = [p for p in record.digest_checker.problems if p.startswith("block digest")]
                    if failed:
                        raise DamagedBlock(failed[0])
                    in_damage, started = False, False
                    offset = records.offset
                    yield result
                start = None
                if _bytes_left(stream, offset):
                    raise EOFError("the file ends inside a record")
            except errors as exc:
                if started or not in_damage:
                    damage = Damage(path, offset, _describe(exc))
                    logger.warning("skipped a damaged record: %s", damage)
                    on_damage(damage)
                in_damage = True
                start = _next_start(stream, offset + 1, gzipped)
            finally:
                records.close()


class NotHttpPayload(ValueError):
    """A record that says it holds an HTTP message and does not."""


def http_status(record: ArcWarcRecord) -> int | None:
    """The HTTP status of a response or revisit record; None for a record that holds no HTTP
    message (a ``dns:`` or ``resource`` record). Raises ``NotHttpPayload`` when the record
    declares one and its block does not start with an HTTP status line."""
    headers = record.http_headers
    if headers is None:
        if record.rec_type == "response" and "application/http" in (record.content_type or ""):
            raise NotHttpPayload("the block declared as HTTP has no HTTP header")
        return None
    if not (headers.protocol or "").upper().startswith("HTTP/"):
        raise NotHttpPayload(f"the block declared as HTTP starts {ascii(headers.statusline[:60])}")
    return int(headers.get_statuscode() or 0)


class DamagedBlock(ValueError):
    """A record's stored block does not match its ``WARC-Block-Digest``."""


def record_at(path: Path, offset: int, handle: Callable[[ArcWarcRecord], T]) -> T | None:
    """``handle`` of the record that starts at ``offset`` (a revisit's original); None when
    it cannot be read there."""
    from warcio.archiveiterator import ArchiveIterator

    with path.open("rb") as stream:
        stream.seek(offset)
        try:
            records = ArchiveIterator(stream, arc2warc=True)
            records.known_format = "arc" if path.name.endswith((".arc", ".arc.gz")) else "warc"
            for record in records:
                return handle(record)
        except _damage_errors() as exc:
            logger.warning("could not read the record at %s offset %d again: %s", path, offset, exc)
    return None


def _bytes_left(stream: IO[bytes], offset: int) -> bool:
    """True when more than blank lines follow ``offset``: a record the reader could not start."""
    stream.seek(offset)
    return bool(stream.read(_SCAN_STEP).strip())


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, EOFError):
        return f"truncated ({first})" if first else "truncated (the data ends early)"
    return f"{type(exc).__name__}: {ascii(first[:120])}" if first else type(exc).__name__


def _next_start(stream: IO[bytes], after: int, gzipped: bool) -> int | None:
    """The offset of the next plausible record start at or after ``after``, or None at the end."""
    magic = _GZIP_MAGIC if gzipped else _WARC_LINE
    skip = 0 if gzipped else 1  # a WARC line starts after its newline
    stream.seek(after)
    position, carry = after, b""
    while chunk := stream.read(_SCAN_STEP):
        window = carry + chunk
        found = window.find(magic)
        if found >= 0:
            return position - len(carry) + found + skip
        carry = window[-(len(magic) - 1) :]
        position += len(chunk)
    return None
