"""The fault drill's runner: every try in a fresh folder, a drill that breaks is a failed try
(with its reason) and the run goes on, and the table counts what happened."""

from __future__ import annotations

from pathlib import Path

from bench.fault_drill import run_all
from bench.faults.harness import Drill, Outcome, markdown_table


def test_tries_are_counted_a_broken_try_fails_and_a_drill_that_cannot_run_names_its_test(
    tmp_path: Path,
) -> None:
    folders: list[Path] = []

    def flaky(folder: Path) -> Outcome:
        folders.append(folder)
        assert folder.is_dir() and not any(folder.iterdir())  # fresh and empty
        (folder / "scratch").write_text("x")
        if len(folders) == 2:
            raise RuntimeError("trawl serve exited 3\nthe rest of its log")
        return Outcome(True, "refused | one line")

    drills = [
        Drill("flaky", "refused", flaky),
        Drill(
            "needs root",
            "stops",
            lambda folder: Outcome(True, "never run"),
            unavailable=lambda: "mounting a small tmpfs needs root",
            covered_by="tests/integration/crawl/test_disk_full.py",
        ),
    ]
    results = run_all(drills, 3, tmp_path)
    assert len(set(folders)) == 3
    assert [o.ok for o in results[0].outcomes] == [True, False, True]
    assert results[0].outcomes[1].said == "drill error: RuntimeError: trawl serve exited 3"
    assert "the rest of its log" in (folders[1] / "drill-error.txt").read_text()
    assert results[1].outcomes == []
    table = markdown_table(results).splitlines()
    assert table[2] == (
        "| flaky | 3 | refused | 2× refused \\| one line<br>1× drill error: RuntimeError: trawl serve "
        "exited 3 | **FAIL** (2/3 pass) |"
    )
    assert table[3] == (
        "| needs root | 0 | stops | not run: mounting a small tmpfs needs root | "
        "covered by tests/integration/crawl/test_disk_full.py |"
    )
