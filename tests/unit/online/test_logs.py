"""Parquet logs: bounded buffer, atomic parts, flush on close, appends across reopen, retry on failure."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa

from online.logs import ParquetLog, part_files, read_log

SCHEMA = pa.schema([("n", pa.int64()), ("tag", pa.string())])


def rows(start: int, stop: int, tag: str = "x") -> list[dict]:
    return [{"n": i, "tag": tag} for i in range(start, stop)]


def test_buffer_flushes_at_the_bound_and_close_flushes_the_rest(tmp_path: Path) -> None:
    log = ParquetLog(tmp_path, SCHEMA, max_buffer_rows=4, flush_interval_s=None)
    for row in rows(0, 10):
        log.append(row)
    assert log.pending == 2
    assert len(part_files(tmp_path)) == 2
    log.close()
    assert read_log(tmp_path, SCHEMA).column("n").to_pylist() == list(range(10))
    assert log.written == 10 and log.pending == 0
    assert not list(tmp_path.glob(".*.tmp"))


def test_reopening_appends_new_parts(tmp_path: Path) -> None:
    with ParquetLog(tmp_path, SCHEMA, max_buffer_rows=100, flush_interval_s=None) as log:
        for row in rows(0, 5, "first"):
            log.append(row)
    with ParquetLog(tmp_path, SCHEMA, max_buffer_rows=100, flush_interval_s=None) as log:
        for row in rows(5, 8, "second"):
            log.append(row)
    table = read_log(tmp_path, SCHEMA)
    assert table.column("n").to_pylist() == list(range(8))
    assert table.column("tag").to_pylist() == ["first"] * 5 + ["second"] * 3


def test_the_timer_flushes_without_traffic(tmp_path: Path) -> None:
    import time

    log = ParquetLog(tmp_path, SCHEMA, max_buffer_rows=1000, flush_interval_s=0.05)
    log.append({"n": 1, "tag": "t"})
    deadline = time.monotonic() + 5
    while not part_files(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert read_log(tmp_path, SCHEMA).column("n").to_pylist() == [1]
    log.close()


def test_a_failed_write_keeps_rows_for_the_next_flush(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = ParquetLog(directory, SCHEMA, max_buffer_rows=100, flush_interval_s=None)
    for row in rows(0, 3):
        log.append(row)
    shutil.rmtree(directory)
    directory.write_text("not a directory")  # every write now fails with an OSError
    assert log.flush() == 0
    assert log.pending == 3 and log.dropped == 0
    directory.unlink()
    directory.mkdir()
    log.append({"n": 3, "tag": "x"})
    log.close()
    assert read_log(directory, SCHEMA).column("n").to_pylist() == [0, 1, 2, 3]


def test_a_row_that_does_not_fit_is_dropped_alone(tmp_path: Path) -> None:
    schema = pa.schema([("n", pa.int32()), ("tag", pa.string())])
    log = ParquetLog(tmp_path, schema, max_buffer_rows=100, flush_interval_s=None)
    for row in [
        {"n": 1, "tag": "a"},
        {"n": 10**308, "tag": "huge"},
        {"n": "x", "tag": "b"},
        {"n": 2, "tag": "c"},
    ]:
        log.append(row)
    assert log.flush() == 2
    assert (log.rejected, log.written, log.pending) == (2, 2, 0)
    assert read_log(tmp_path, schema).column("tag").to_pylist() == ["a", "c"]
