"""core.linkgraph: edge files and anchor text by target."""

from __future__ import annotations

from pathlib import Path

from core.linkgraph import Edge, LinkGraphStore, anchors_by_target


def test_edges_round_trip_and_anchors(tmp_path: Path) -> None:
    store = LinkGraphStore(tmp_path)
    assert store.read_edges().columns == ["src_url", "dst_url", "anchor_text"]
    assert store.read_edges().height == 0
    store.append([Edge("http://a/", "http://b/", "Bee"), Edge("http://a/x", "http://b/", " Bee ")])
    store.append(
        [
            Edge("http://c/", "http://b/", "the b site"),
            Edge("http://b/", "http://b/", "self"),
            Edge("http://a/", "http://a/x", ""),
            Edge("http://a/", "http://a/y", "same host"),
        ]
    )
    edges = store.read_edges()
    assert edges.height == 6
    assert anchors_by_target(edges) == {"http://b/": ["Bee", "the b site"], "http://a/y": ["same host"]}
    assert anchors_by_target(edges, same_host=False) == {"http://b/": ["Bee", "the b site"]}
    assert anchors_by_target(edges, max_per_target=1) == {"http://b/": ["Bee"], "http://a/y": ["same host"]}


def test_row_segment_edges_read_beside_parquet_ones(tmp_path: Path) -> None:
    """A crawl worker writes gzip JSON lines (no Polars); a batch job Parquet; one read sees both."""
    LinkGraphStore(tmp_path).append([Edge("http://a/", "http://b/", "Bee")])
    worker = LinkGraphStore(tmp_path, worker="w1", row_segments=True)
    assert worker.append([Edge("http://c/", "http://b/", 'Bé "quoted"')]) == "edges-000001.ndjson.gz"
    assert worker.append([Edge("http://c/", "http://d/", "")]) == "edges-000002.ndjson.gz"
    edges = LinkGraphStore(tmp_path).read_edges()
    assert edges.schema == LinkGraphStore(tmp_path / "none").read_edges().schema
    assert edges.rows() == [
        ("http://a/", "http://b/", "Bee"),
        ("http://c/", "http://b/", 'Bé "quoted"'),
        ("http://c/", "http://d/", ""),
    ]
    assert [p.name for p in LinkGraphStore(tmp_path).files()] == [
        "edges-000001.parquet",
        "edges-000001.ndjson.gz",
        "edges-000002.ndjson.gz",
    ]
