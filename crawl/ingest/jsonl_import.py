"""JSON Lines documents (one object a line) into a crawl data directory.

For a corpus that is not web pages: each line is checked (``crawl.ingest.json_documents``)
and the first bad one stops the import with its line number, before anything replaces the
directory's documents. Lines are read one at a time, so memory does not grow with the file.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.atomic import staging_dir, temp_sibling
from core.docstore import DocStore
from core.types import Document
from crawl.ingest.json_documents import BadDocument, document_from_json
from crawl.ingest.target import ImportSummary, import_target

__all__ = ["import_jsonl"]

_BATCH = 1000


def import_jsonl(paths: list[Path], data_dir: Path) -> ImportSummary:
    """Replace ``data_dir``'s documents with those of ``paths``; raises ``BadDocument`` naming
    the first line that is not a document (the directory is then left as it was)."""
    started = time.perf_counter()
    summary = ImportSummary(files=len(paths))
    with import_target(data_dir) as layout:
        metadata_tmp = temp_sibling(layout.metadata)
        try:
            with (
                staging_dir(layout.docs) as docs_dir,
                gzip.open(metadata_tmp, "wt", encoding="utf-8") as meta,
            ):
                docs = DocStore(docs_dir)
                batch: list[Document] = []
                kept = 0
                for path in paths:
                    for document, metadata in _read(path, summary):
                        batch.append(document)
                        if metadata:
                            meta.write(json.dumps({"id": document.external_id, **metadata}) + "\n")
                            kept += 1
                        if len(batch) >= _BATCH:
                            docs.append(batch)
                            batch = []
                if batch:
                    docs.append(batch)
                summary.documents = len(docs)
            if kept:
                os.replace(metadata_tmp, layout.metadata)
            else:
                layout.metadata.unlink(missing_ok=True)
        finally:
            metadata_tmp.unlink(missing_ok=True)
        # An earlier WARC import's link graph names pages that are no longer here.
        shutil.rmtree(layout.links, ignore_errors=True)
        summary.seconds = time.perf_counter() - started
        summary.record(layout)
    return summary


def _read(path: Path, summary: ImportSummary) -> Iterator[tuple[Document, dict[str, Any]]]:
    fetched_at = time.time()
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise BadDocument(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    with stream:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            where = f"{path} line {number}"
            summary.records += 1
            try:
                value = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise BadDocument(f"{where}: not a JSON object ({exc})") from exc
            checked = document_from_json(value, where=where, fetched_at=fetched_at)
            summary.count("indexed")
            yield checked.document, checked.metadata
