"""The docstore: parsed documents as append-only segments (Parquet or gzip JSON lines) with a manifest.

The seam between the crawler (the only writer) and index building (a reader): neither
imports the other. Segments are immutable, so a reader can tail the manifest. ``append``
writes a segment to a temporary file, renames it into place, then replaces
``segments.json`` the same way: a reader sees the old manifest or the new one, never a
half-written segment. A crawl worker writes row segments (``core.rowsegments``, gzip JSON
lines), so it never loads Polars; batch jobs write Parquet; readers take both by name.

A document appended again (a recrawl that changed, a duplicate cluster that grew)
supersedes the earlier version: ``iter_documents()`` yields the latest version of each
``doc_id``, latest meaning fetched last (``fetched_at``; append order breaks ties). With
several crawl workers, a page's versions can lie in two workers' folders, and the order
folders are read in says nothing about which is newer.
"""

from __future__ import annotations

import fcntl
import json
import logging
import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from functools import cache
from json.decoder import scanstring  # type: ignore[attr-defined]  # the C string decoder, not in the stubs
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.atomic import write_text, write_with
from core.errors import DamagedFile
from core.rowsegments import ROW_SUFFIX, SEGMENT_SUFFIX, is_row_segment, iter_lines, read_segment, write_rows
from core.types import DocId, Document, Section

if TYPE_CHECKING:
    import polars as pl

logger = logging.getLogger(__name__)

__all__ = ["DocStore", "document_schema"]

MANIFEST = "segments.json"
_SEGMENT = re.compile(r"^seg-(\d{6,})" + SEGMENT_SUFFIX)
_FORMAT = 1
_APPEND_LOCK = ".append.lock"
"""Beside a folder's segments: held while a segment and its manifest entry are written."""

_FIELD_NAMES = tuple(f.name for f in fields(Document))
assert _FIELD_NAMES[:2] == ("doc_id", "url"), "_matching_rows reads the URL second"
_URL_MEMBER = ',"url":"'
"""How the second member of a row segment's row starts (``core.rowsegments`` writes compact JSON)."""
_TUPLE_FIELDS = frozenset({"headings", "anchors", "outlinks", "alternates"})
"""List columns; a segment written before one existed (``alternates``) reads as empty."""
_SECTION_FIELDS = tuple(f.name for f in fields(Section))
"""``sections`` is a list of structs (one object per section in a row segment); a segment
written before it existed reads as none."""


@cache
def document_schema() -> pl.Schema:
    """Parquet column types (polars names), built on first use: a crawl worker writes row
    segments and never imports Polars. Written with polars, not pyarrow: readers then load
    one columnar library instead of two (~60 MB less resident memory)."""
    import polars as pl

    schema = pl.Schema(
        {
            "doc_id": pl.Int64(),
            "url": pl.String(),
            "title": pl.String(),
            "body": pl.String(),
            "headings": pl.List(pl.String()),
            "anchors": pl.List(pl.String()),
            "host": pl.String(),
            "lang": pl.String(),
            "filetype": pl.String(),
            "description": pl.String(),
            "external_id": pl.String(),
            "published_at": pl.Float64(),
            "fetched_at": pl.Float64(),
            "content_hash": pl.String(),
            "simhash": pl.UInt64(),
            "pagerank": pl.Float64(),
            "dup_cluster_size": pl.Int32(),
            "outlinks": pl.List(pl.String()),
            "alternates": pl.List(pl.String()),
            "link_words": pl.Int32(),
            "sections": pl.List(
                pl.Struct(
                    {"heading": pl.String(), "anchor": pl.String(), "start": pl.Int64(), "end": pl.Int64()}
                )
            ),
        }
    )
    assert set(_FIELD_NAMES) == set(schema), "Document and document_schema() disagree"
    return schema


