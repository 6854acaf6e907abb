"""Reproductions of freshness-path bugs found in review: each failed before its fix.

Real parts throughout: a docstore and removal log on disk, a Tantivy index built and
updated in place by the incremental indexer, read back as a serving process would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal
from core.docstore import DocStore
from core.settings import SearchSettings
from core.types import Document, doc_id_for
from retrieval.index.docs_source import crawled_documents
from retrieval.index.incremental import IncrementalIndexer
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService

SERVING = SearchSettings(cache_entries=0, use_vectors=False)


def _page(i: int, body: str, at: float) -> Document:
    url = f"http://site.test/p/{i}"
    return Document(doc_id=doc_id_for(url), url=url, title=f"Page {i}", body=body, fetched_at=at)


def _base(
    tmp_path: Path, *, pages: int = 20, shards: int = 2
) -> tuple[Path, Path, list[Document], IncrementalIndexer]:
    data, index = tmp_path / "crawl", tmp_path / "index"
    docs = [_page(i, f"glacier moraine report number {i}", 100.0) for i in range(pages)]
    DocStore(CrawlDir(data).docs).append(docs)
    indexer = IncrementalIndexer(data, index, shards=shards)
    indexer.compact()
    return data, index, docs, indexer


def _found(index: Path, query: str) -> set[int]:
    return {
        int(h.doc_id) for h in SearchService.open(index, SERVING).search(SearchRequest(query, size=50)).hits
    }


def test_a_removal_older_than_the_indexed_version_does_not_take_it_out(tmp_path: Path) -> None:
    """The ordering rule (``core.deletions``): a removal at t hides versions fetched at or
    before t, and a later fetch brings the page back. A removal that reaches the index
    after a newer version (another worker's batch flushed late, say) must not delete it;
    it did, so the page left search while a rebuild of the same crawl kept it."""
    data, index, docs, indexer = _base(tmp_path)
    page = docs[3]
    back = _page(3, "glacier moraine report number 3 zebraquasar", 300.0)
    DocStore(CrawlDir(data).docs).append([back])
    assert indexer.step() is not None
    assert _found(index, "zebraquasar") == {int(page.doc_id)}

    # The 404 seen at t=200 by another worker, written after the t=300 version was applied.
    DeletionLog(CrawlDir(data).deletions, worker="w-b").record(
        [Removal(page.doc_id, page.url, "http 404", 200.0)]
    )
    indexer.step()

    rebuilt = {int(d.doc_id) for d in crawled_documents(data)}
    assert int(page.doc_id) in rebuilt
    assert _found(index, "zebraquasar") == {int(page.doc_id)}
    assert _found(index, "glacier moraine") == rebuilt


class _Killed(BaseException):
    """The process died here (a SIGKILL, as far as the files on disk can tell)."""


def test_killed_while_writing_a_shard_manifest_leaves_the_index_servable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-place step rewrote each shard's ``trawl-lexical.json`` where it stood: a kill
    mid-write left half a file, and no process could open the shard (a JSON error) until
    the indexer came back and replayed the step."""
    data, index, docs, indexer = _base(tmp_path)
    DocStore(CrawlDir(data).docs).append([_page(40, "glacier moraine zebraquasar", 200.0)])
    write_bytes, write_text = Path.write_bytes, Path.write_text

    def dies_halfway(path: Path, data: bytes) -> int:
        if "trawl-lexical.json" in path.name:
            write_bytes(path, data[: len(data) // 2])
            raise _Killed
        return write_bytes(path, data)

    monkeypatch.setattr(Path, "write_bytes", dies_halfway)
    monkeypatch.setattr(Path, "write_text", lambda path, text, **kw: dies_halfway(path, text.encode()))
    with pytest.raises(_Killed):
        indexer.step()
    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    monkeypatch.setattr(Path, "write_text", write_text)

    assert _found(index, "glacier moraine") >= {int(d.doc_id) for d in docs}  # still servable
    restarted = IncrementalIndexer(data, index, shards=2)
    assert restarted.step() is not None  # the replay
    assert _found(index, "zebraquasar") == {int(doc_id_for("http://site.test/p/40"))}
    assert _found(index, "glacier moraine") == {int(d.doc_id) for d in crawled_documents(data)}


def test_a_crawl_batch_written_while_compaction_reads_the_docstore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction reads every document while `trawl run` keeps crawling. The docstore found
    each document's latest version over one listing of its segments and then read a
    second listing: a segment appended in between had documents the first pass never saw
    (a KeyError, and the indexer thread stopped the crawl)."""
    data, index, docs, indexer = _base(tmp_path)
    late = _page(50, "glacier moraine zebraquasar", 200.0)
    positions = DocStore._latest_positions

    def crawl_writes_meanwhile(self: DocStore, *args: object) -> dict[int, tuple[int, int]]:
        found = positions(self, *args)  # type: ignore[arg-type]
        if self.root == CrawlDir(data).docs and not DocStore(self.root).documents_by_url([late.url]):
            DocStore(self.root).append([late])  # the crawl's writer thread, at this moment
        return found

    monkeypatch.setattr(DocStore, "_latest_positions", crawl_writes_meanwhile)
    indexer.compact()
    monkeypatch.setattr(DocStore, "_latest_positions", positions)

    indexer.step()  # the batch the compaction did not take is applied next
    assert _found(index, "zebraquasar") == {int(late.doc_id)}
    assert _found(index, "glacier moraine") == {int(d.doc_id) for d in crawled_documents(data)}


def test_the_newest_fetch_wins_across_worker_folders_in_a_rebuild_and_in_place(tmp_path: Path) -> None:
    """Two crawl workers fetched the same page: worker "w-a" at t=300 (new text), worker
    "w-b" at t=200 (old text), and w-b's batch is written last. A rebuild read the folders
    in name order and kept w-b's older version; the incremental indexer applied w-b's batch
    over w-a's newer one. Both must serve the t=300 version, as one worker would."""
    data, index, docs, indexer = _base(tmp_path)
    page = docs[5]
    newer = _page(5, "glacier moraine report number 5 newtextvortex", 300.0)
    older = _page(5, "glacier moraine report number 5 oldtextecho", 200.0)
    DocStore(CrawlDir(data).docs, worker="w-a").append([newer])
    assert indexer.step() is not None
    DocStore(CrawlDir(data).docs, worker="w-b").append([older])
    assert indexer.step() is not None

    rebuilt = {d.doc_id: d for d in crawled_documents(data)}
    assert rebuilt[page.doc_id].body == newer.body
    assert DocStore(CrawlDir(data).docs).documents_by_url([page.url])[page.url].body == newer.body
    frame = DocStore(CrawlDir(data).docs).latest_frame(["fetched_at"])
    assert dict(frame.rows())[int(page.doc_id)] == 300.0
    assert _found(index, "newtextvortex") == {int(page.doc_id)}
    assert _found(index, "oldtextecho") == set()
    indexer.compact()
    assert _found(index, "newtextvortex") == {int(page.doc_id)}
