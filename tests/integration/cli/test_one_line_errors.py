"""A failed ``trawl`` command ends with one line naming what and where, from the real entry
point: a truncated docstore segment printed only "Aborted.", a garbled one or a wrong
database name a 16–22-frame traceback. ``trawl --debug`` still shows the traceback."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.errors import DamagedFile
from core.linkgraph import Edge, LinkGraphStore
from core.types import Document, doc_id_for
from crawl.state.sqlite import CrawlDb
from tests.fixtures.cli import run_trawl

TRUNCATED = "truncated (the compressed data ends early)"


def _crawl(root: Path, *, rows: bool) -> CrawlDir:
    """A crawl directory with one docstore segment and one link segment (rows or Parquet)."""
    crawl = CrawlDir(root)
    root.mkdir(parents=True)
    CrawlDb(crawl.db).close()
    urls = [f"http://site.test/{i}" for i in range(40)]
    docs = [
        Document(doc_id=doc_id_for(u), url=u, title=f"Page {i}", body=f"words {i} " * 80)
        for i, u in enumerate(urls)
    ]
    DocStore(crawl.docs, row_segments=rows).append(docs)
    LinkGraphStore(crawl.links, row_segments=rows).append(
        Edge(a, b, "next") for a, b in zip(urls, urls[1:], strict=False)
    )
    return crawl


def _only(folder: Path, pattern: str) -> Path:
    (found,) = folder.glob(pattern)
    return found


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def test_a_truncated_docstore_segment_is_one_line_naming_it(tmp_path: Path) -> None:
    crawl = _crawl(tmp_path / "crawl", rows=True)
    segment = _only(crawl.docs, "seg-*.ndjson.gz")
    segment.write_bytes(segment.read_bytes()[: segment.stat().st_size // 2])
    done = run_trawl("index", "--data", str(crawl.root), "--index", str(tmp_path / "index"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert _error_lines(done.stdout + done.stderr) == [f"error: {segment} is damaged: {TRUNCATED}"]


def test_a_garbled_link_segment_is_one_line_naming_it(tmp_path: Path) -> None:
    crawl = _crawl(tmp_path / "crawl", rows=False)
    edges = _only(crawl.links, "edges-*.parquet")
    data = bytearray(edges.read_bytes())
    data[40:440] = b"garbage!" * 50
    edges.write_bytes(bytes(data))
    done = run_trawl("index", "--data", str(crawl.root), "--index", str(tmp_path / "index"))
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = _error_lines(done.stdout + done.stderr)
    assert line.startswith(f"error: {edges} is damaged: garbled ("), line


def test_debug_shows_the_traceback_then_the_line(tmp_path: Path) -> None:
    crawl = _crawl(tmp_path / "crawl", rows=True)
    segment = _only(crawl.links, "edges-*.ndjson.gz")
    segment.write_bytes(segment.read_bytes()[:-9])
    done = run_trawl("--debug", "index", "--data", str(crawl.root), "--index", str(tmp_path / "index"))
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "EOFError" in done.stderr  # the library's own error, as the cause
    assert _error_lines(done.stderr)[-1] == f"error: {segment} is damaged: {TRUNCATED}"


def test_a_wrong_database_name_is_one_line_naming_the_setting(tmp_path: Path, pg_dsn: str) -> None:
    wrong = pg_dsn.rpartition("/")[0] + "/nosuchdb"
    for args in (
        ("crawl", "http://127.0.0.1:9/", "--data", str(tmp_path / "crawl"), "--frontier", wrong),
        ("crawl", "status", "--data", str(tmp_path / "crawl"), "--frontier", wrong),
    ):
        done = run_trawl(*args)
        assert done.returncode == 1, (args, done.stdout + done.stderr)
        (line,) = _error_lines(done.stdout + done.stderr)
        assert line.startswith("error: the PostgreSQL frontier (--frontier / TRAWL_CRAWL__FRONTIER_URL)")
        assert 'database "nosuchdb" does not exist' in line


def test_library_failures_are_described_with_their_place() -> None:
    """What the handler says for a Ray worker that died, a Ray task whose own error names a
    file, and OS errors; real exception objects, as ``ray.get`` and ``open`` raise them."""
    import ray.exceptions

    from cli.failures import describe

    died = describe(ray.exceptions.WorkerCrashedError())
    assert died[1] == 1 and died[0].startswith("a Ray worker or task failed: The worker died unexpectedly")
    task = ray.exceptions.RayTaskError("encode", "Traceback …", DamagedFile("/d/seg-1.parquet", "truncated"))
    said = describe(task.as_instanceof_cause())
    assert said == ("a Ray task failed: /d/seg-1.parquet is damaged: truncated", 1)
    full = OSError(errno.ENOSPC, "No space left on device", "/d/warc/part-1.warc.gz")
    assert describe(full) == ("disk full: no space left on the device writing /d/warc/part-1.warc.gz", 1)
    with pytest.raises(OSError) as missing:
        open("/nonexistent/trawl/file")  # noqa: SIM115
    assert describe(missing.value) == ("/nonexistent/trawl/file: No such file or directory", 1)
