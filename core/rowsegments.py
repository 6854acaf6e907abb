"""Row segments: gzip-compressed JSON lines, the segment format a crawl worker writes.

Why a second format beside Parquet: writing Parquet needs a columnar library, and
Polars costs a crawl worker ~45 MB of resident memory (its import, then the code pages
and buffers of its first ``write_parquet``) for a job that only appends a few hundred
rows at a time. JSON lines need nothing beyond the standard library to write, and every
reader (index building, PageRank, the dataset job) already holds Polars, which reads
them with the same column types as the Parquet segments (``read_segment``). The docstore
and the link graph read both formats side by side, by file name, so crawls written
before this format, and segments written by batch jobs in Parquet, stay readable.

Strings with lone surrogates (nothing the parser produces, but a ``Document`` can hold
them) are written with the surrogate replaced by ``?``: JSON text must be UTF-8.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.atomic import write_bytes
from core.errors import DamagedFile

if TYPE_CHECKING:
    import polars as pl

__all__ = ["ROW_SUFFIX", "SEGMENT_SUFFIX", "is_row_segment", "iter_lines", "read_segment", "write_rows"]

ROW_SUFFIX = ".ndjson.gz"
SEGMENT_SUFFIX = r"\.(?:parquet|ndjson\.gz)$"
"""The end of a segment file's name in either format, as a regular expression."""
_LEVEL = 1
"""zlib level 1, as for WARC records (``crawl.run.warc.GZIP_LEVEL``: on the Python docs 0.43
against 1.0 ms a page for level 6, 26% more bytes): a worker compresses every page it
stores."""


_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"))


def is_row_segment(name: str) -> bool:
    return name.endswith(ROW_SUFFIX)


def write_rows(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write the rows as one gzip-compressed JSON-lines file (atomically)."""
    lines = [_ENCODER.encode(row) for row in rows]
    text = "\n".join(lines) + "\n" if lines else ""
    write_bytes(path, gzip.compress(text.encode("utf-8", "replace"), compresslevel=_LEVEL, mtime=0))


def iter_lines(path: Path) -> Iterator[str]:
    """The file's rows as JSON text, one per row: for a reader without Polars (a crawl
    worker re-reading a few of its documents) that can skip most rows before decoding."""
    try:
        text = _decompress(path).decode("utf-8")
    except (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as exc:
        raise DamagedFile(path, _what_failed(exc)) from exc
    for line in text.split("\n"):
        if line:
            yield line


def read_segment(path: Path, schema: Mapping[str, Any], columns: Sequence[str] | None = None) -> pl.DataFrame:
    """A segment in either format, by its name, as a frame with ``schema``'s column types
    (only ``columns`` when given). A file that cannot be read raises ``DamagedFile`` naming it:
    the libraries' own errors (a bare ``EOFError`` for a truncated gzip) do not."""
    import polars as pl

    try:
        return _read_segment(path, schema, columns)
    except (
        EOFError,
        gzip.BadGzipFile,
        zlib.error,
        UnicodeDecodeError,
        pl.exceptions.PolarsError,
        pl.exceptions.PanicException,  # a Rust panic on some garbled Parquet: a BaseException
    ) as exc:
        raise DamagedFile(path, _what_failed(exc)) from exc


def _what_failed(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "truncated (the compressed data ends early)"
    lines = str(exc).strip().splitlines()
    kind = "zlib" if isinstance(exc, zlib.error) else type(exc).__name__
    return f"garbled ({kind}: {lines[0] if lines else 'unreadable'})"


def _read_segment(path: Path, schema: Mapping[str, Any], columns: Sequence[str] | None) -> pl.DataFrame:
    import polars as pl

    if not is_row_segment(Path(path).name):
        frame = pl.read_parquet(path, columns=list(columns) if columns is not None else None)
        return frame.cast({name: schema[name] for name in frame.columns})
    wanted = dict(schema) if columns is None else {name: schema[name] for name in columns}
    data = _decompress(path)
    if not data.strip():
        return pl.DataFrame(schema=wanted)
    # A schema of only the wanted columns skips building the others (the bodies): reading
    # two columns of a crawl's segments parses in 0.4× the time of all of them.
    return pl.read_ndjson(data, schema=wanted)


def _decompress(path: Path) -> bytes:
    """The file's bytes, un-gzipped: every member (``zlib.decompress`` alone would stop after
    the first without a word, and a file of concatenated members is still gzip)."""
    return gzip.decompress(Path(path).read_bytes())
