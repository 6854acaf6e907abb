"""File records: sizes and hashes found different, and files read again only when they changed."""

from __future__ import annotations

import os
from pathlib import Path

from retrieval.index.checksums import ContentMemo, check, from_json, record, to_json


def _files(tmp_path: Path) -> dict[str, bytes]:
    files = {"a.bin": os.urandom(3 << 20), "sub/b.npy": b"x" * 100}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    return files


def test_a_record_finds_missing_resized_and_garbled_files(tmp_path: Path) -> None:
    _files(tmp_path)
    sums = from_json(to_json(record(tmp_path, ["a.bin", "sub/b.npy"])))
    assert check(tmp_path, sums, content=True) == []
    with (tmp_path / "a.bin").open("r+b") as handle:  # garbled, same size
        handle.seek(1 << 20)
        handle.write(b"\0" * 4096)
    (tmp_path / "sub/b.npy").write_bytes(b"x" * 50)
    found = {d.path.name: d.problem for d in check(tmp_path, sums, content=True, shard=3, part="lexical")}
    assert found["a.bin"].startswith("content differs")
    assert found["b.npy"].startswith("50 bytes, recorded 100")
    assert [d.path.name for d in check(tmp_path, sums, content=False)] == ["b.npy"]  # a's size is right
    (tmp_path / "sub/b.npy").unlink()
    assert [d.problem for d in check(tmp_path, sums, content=False)] == ["missing"]


def test_the_memo_reads_a_file_again_only_when_its_stat_changed(tmp_path: Path) -> None:
    _files(tmp_path)
    sums = record(tmp_path, ["a.bin", "sub/b.npy"])
    memo = ContentMemo()
    reads: list[int] = []

    def pause() -> None:
        reads.append(1)

    assert check(tmp_path, sums, content=True, memo=memo, pause=pause) == []
    first = len(reads)
    assert first >= 3  # every megabyte of a.bin
    assert check(tmp_path, sums, content=True, memo=memo, pause=pause) == []
    assert len(reads) == first  # nothing read again
    with (tmp_path / "a.bin").open("r+b") as handle:
        handle.write(b"garbage")
    assert [d.path.name for d in check(tmp_path, sums, content=True, memo=memo, pause=pause)] == ["a.bin"]
    assert len(reads) > first
    memo.prune(before=float("inf"))  # every entry is older: forgotten, read again next time
    again = len(reads)
    check(tmp_path, {"sub/b.npy": sums["sub/b.npy"]}, content=True, memo=memo, pause=pause)
    assert len(reads) == again + 1