class DocStore:
    """Append-only segments of ``Document`` records under ``root`` (Parquet, or row segments).

    With ``worker``, this store writes its segments and manifest in ``root/<worker>/``,
    so crawl workers sharing one directory never write the same file; reading always
    covers ``root``'s own segments and then every worker folder's (by folder name), and
    a worker's segments are named ``<worker>/seg-NNNNNN.parquet``. With ``row_segments``
    (what a crawl worker asks for), segments are written as ``seg-NNNNNN.ndjson.gz``
    instead (module doc); numbering is shared by both formats.
    """

    def __init__(self, root: Path, *, worker: str | None = None, row_segments: bool = False) -> None:
        self.root = Path(root)
        self.worker = worker
        self._write_root = self.root / worker if worker else self.root
        self._suffix = ROW_SUFFIX if row_segments else ".parquet"

    def _manifest_path(self) -> Path:
        return self._write_root / MANIFEST

    def segments(self) -> list[str]:
        """Segment names (relative to ``root``) in append order: the root's, then each worker's."""
        names = [entry["name"] for entry in _entries(self.root / MANIFEST)]
        if self.root.is_dir():
            for child in sorted(self.root.iterdir()):
                if child.is_dir() and (child / MANIFEST).exists():
                    names.extend(f"{child.name}/{entry['name']}" for entry in _entries(child / MANIFEST))
        return names

    def _manifest_entries(self) -> list[dict[str, Any]]:
        return _entries(self._manifest_path())

    def _next_segment_name(self) -> str:
        numbers = [0]
        if self._write_root.exists():
            for child in self._write_root.iterdir():
                match = _SEGMENT.match(child.name)
                if match:
                    numbers.append(int(match.group(1)))
        return f"seg-{max(numbers) + 1:06d}{self._suffix}"

    def append(self, docs: Iterable[Document]) -> str:
        """Write the documents as one new segment; returns its name (``""`` if none given)."""
        rows = [_row(doc) for doc in docs]
        count = len(rows)
        if count == 0:
            return ""
        self._write_root.mkdir(parents=True, exist_ok=True)
        with self._appending():
            name = self._next_segment_name()
            if is_row_segment(name):
                write_rows(self._write_root / name, rows)
            else:
                _write_parquet(self._write_root / name, rows)
            entries = self._manifest_entries()
            entries.append({"name": name, "rows": count})
            manifest = {"format": _FORMAT, "segments": entries}
            write_text(self._manifest_path(), json.dumps(manifest, indent=1))
        logger.info("Docstore segment %s written (%d documents)", name, count)
        return f"{self.worker}/{name}" if self.worker else name

    @contextmanager
    def _appending(self) -> Iterator[None]:
        """Hold this folder's append lock (an ``flock``, released if the process dies).

        A folder usually has one writer (a crawl worker), but the operator's removal folder
        has two (``trawl block`` and the API): choosing the next segment number and
        rewriting the manifest must not interleave, or one writer's segment or manifest
        entry replaces the other's."""
        with open(self._write_root / _APPEND_LOCK, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self, segment: str, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """A segment's rows (only ``columns`` when given), in either format, typed alike."""
        return read_segment(self.root / segment, document_schema(), columns)

    def _latest_positions(self, segments: Sequence[str] | None = None) -> dict[int, tuple[int, int]]:
        """doc_id → (segment index in ``segments``, row) of its latest version (module doc)."""
        latest: dict[int, tuple[int, int]] = {}
        fetched: dict[int, float] = {}
        for index, segment in enumerate(self.segments() if segments is None else segments):
            frame = self._read(segment, ["doc_id", "fetched_at"])
            for row, (doc_id, at) in enumerate(frame.iter_rows()):
                at = at or 0.0
                if at >= fetched.get(doc_id, at):
                    latest[doc_id] = (index, row)
                    fetched[doc_id] = at
        return latest

    def iter_documents(self, segment: str | None = None) -> Iterator[Document]:
        """Documents of one segment (all its rows), or the latest version of every
        document across all segments, in append order, when ``segment`` is None."""
        if segment is not None:
            yield from _rows_to_documents(self._read(segment))
            return
        # One listing for both passes: a segment the crawl appends meanwhile (a running
        # `trawl run` does) would shift positions or hold ids the first pass never saw.
        segments = self.segments()
        latest = self._latest_positions(segments)
        for index, name in enumerate(segments):
            frame = self._read(name)
            ids = frame["doc_id"].to_list()
            keep = [row for row, doc_id in enumerate(ids) if latest[doc_id] == (index, row)]
            if keep:
                yield from _rows_to_documents(frame[keep])

    def documents_by_url(self, urls: Collection[str]) -> dict[str, Document]:
        """The latest version of the documents with these URLs (reads only matching rows)."""
        wanted = set(urls)
        found: dict[str, Document] = {}
        for name in self.segments():
            if is_row_segment(name):
                docs = _matching_rows(self.root / name, wanted)
            else:
                urls_in_segment = self._read(name, ["url"])["url"].to_list()
                rows = [row for row, url in enumerate(urls_in_segment) if url in wanted]
                docs = _rows_to_documents(self._read(name)[rows]) if rows else iter(())
            for doc in docs:
                held = found.get(doc.url)
                if held is None or (doc.fetched_at or 0.0) >= (held.fetched_at or 0.0):
                    found[doc.url] = doc
        return found

    def latest_frame(self, columns: Sequence[str]) -> pl.DataFrame:
        """Some columns of the latest version of every document (cheap: no bodies read)."""
        import polars as pl

        wanted = list(dict.fromkeys(["doc_id", *columns]))
        read = list(dict.fromkeys([*wanted, "fetched_at"]))
        frames = [self._read(name, read) for name in self.segments()]
        if not frames:
            return pl.DataFrame(schema={c: document_schema()[c] for c in wanted})
        latest = (
            pl.concat(frames)
            .with_row_index("_order")
            .sort([pl.col("fetched_at").fill_null(0.0), "_order"])
            .unique(subset="doc_id", keep="last")
            .sort("_order")
        )
        return latest.select(wanted)

    def __len__(self) -> int:
        """Number of distinct documents (latest versions)."""
        return len(self._latest_positions())


def _row(doc: Document) -> dict[str, Any]:
    row = {name: getattr(doc, name) for name in _FIELD_NAMES}
    row["sections"] = [{name: getattr(s, name) for name in _SECTION_FIELDS} for s in doc.sections]
    return row


def _entries(manifest: Path) -> list[dict[str, Any]]:
    if not manifest.exists():
        return []
    try:
        entries: list[dict[str, Any]] = json.loads(manifest.read_text())["segments"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DamagedFile(manifest, f"not a list of segments ({type(exc).__name__}: {exc})") from exc
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "name" in e for e in entries):
        raise DamagedFile(manifest, "not a list of segments")
    return entries


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    import polars as pl

    columns = {
        name: [list(r[name]) if name in _TUPLE_FIELDS else r[name] for r in rows] for name in _FIELD_NAMES
    }
    frame = pl.DataFrame(columns, schema=document_schema())
    write_with(path, lambda tmp: frame.write_parquet(tmp, compression="zstd"))


def _matching_rows(path: Path, urls: set[str]) -> Iterator[Document]:
    """The documents of a row segment whose URL is in ``urls``, without Polars (a crawl
    worker calls this at the end of a run). Only a matching row is decoded whole: the
    writer puts ``url`` right after ``doc_id`` (``_FIELD_NAMES`` order), so each row's URL
    is read from its first characters; a row not written that way is decoded to find it."""
    for line in iter_lines(path):
        start = line.find(_URL_MEMBER, 0, 40)
        if start < 0:
            record = json.loads(line)
            if record["url"] in urls:
                yield _record_to_document(record)
        elif scanstring(line, start + len(_URL_MEMBER))[0] in urls:
            yield _record_to_document(json.loads(line))


def _record_to_document(record: dict[str, Any]) -> Document:
    for name in _TUPLE_FIELDS:
        record[name] = tuple(record.get(name) or ())
    record["sections"] = tuple(Section(**s) for s in record.get("sections") or ())
    record["doc_id"] = DocId(record["doc_id"])
    record["link_words"] = int(record.get("link_words") or 0)  # none in segments written before it
    return Document(**record)


def _rows_to_documents(frame: pl.DataFrame) -> Iterator[Document]:
    for record in frame.iter_rows(named=True):
        yield _record_to_document(record)
