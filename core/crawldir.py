"""The layout of a crawl's data directory: the one module that names every path in it.

Why here, in ``core``: the crawler writes this directory, and ``retrieval`` (index
build reads documents, anchors and PageRank), ``training`` (link-graph jobs write
PageRank) and ``api`` (admin, inspect, host pages read the crawl database) read it.
``crawl`` is not importable from ``retrieval`` or ``training`` (the docstore is the
seam), so the layout lives below all of them. No other module spells these names.

::

    DIR/
      frontier.sqlite     crawl database: URLs, hosts, robots, queued seeds (SQLite, WAL)
      docs/               parsed documents, Parquet segments (core.docstore)
      links/              link-graph edges, Parquet segments (core.linkgraph)
      warc/               raw responses, WARC files (crawl.warc)
      pagerank.parquet    PageRank per canonical URL (written by training.linkgraph)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CrawlDir"]


@dataclass(frozen=True, slots=True)
class CrawlDir:
    """Paths inside one crawl's data directory (nothing is created by naming them)."""

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

    def exists(self) -> bool:
        """True when a crawl has written its database here."""
        return self.db.exists()
