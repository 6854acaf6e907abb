"""Documents of a crawl data directory, ready to index: the docstore plus inbound anchors.

The docstore (``DIR/docs``) is the only seam between the crawler and the index; the
link graph (``DIR/links``) gives each page the anchor texts of links pointing to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from core.docstore import DocStore
from core.errors import ConfigError
from core.linkgraph import LinkGraphStore, anchors_by_target
from core.types import Document

MAX_ANCHORS_PER_DOC = 200


def crawled_documents(data_dir: Path) -> Iterator[Document]:
    data_dir = Path(data_dir)
    if not (data_dir / "docs").exists():
        raise ConfigError(f"{data_dir} has no docstore (docs/); run `trawl crawl … --data {data_dir}` first.")
    store = DocStore(data_dir / "docs")
    anchors: dict[str, list[str]] = {}
    if (data_dir / "links").exists():
        anchors = anchors_by_target(LinkGraphStore(data_dir / "links").read_edges())
    for doc in store.iter_documents():
        inbound = anchors.get(doc.url)
        if inbound:
            doc = dataclasses.replace(doc, anchors=tuple(inbound[:MAX_ANCHORS_PER_DOC]))
        yield doc
