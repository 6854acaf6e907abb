"""core.docstore (lives here because the crawler is its writer): segments, manifest, superseding."""

from __future__ import annotations

import json
from pathlib import Path

from core.docstore import DocStore
from core.types import Document, doc_id_for


def _doc(url: str, title: str = "T", **kw: object) -> Document:
    return Document(doc_id_for(url), url, title, f"body of {url}", **kw)  # type: ignore[arg-type]


def test_round_trip_with_every_field(tmp_path: Path) -> None:
    store = DocStore(tmp_path / "docs")
    doc = Document(
        doc_id_for("http://a/"),
        "http://a/",
        "Title",
        "Body",
        headings=("H1", "H2"),
        anchors=("in",),
        host="a",
        lang="en",
        filetype="html",
        description="d",
        external_id="",
        published_at=1.5,
        fetched_at=2.5,
        content_hash="abc",
        simhash=2**64 - 1,
        pagerank=0.25,
        dup_cluster_size=3,
        outlinks=("http://b/",),
    )
    assert store.append([doc]) == "seg-000001.parquet"
    assert list(store.iter_documents()) == [doc]
    assert len(store) == 1


def test_later_versions_supersede_earlier(tmp_path: Path) -> None:
    store = DocStore(tmp_path)
    store.append([_doc("http://a/1", "old"), _doc("http://a/2")])
    store.append([_doc("http://a/3"), _doc("http://a/1", "new")])
    assert store.segments() == ["seg-000001.parquet", "seg-000002.parquet"]
    assert [(d.url, d.title) for d in store.iter_documents()] == [
        ("http://a/2", "T"),
        ("http://a/3", "T"),
        ("http://a/1", "new"),
    ]
    assert len(store) == 3
    assert [d.title for d in store.iter_documents("seg-000001.parquet")] == ["old", "T"]
    assert {u: d.title for u, d in store.documents_by_url(["http://a/1", "http://a/x"]).items()} == {
        "http://a/1": "new"
    }
    frame = store.latest_frame(["url", "title"])
    assert frame.rows() == [
        (doc_id_for("http://a/2"), "http://a/2", "T"),
        (doc_id_for("http://a/3"), "http://a/3", "T"),
        (doc_id_for("http://a/1"), "http://a/1", "new"),
    ]


def test_empty_append_and_orphan_segments(tmp_path: Path) -> None:
    store = DocStore(tmp_path)
    assert store.append([]) == ""
    assert store.segments() == [] and len(store) == 0 and list(store.iter_documents()) == []
    store.append([_doc("http://a/1")])
    (tmp_path / "seg-000002.parquet").write_bytes(b"left by a crash before the manifest")
    assert store.append([_doc("http://a/2")]) == "seg-000003.parquet"
    manifest = json.loads((tmp_path / "segments.json").read_text())
    assert [s["name"] for s in manifest["segments"]] == ["seg-000001.parquet", "seg-000003.parquet"]
    assert [d.url for d in store.iter_documents()] == ["http://a/1", "http://a/2"]
    assert not list(tmp_path.glob(".*tmp*"))


def _append_many(root: str, worker: str, prefix: str, count: int) -> None:
    store = DocStore(Path(root), worker=worker)
    for i in range(count):
        store.append([_doc(f"http://{prefix}/{i}")])


def test_two_processes_appending_to_one_folder_lose_nothing(tmp_path: Path) -> None:
    """The operator's removal folder has two writers (``trawl block`` and the API): each
    append picks the next segment number and rewrites the manifest, so two at once wrote
    the same segment or dropped each other's manifest entry."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # a fork of a process with polars' threads can hang
    writers = [
        ctx.Process(target=_append_many, args=(str(tmp_path), "operator", prefix, 40))
        for prefix in ("a", "b")
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    store = DocStore(tmp_path)
    assert len(store.segments()) == 80
    assert {d.url for d in store.iter_documents()} == {f"http://{p}/{i}" for p in "ab" for i in range(40)}
