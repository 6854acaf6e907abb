"""core.crawldir names every path of a crawl directory under its root."""

from __future__ import annotations

from pathlib import Path

from core.crawldir import CrawlDir


def test_paths_are_distinct_children_of_root(tmp_path: Path) -> None:
    layout = CrawlDir(tmp_path)
    paths = [layout.db, layout.docs, layout.links, layout.warc, layout.pagerank]
    assert all(p.parent == tmp_path for p in paths)
    assert len({p.name for p in paths}) == len(paths)
    assert not layout.exists()
    layout.db.write_bytes(b"")
    assert CrawlDir(str(tmp_path)).exists()
