"""A mistyped path is one clear line and exit status 2 from the real ``trawl`` entry point,
never a traceback nor an answer that looks like an empty crawl."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.cli import run_trawl


def test_crawl_status_of_a_directory_that_holds_no_crawl_is_an_error(tmp_path: Path) -> None:
    """It printed an empty status (0 URLs) with exit status 0: a typo read as "nothing crawled"."""
    done = run_trawl("crawl", "status", "--data", str(tmp_path / "no-such-crawl"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is not a crawl data directory" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "no-such-crawl").exists()  # nothing created


def test_serving_a_directory_that_holds_no_index_is_an_error(tmp_path: Path) -> None:
    """It started uvicorn, which printed a traceback and "Application startup failed" (status 3)."""
    done = run_trawl("serve", "--index", str(tmp_path), "--port", "0")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is not a Trawl index" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_listing_what_is_not_there_is_an_error(tmp_path: Path) -> None:
    """``index list`` and ``block list`` drew an empty table for a path that does not exist."""
    for args, says in (
        (("index", "list", "--index", str(tmp_path / "no-index")), "is not an index root"),
        (("block", "list", "--data", str(tmp_path / "no-crawl")), "is not a crawl data directory"),
    ):
        done = run_trawl(*args)
        assert done.returncode == 2, (args, done.stdout + done.stderr)
        assert says in done.stdout + done.stderr
    empty_root = tmp_path / "index"
    empty_root.mkdir()  # a root whose first build has not published yet: an empty table
    assert run_trawl("index", "list", "--index", str(empty_root)).returncode == 0
