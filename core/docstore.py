"""The docstore: parsed documents as append-only Parquet segments with a manifest.

This is the seam between the crawler (the only writer) and index building (a
reader): neither imports the other. Segments are immutable, so a reader can tail the
manifest for incremental indexing. ``append`` writes a segment to a temporary file,
renames it into place, then replaces ``segments.json`` the same way, so a reader sees
either the old manifest or the new one, never a half-written segment. A segment file
that a crash left out of the manifest is ignored (its name is never reused).

A document appended again (a recrawl that changed, a duplicate cluster that grew)
supersedes the earlier version: ``iter_documents()`` yields only the latest version of
each ``doc_id``. Latest means fetched last (``fetched_at``; append order breaks ties and
orders versions without one): with several crawl workers, each writing its own folder, a
page recrawled by another worker than the one that first fetched it has versions in two
folders, and the order folders are read in says nothing about which is newer.

Example::

    store = DocStore(Path("data/docs"))
    store.append([Document(doc_id_for(url), url, "Title", "Body")])
    for doc in store.iter_documents():
        ...
"""

from __future__ import annotations

import fcntl
import json
import logging
import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import polars as pl

from core.atomic import write_text, write_with
from core.types import DocId, Document

logger = logging.getLogger(__name__)

__all__ = ["DOCUMENT_SCHEMA", "DocStore"]

MANIFEST = "segments.json"
_SEGMENT = re.compile(r"^seg-(\d{6,})\.parquet$")
_FORMAT = 1
_APPEND_LOCK = ".append.lock"
"""Beside a folder's segments: held while a segment and its manifest entry are written."""

DOCUMENT_SCHEMA = pl.Schema(
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
    }
)
"""Parquet column types (polars names). Written with polars, not pyarrow: the crawler
then loads one columnar library instead of two (~60 MB less resident memory)."""
_FIELD_NAMES = tuple(f.name for f in fields(Document))
_TUPLE_FIELDS = frozenset({"headings", "anchors", "outlinks"})
assert set(_FIELD_NAMES) == set(DOCUMENT_SCHEMA), "Document and DOCUMENT_SCHEMA disagree"


class DocStore:
    """Append-only Parquet segments of ``Document`` records under ``root``.

    With ``worker``, this store writes its segments and manifest in ``root/<worker>/``,
    so crawl workers sharing one directory never write the same file; reading always
    covers ``root``'s own segments and then every worker folder's (by folder name), and
    a worker's segments are named ``<worker>/seg-NNNNNN.parquet``.
    """

    def __init__(self, root: Path, *, worker: str | None = None) -> None:
        self.root = Path(root)
        self.worker = worker
        self._write_root = self.root / worker if worker else self.root

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
        return f"seg-{max(numbers) + 1:06d}.parquet"

    def append(self, docs: Iterable[Document]) -> str:
        """Write the documents as one new segment; returns its name (``""`` if none given)."""
        columns: dict[str, list[Any]] = {name: [] for name in _FIELD_NAMES}
        count = 0
        for doc in docs:
            for name in _FIELD_NAMES:
                value = getattr(doc, name)
                columns[name].append(list(value) if name in _TUPLE_FIELDS else value)
            count += 1
        if count == 0:
            return ""
        self._write_root.mkdir(parents=True, exist_ok=True)
        frame = pl.DataFrame(columns, schema=DOCUMENT_SCHEMA)
        with self._appending():
            name = self._next_segment_name()
            write_with(self._write_root / name, lambda tmp: frame.write_parquet(tmp, compression="zstd"))
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

    def _read(self, segment: str) -> pl.DataFrame:
        return pl.read_parquet(self.root / segment).cast(DOCUMENT_SCHEMA)

    def _latest_positions(self, segments: Sequence[str] | None = None) -> dict[int, tuple[int, int]]:
        """doc_id → (segment index in ``segments``, row) of its latest version (module doc)."""
        latest: dict[int, tuple[int, int]] = {}
        fetched: dict[int, float] = {}
        for index, segment in enumerate(self.segments() if segments is None else segments):
            frame = pl.read_parquet(self.root / segment, columns=["doc_id", "fetched_at"])
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
            urls_in_segment = pl.read_parquet(self.root / name, columns=["url"])["url"].to_list()
            rows = [row for row, url in enumerate(urls_in_segment) if url in wanted]
            if rows:
                for doc in _rows_to_documents(self._read(name)[rows]):
                    held = found.get(doc.url)
                    if held is None or (doc.fetched_at or 0.0) >= (held.fetched_at or 0.0):
                        found[doc.url] = doc
        return found

    def latest_frame(self, columns: Sequence[str]) -> pl.DataFrame:
        """Some columns of the latest version of every document (cheap: no bodies read)."""
        wanted = list(dict.fromkeys(["doc_id", *columns]))
        read = list(dict.fromkeys([*wanted, "fetched_at"]))
        frames = [pl.read_parquet(self.root / name, columns=read) for name in self.segments()]
        if not frames:
            return pl.DataFrame(schema={c: DOCUMENT_SCHEMA[c] for c in wanted})
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


def _entries(manifest: Path) -> list[dict[str, Any]]:
    if not manifest.exists():
        return []
    entries: list[dict[str, Any]] = json.loads(manifest.read_text())["segments"]
    return entries


def _rows_to_documents(frame: pl.DataFrame) -> Iterator[Document]:
    for record in frame.iter_rows(named=True):
        for name in _TUPLE_FIELDS:
            record[name] = tuple(record[name] or ())
        record["doc_id"] = DocId(record["doc_id"])
        yield Document(**record)
