"""core.atomic: a failed write leaves the old content and no temporary behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import atomic


def test_write_text_replaces_and_leaves_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "CURRENT"
    atomic.write_text(target, "gen-1")
    atomic.write_text(target, "gen-2")
    assert target.read_text() == "gen-2"
    assert [p.name for p in tmp_path.iterdir()] == ["CURRENT"]


def test_failed_writer_keeps_old_content(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    atomic.write_bytes(target, b"old")

    def broken(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic.write_with(target, broken)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]


def test_staging_dir_replaces_whole_tree_or_nothing(tmp_path: Path) -> None:
    out = tmp_path / "model"
    with atomic.staging_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic.staging_dir(out) as tmp:
            (tmp / "b.txt").write_text("2")
            raise RuntimeError("training failed")
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]
    with atomic.staging_dir(out) as tmp:
        (tmp / "c.txt").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == ["c.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
