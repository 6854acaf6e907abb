"""The WARC sink: ``flush`` beside writes that keep coming, one gzip member per record, and
no record after a failed write.

The crawl's batches (documents, link edges, frontier acknowledgements) are stored only
after ``flush`` returns, on another thread than the writes: a flush that waited for
writes to stop would hold every batch in memory until the crawl ends.
"""

from __future__ import annotations

import gzip
import io
import shutil
import threading
import time
import zlib
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawl.fetch.fetcher import FetchResult
from crawl.run.warc import WarcSink


def _result(i: int) -> FetchResult:
    url = f"http://127.0.0.1:8000/p{i}.html"
    body = f"<html><title>Page {i}</title><body>{'word ' * 200}{i}</body></html>".encode()
    return FetchResult(
        url=url,
        final_url=url,
        status=200,
        headers={"content-type": "text/html"},
        body=body,
        wire_body=body,
        raw_bytes=len(body),
        address="127.0.0.1",
        fetched_at=1.8e9 + i,
    )


def _whole_members(data: bytes) -> bytes:
    """The longest prefix of ``data`` made of whole gzip members (a torn last one is left off)."""
    end = 0
    view = memoryview(data)
    while end < len(data):
        member = zlib.decompressobj(zlib.MAX_WBITS | 16)
        pos = end
        while not member.eof and pos < len(data):
            member.decompress(view[pos : pos + 4096])  # in steps: unused_data copies what is left
            pos = min(pos + 4096, len(data))
        if not member.eof:
            break
        end = pos - len(member.unused_data)
    return data[:end]


def _response_urls(folder: Path, *, still_written: bool = False) -> list[str]:
    """The response URLs of the folder's WARC files, read as they are now.

    ``still_written``: a write goes on meanwhile, so each file is read from one snapshot of
    its bytes, up to its last whole gzip member. warcio reading the live file can meet its
    end between two members and then find it grown, which it reports as "non-chunked gzip"
    (this failed on CI); and the last member may be a record still being written, which
    no flush covered yet.
    """
    urls: list[str] = []
    for path in sorted(folder.glob("*.warc.gz")):
        data = path.read_bytes()
        if still_written:
            data = _whole_members(data)
        for record in ArchiveIterator(io.BytesIO(data)):
            if record.rec_type == "response":
                urls.append(record.rec_headers.get_header("WARC-Target-URI"))
    return urls


def test_flush_returns_while_writes_keep_coming_and_covers_what_came_before(tmp_path: Path) -> None:
    sink = WarcSink(tmp_path)
    stop = threading.Event()
    queued = [0]

    def produce() -> None:
        while not stop.is_set():
            sink.write(_result(queued[0]))
            queued[0] += 1

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        while queued[0] < 300:
            time.sleep(0.01)
        before = queued[0]
        flusher = threading.Thread(target=sink.flush, daemon=True)
        flusher.start()
        flusher.join(timeout=30)
        assert not flusher.is_alive(), "flush waited for writes made after it"
        assert producer.is_alive()
        written = set(_response_urls(tmp_path, still_written=True))
        assert {_result(i).url for i in range(before)} <= written
    finally:
        stop.set()
        producer.join(timeout=30)
        sink.close()
    assert len(_response_urls(tmp_path)) == queued[0]


def test_records_are_gzip_members_that_gzip_and_warcio_read(tmp_path: Path) -> None:
    with WarcSink(tmp_path) as sink:
        for i in range(3):
            sink.write(_result(i))
    (path,) = tmp_path.glob("*.warc.gz")
    raw = path.read_bytes()
    assert raw.count(b"\x1f\x8b\x08") >= 6  # one member per record: 3 responses, 3 requests
    text = gzip.decompress(raw)
    assert text.count(b"WARC/1.1\r\n") == 6
    assert _response_urls(tmp_path) == [_result(i).url for i in range(3)]


@pytest.mark.parametrize("level", [0, 1, 9])
def test_every_gzip_level_writes_the_same_records(tmp_path: Path, level: int) -> None:
    """``warc_gzip_level`` trades CPU for bytes only: level 0 stores, 9 packs tightest."""
    with WarcSink(tmp_path / str(level), gzip_level=level) as sink:
        for i in range(3):
            sink.write(_result(i))
    (path,) = (tmp_path / str(level)).glob("*.warc.gz")
    text = gzip.decompress(path.read_bytes())
    assert text.count(b"WARC/1.1\r\n") == 6
    assert _response_urls(tmp_path / str(level)) == [_result(i).url for i in range(3)]
    ratio = path.stat().st_size / len(text)
    assert ratio > 1.0 if level == 0 else ratio < 0.5


def test_after_a_failed_write_nothing_is_written_and_flush_raises(tmp_path: Path) -> None:
    folder = tmp_path / "warc"
    sink = WarcSink(folder, max_file_bytes=1)  # every exchange starts a new file
    sink.write(_result(0))
    sink.flush()
    shutil.rmtree(folder)
    folder.write_bytes(b"")  # the next file cannot be created
    with pytest.raises(NotADirectoryError):
        sink.write(_result(1))
    folder.unlink()
    folder.mkdir()
    with pytest.raises(OSError, match="Writing WARC records failed"):
        sink.write(_result(2))
    with pytest.raises(OSError, match="Writing WARC records failed"):
        sink.flush()
    sink.close()
    assert list(folder.iterdir()) == []


def test_a_file_is_closed_once_it_passes_max_file_bytes(tmp_path: Path) -> None:
    with WarcSink(tmp_path, max_file_bytes=2500) as sink:
        for i in range(12):
            sink.write(_result(i))
    sizes = [path.stat().st_size for path in sorted(tmp_path.glob("*.warc.gz"))]
    exchange = max(sizes[-1], min(sizes))  # no file holds less than one exchange
    assert len(sizes) > 1
    assert all(size >= 2500 for size in sizes[:-1]), sizes
    assert all(size < 2500 + exchange for size in sizes), sizes
    assert sorted(_response_urls(tmp_path)) == sorted(_result(i).url for i in range(12))


def test_originals_read_back_are_named_as_written_and_unusable_ones_are_forgotten() -> None:
    from crawl.run.warc import _Originals

    originals = _Originals()
    url = "http://127.0.0.1:8000/p.html"
    digest, record_id = (
        "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ",
        "<urn:uuid:0f0c2a57-4b3e-4c53-9c1e-2b1f3d6e7a80>",
    )
    originals.add_read(url, digest, "2026-12-04T20:00:00Z", record_id)
    found = originals.get(url)
    assert found is not None
    assert (found.digest, found.date, found.record_id) == (digest, "2026-12-04T20:00:00Z", record_id)
    assert originals.get(url + "?other") is None
    # A later record of the URL that this writer could not name exactly (a date with
    # fractions, an id that is not a UUID URN) replaces the earlier one with nothing.
    originals.add_read(url, digest, "2026-12-04T21:00:00.5Z", record_id)
    assert originals.get(url) is None and len(originals) == 0
    originals.add_read(url, digest, "2026-12-04T20:00:00Z", "<urn:x-other:1>")
    assert originals.get(url) is None
