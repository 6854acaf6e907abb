"""A benchmark's results file keeps every run, the newest first."""

from __future__ import annotations

from pathlib import Path

from bench.results_file import record_run


def test_a_new_run_goes_first_and_the_last_one_moves_under_history(tmp_path: Path) -> None:
    path = tmp_path / "serving.md"
    record_run(path, "day 1", "first body\n\n### Per stage\n\nrows 1", intro="# Serving\n\nhow to run")
    record_run(path, "day 2", "second body")
    record_run(path, "day 3", "third body")
    text = path.read_text()
    assert text.startswith("# Serving\n\nhow to run\n\n## Latest run: day 3\n\nthird body\n\n## History\n")
    assert text.index("### day 2") < text.index("### day 1") < text.index("#### Per stage")
    assert text.count("## Latest run") == 1 and text.count("## History") == 1
    assert "first body" in text and "second body" in text
