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


def _full_doc(url: str, **kw: object) -> Document:
    fields: dict[str, object] = {
        "headings": ("H1", 'Ĥ2 "q"'),
        "anchors": ("in",),
        "host": "a",
        "lang": "en",
        "description": "d\nline",
        "published_at": 1.5,
        "fetched_at": 2.5,
        "content_hash": "abc",
        "simhash": 2**64 - 1,
        "pagerank": 0.25,
        "dup_cluster_size": 3,
        "outlinks": ("http://b/",),
    }
    fields.update(kw)
    return Document(doc_id_for(url), url, "Títle ✓", 'Body\twith \\ and "quotes"', **fields)  # type: ignore[arg-type]


def test_row_segments_round_trip_with_the_parquet_column_types(tmp_path: Path) -> None:
    """What a crawl worker writes (gzip JSON lines) reads back as the same documents and,
    as a frame, with the same column types as a Parquet segment."""
    rows = DocStore(tmp_path / "rows", row_segments=True)
    parquet = DocStore(tmp_path / "parquet")
    doc = _full_doc("http://a/")
    assert rows.append([doc]) == "seg-000001.ndjson.gz"
    parquet.append([doc])
    assert list(rows.iter_documents()) == [doc]
    assert rows.documents_by_url(["http://a/"]) == {"http://a/": doc}
    columns = ["url", "title", "simhash", "headings", "published_at", "dup_cluster_size"]
    assert rows.latest_frame(columns).schema == parquet.latest_frame(columns).schema
    assert rows.latest_frame(columns).rows() == parquet.latest_frame(columns).rows()


def test_a_lone_surrogate_is_replaced_not_lost_with_the_document(tmp_path: Path) -> None:
    store = DocStore(tmp_path, row_segments=True)
    store.append([_doc("http://a/1", "bad \ud800 title"), _doc("http://a/2")])
    assert [(d.url, d.title) for d in store.iter_documents()] == [
        ("http://a/1", "bad ? title"),
        ("http://a/2", "T"),
    ]


def test_formats_mix_and_the_latest_version_wins_across_them(tmp_path: Path) -> None:
    """A crawl worker's row segments and Parquet segments (older crawls, batch jobs) share
    the numbering and the superseding rule."""
    DocStore(tmp_path).append(
        [_doc("http://a/1", "parquet", fetched_at=1.0), _doc("http://a/2", fetched_at=1.0)]
    )
    worker = DocStore(tmp_path, worker="w1", row_segments=True)
    assert worker.append([_doc("http://a/1", "rows", fetched_at=2.0)]) == "w1/seg-000001.ndjson.gz"
    root_rows = DocStore(tmp_path, row_segments=True)
    assert root_rows.append([_doc("http://a/2", "older", fetched_at=0.5)]) == "seg-000002.ndjson.gz"
    store = DocStore(tmp_path)
    assert store.segments() == ["seg-000001.parquet", "seg-000002.ndjson.gz", "w1/seg-000001.ndjson.gz"]
    assert {d.url: d.title for d in store.iter_documents()} == {"http://a/1": "rows", "http://a/2": "T"}
    assert {u: d.title for u, d in store.documents_by_url(["http://a/1", "http://a/2"]).items()} == {
        "http://a/1": "rows",
        "http://a/2": "T",
    }


def test_documents_by_url_in_row_segments_matches_whole_urls_only(tmp_path: Path) -> None:
    store = DocStore(tmp_path, row_segments=True)
    quoting = Document(doc_id_for("http://a/q"), "http://a/q", "T", 'see "url":"http://a/2"')
    store.append([_doc("http://a/2x"), quoting, _doc("http://a/22")])
    assert store.documents_by_url(["http://a/2"]) == {}
    assert set(store.documents_by_url(["http://a/2x", "http://a/q"])) == {"http://a/2x", "http://a/q"}


def test_a_crawl_workers_writes_and_rereads_never_import_polars(tmp_path: Path) -> None:
    """Polars costs a crawl worker ~45 MB of resident memory (issue 16's RSS target): the
    crawl command's imports, its docstore and link-graph appends and its end-of-run
    re-read of stale originals must all run without it."""
    import subprocess
    import sys

    script = f"""
import sys
from pathlib import Path
import cli.main, crawl.run.loop, crawl.run.parts
from core.docstore import DocStore
from core.linkgraph import Edge, LinkGraphStore
from core.types import Document, doc_id_for
root = Path({str(tmp_path)!r})
docs = DocStore(root / "docs", worker="w", row_segments=True)
docs.append([Document(doc_id_for("http://a/"), "http://a/", "T", "B")])
LinkGraphStore(root / "links", worker="w", row_segments=True).append([Edge("http://a/", "http://b/", "x")])
assert list(docs.documents_by_url(["http://a/"])) == ["http://a/"]
print(sorted(m for m in ("polars", "pyarrow", "pandas") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stderr


def test_documents_by_url_reads_rows_written_in_another_member_order(tmp_path: Path) -> None:
    """The URL is read from a row's first characters where the writer put it; a row laid
    out otherwise (another writer, a hand repair) is decoded whole instead of missed."""
    import gzip

    store = DocStore(tmp_path, row_segments=True)
    (name,) = [store.append([_doc("http://a/1", "one"), _doc("http://a/2", "two")])]
    path = tmp_path / name
    rows = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
    reordered = [json.dumps(dict(reversed(list(row.items())))) for row in rows]
    path.write_bytes(gzip.compress(("\n".join(reordered) + "\n").encode()))
    assert {u: d.title for u, d in store.documents_by_url(["http://a/2", "http://a/3"]).items()} == {
        "http://a/2": "two"
    }
