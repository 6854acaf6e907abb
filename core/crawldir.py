"""The layout of a crawl's data directory: the one module that names every path in it.

Why here, in ``core``: the crawler writes this directory, and ``retrieval`` (index
build reads documents, anchors and PageRank), ``training`` (link-graph jobs write
PageRank) and ``api`` (admin, inspect, host pages read the crawl database) read it.
``crawl`` is not importable from ``retrieval`` or ``training`` (the docstore is the
seam), so the layout lives below all of them. No other module spells these names; the
tree is drawn on :class:`CrawlDir`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from core.dirlock import DirLock
from core.errors import ConfigError

__all__ = ["CrawlDir", "worker_folder"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def worker_folder(worker_id: str) -> str:
    """The folder name of a fleet worker's segments under ``docs/``, ``links/`` and ``warc/``."""
    name = _UNSAFE.sub("_", worker_id).strip("._") or "worker"
    return f"w-{name}"


@dataclass(frozen=True, slots=True)
class CrawlDir:
    """Paths inside one crawl's data directory (nothing is created by naming them).

    The layout::

        DIR/
          frontier.sqlite     crawl database: URLs, hosts, robots, queued seeds (SQLite, WAL)
          docs/               parsed documents, Parquet segments (core.docstore)
            <worker>/         one fleet worker's segments (a crawl on a shared frontier)
          links/              link-graph edges, Parquet segments (core.linkgraph)
            <worker>/         one fleet worker's edge files
          warc/               raw responses, WARC files (crawl.run.warc)
            <worker>/         one fleet worker's WARC files
          pagerank.parquet    PageRank per canonical URL (written by training.pagerank)
          pagerank-hosts.parquet  PageRank per host (written by training.pagerank)
          deletions/          removal tombstones, docstore-format segments (core.deletions)
            <worker>/         one fleet worker's (or the operator's) tombstones
          blocklist.json      operator block rules: hosts and URL patterns (core.blocklist)
          imported.json       what an import (WARC or JSON Lines, crawl.ingest) read into docs/
          metadata.jsonl.gz   imported documents' fields that are not indexed, by id (crawl.ingest)
          lock                the crawl's writer lock: holder's pid, host, command (core.dirlock)
          lock.<worker>       a fleet worker's own lock (the fleet shares the directory)
    """

    root: Path

    def __init__(self, root: Path | str) -> None:
        object.__setattr__(self, "root", Path(root))

    @property
    def db(self) -> Path:
        """The crawl database (frontier, host state, robots, seeds)."""
        return self.root / "frontier.sqlite"

    @property
    def docs(self) -> Path:
        """Parsed-document segments."""
        return self.root / "docs"

    @property
    def links(self) -> Path:
        """Link-graph segments."""
        return self.root / "links"

    @property
    def warc(self) -> Path:
        """Raw-response WARC files."""
        return self.root / "warc"

    @property
    def pagerank(self) -> Path:
        """PageRank per canonical URL, input to index build."""
        return self.root / "pagerank.parquet"

    @property
    def pagerank_hosts(self) -> Path:
        """PageRank per host, beside the pages' (stored for a future ranking feature)."""
        return self.root / "pagerank-hosts.parquet"

    @property
    def deletions(self) -> Path:
        """Removal tombstones (pages gone, noindex, disallowed, canonicalised, blocked)."""
        return self.root / "deletions"

    @property
    def blocklist(self) -> Path:
        """Operator block rules."""
        return self.root / "blocklist.json"

    @property
    def imported(self) -> Path:
        """An import's summary; its presence says docs/ came from archives or JSON Lines."""
        return self.root / "imported.json"

    @property
    def metadata(self) -> Path:
        """Imported documents' extra fields (JSON lines, gzip): kept, not indexed."""
        return self.root / "metadata.jsonl.gz"

    def writer_lock(self, frontier_url: str | None, worker_id: str | None) -> DirLock | None:
        """The lock a crawl (``trawl crawl``, ``trawl run``) holds while it writes here.

        A crawl on this directory's SQLite frontier locks the whole directory: a second one
        would fetch every URL again. A fleet shares the directory on purpose (PostgreSQL
        keeps its state), each worker writing its own folders, so a worker locks only its
        own name (two started with one ``--worker-id`` would write the same files); one with
        no name gets a unique one (host-pid) and needs no lock.
        """
        if not frontier_url:
            return DirLock(self.root / "lock", what=f"Crawl directory {self.root}")
        if worker_id:
            folder = worker_folder(worker_id)
            return DirLock(self.root / f"lock.{folder}", what=f"Fleet worker {worker_id!r} in {self.root}")
        return None

    def warc_for(self, worker: str | None) -> Path:
        """A worker's WARC folder (``warc/`` itself for a one-process crawl)."""
        return self.warc / worker if worker else self.warc

    def exists(self) -> bool:
        """True when a crawl has written its database here."""
        return self.db.exists()

    def has_crawl(self, frontier_url: str | None) -> bool:
        """True when there is a crawl database to read: the configured PostgreSQL frontier
        (a fleet keeps its state there, not here), else this directory's SQLite file."""
        return bool(frontier_url) or self.exists()

    def require_crawl(self, frontier_url: str | None) -> None:
        """Raise ``ConfigError`` unless :meth:`has_crawl`: a mistyped ``--data`` is an error,
        not an empty report that reads as "nothing crawled yet"."""
        if not self.has_crawl(frontier_url):
            raise ConfigError(f"{self.root} is not a crawl data directory (no {self.db.name} in it).")
