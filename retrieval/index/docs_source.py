"""Documents of a crawl data directory, ready to index: the docstore plus inbound anchors.

The docstore (``DIR/docs``) is the only seam between the crawler and the index; the
link graph (``DIR/links``) gives each page the anchor texts of links pointing to it.
Titles lose their host's site-name suffix (``retrieval.text.titles``) on the way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from core.crawldir import CrawlDir
from core.deletions import DeletionLog, is_removed
from core.docstore import DocStore
from core.errors import ConfigError
from core.linkgraph import LinkGraphStore, anchors_by_target
from core.types import Document
from retrieval.text.titles import site_suffix, without_suffix

MAX_ANCHORS_PER_DOC = 200


def crawled_documents(data_dir: Path) -> Iterator[Document]:
    data_dir = Path(data_dir)
    layout = CrawlDir(data_dir)
    if not layout.docs.exists():
        raise ConfigError(f"{data_dir} has no docstore (docs/); run `trawl crawl … --data {data_dir}` first.")
    store = DocStore(layout.docs)
    anchors: dict[str, list[str]] = {}
    pagerank = page_ranks(data_dir)
    if layout.links.exists():
        anchors = anchors_by_target(LinkGraphStore(layout.links).read_edges())
    suffixes = title_suffixes_by_host(store)
    removed = DeletionLog(layout.deletions).latest()
    for doc in store.iter_documents():
        if is_removed(doc, removed.get(doc.doc_id)):
            continue  # gone, noindex, disallowed, canonicalised or blocked since (core.deletions)
        updates: dict[str, object] = {}
        suffix = suffixes.get(doc.host, "")
        if suffix and doc.title.endswith(suffix):
            updates["title"] = without_suffix(doc.title, suffix)
        inbound = anchors.get(doc.url)
        if inbound:
            updates["anchors"] = tuple(inbound[:MAX_ANCHORS_PER_DOC])
        if doc.url in pagerank:
            updates["pagerank"] = pagerank[doc.url]
        yield dataclasses.replace(doc, **updates) if updates else doc  # type: ignore[arg-type]


def title_suffixes_by_host(store: DocStore) -> dict[str, str]:
    """The site-name title suffix of each host that has one (one pass over two columns)."""
    frame = store.latest_frame(["host", "title"])
    titles: dict[str, list[str]] = {}
    for host, title in zip(frame["host"].to_list(), frame["title"].to_list(), strict=True):
        titles.setdefault(host or "", []).append(title or "")
    found = {host: site_suffix(group) for host, group in titles.items()}
    return {host: suffix for host, suffix in found.items() if suffix}


def page_ranks(data_dir: Path) -> dict[str, float]:
    """PageRank per URL (scaled to mean 1), as written by the link-graph job.

    The job (``training.pagerank``, run by ``trawl index --data`` and the demo before
    building) writes ``CrawlDir.pagerank``; index build only reads it.
    """
    path = CrawlDir(data_dir).pagerank
    if not path.exists():
        return {}
    frame = pl.read_parquet(path, columns=["url", "pagerank_scaled"])
    return dict(zip(frame["url"].to_list(), frame["pagerank_scaled"].to_list(), strict=True))
