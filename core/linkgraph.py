"""The link graph: append-only Parquet files of (src_url, dst_url, anchor_text) edges.

PageRank and anchor text are batch jobs over the whole graph, so edges are written in
columnar files the crawler appends and Polars reads in one scan. URLs are canonical
(``crawl.urls.canonicalize_url``), the same strings as ``Document.url``. Files are
written to a temporary name and renamed (``core.atomic``), so a reader never sees a
partial file. A crawl worker writes row segments (``core.rowsegments``:
``edges-NNNNNN.ndjson.gz``) so it never loads Polars; readers take both formats.

Example::

    store = LinkGraphStore(Path("data/links"))
    store.append([Edge("https://a.org/", "https://b.org/", "B's home")])
    anchors = anchors_by_target(store.read_edges())   # {"https://b.org/": ["B's home"]}
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.atomic import write_with
from core.rowsegments import ROW_SUFFIX, SEGMENT_SUFFIX, is_row_segment, read_segment, write_rows

if TYPE_CHECKING:
    import polars as pl

logger = logging.getLogger(__name__)

__all__ = ["Edge", "LinkGraphStore", "anchors_by_target", "edge_schema"]

_EDGES = re.compile(r"^edges-(\d{6,})" + SEGMENT_SUFFIX)


@cache
def edge_schema() -> dict[str, Any]:
    """Column types of an edge file (built on first use: a crawl worker never imports Polars)."""
    import polars as pl

    return {"src_url": pl.String, "dst_url": pl.String, "anchor_text": pl.String}


@dataclass(frozen=True, slots=True)
class Edge:
    src_url: str
    dst_url: str
    anchor_text: str = ""


class LinkGraphStore:
    """Edge files under ``root``, named ``edges-NNNNNN.parquet`` in append order.

    With ``worker``, this store writes in ``root/<worker>/`` (crawl workers sharing one
    directory never write the same file); reading covers ``root`` and every worker folder.
    With ``row_segments`` (a crawl worker), files are written as ``edges-NNNNNN.ndjson.gz``
    (module doc).
    """

    def __init__(self, root: Path, *, worker: str | None = None, row_segments: bool = False) -> None:
        self.root = Path(root)
        self._write_root = self.root / worker if worker else self.root
        self._suffix = ROW_SUFFIX if row_segments else ".parquet"

    def files(self) -> list[Path]:
        """Every edge file: the root's in append order, then each worker folder's (by name)."""
        if not self.root.exists():
            return []
        out = _edge_files(self.root)
        for child in sorted(self.root.iterdir()):
            if child.is_dir():
                out.extend(_edge_files(child))
        return out

    def _own_files(self) -> list[Path]:
        return _edge_files(self._write_root) if self._write_root.exists() else []

    def append(self, edges: Iterable[Edge]) -> str:
        """Write the edges as one new file; returns its name (``""`` if none given)."""
        src: list[str] = []
        dst: list[str] = []
        text: list[str] = []
        for edge in edges:
            src.append(edge.src_url)
            dst.append(edge.dst_url)
            text.append(edge.anchor_text)
        if not src:
            return ""
        self._write_root.mkdir(parents=True, exist_ok=True)
        existing = self._own_files()
        serial = int(_EDGES.match(existing[-1].name).group(1)) + 1 if existing else 1  # type: ignore[union-attr]
        name = f"edges-{serial:06d}{self._suffix}"
        if is_row_segment(name):
            write_rows(
                self._write_root / name,
                (
                    {"src_url": s, "dst_url": d, "anchor_text": t}
                    for s, d, t in zip(src, dst, text, strict=True)
                ),
            )
        else:
            import polars as pl

            frame = pl.DataFrame({"src_url": src, "dst_url": dst, "anchor_text": text}, schema=edge_schema())
            write_with(self._write_root / name, lambda tmp: frame.write_parquet(tmp, compression="zstd"))
        return name

    def read_edges(self) -> pl.DataFrame:
        """All edges, in append order (empty frame with the three columns when none)."""
        import polars as pl

        files = self.files()
        if not files:
            return pl.DataFrame(schema=edge_schema())
        return pl.concat([read_segment(path, edge_schema()) for path in files], how="vertical")


def _edge_files(folder: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _EDGES.match(p.name))]
    return [path for _, path in sorted(found)]


def anchors_by_target(
    edges: pl.DataFrame, *, max_per_target: int = 32, same_host: bool = True
) -> dict[str, list[str]]:
    """Distinct non-empty anchor texts of the links pointing to each URL.

    Self-links are dropped. ``same_host=False`` keeps only links from other hosts
    (navigation menus repeat the same anchors on every page of a site). At most
    ``max_per_target`` anchors per target, most frequent first, so a page linked from
    every page of a big site does not carry thousands of copies.
    """
    import polars as pl

    frame = edges.with_columns(pl.col("anchor_text").str.strip_chars().alias("anchor_text")).filter(
        (pl.col("anchor_text") != "") & (pl.col("src_url") != pl.col("dst_url"))
    )
    if not same_host:
        host = r"^[a-z]+://([^/]+)"
        frame = frame.filter(pl.col("src_url").str.extract(host, 1) != pl.col("dst_url").str.extract(host, 1))
    counted = (
        frame.group_by("dst_url", "anchor_text")
        .len()
        .sort(["dst_url", "len", "anchor_text"], descending=[False, True, False])
        .group_by("dst_url", maintain_order=True)
        .agg(pl.col("anchor_text").head(max_per_target))
    )
    return {row[0]: list(row[1]) for row in counted.iter_rows()}
