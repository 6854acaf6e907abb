"""Progress for a log: whole sentences, about ten per job, decided by the reports themselves."""

from __future__ import annotations

from cli.progress_lines import ProgressLines, progress_line


class Clock:
    """A clock the test moves by hand: the reporter's decisions depend on it, not on sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_is_a_whole_sentence() -> None:
    assert progress_line("embeddings", "passages", 4096, 12277, 69.4, 59.0) == (
        "embeddings: 4,096 of 12,277 passages (33%), 59/s, about 2 min left"
    )
    assert progress_line("embeddings", "passages", 0, 12277, 0.0, None) == (
        "embeddings: 0 of 12,277 passages (0%)"
    )
    assert progress_line("embeddings", "passages", 12277, 12277, 208.0, 59.0) == (
        "embeddings: 12,277 of 12,277 passages (100%), 59/s, done in 3 min"
    )
    assert progress_line("features · cisi", "", 3, 112, 2.0, 1.5) == (
        "features · cisi: 3 of 112 (2%), 1.5/s, about 1 min left"
    )
    assert progress_line("embeddings", "passages", 0, 0, 0.0, None) == "embeddings: nothing to do"


def test_about_ten_lines_for_a_job_reported_in_many_small_steps() -> None:
    clock, lines = Clock(), []
    report = ProgressLines(lines.append, "embeddings", "passages", clock=clock)
    for done in range(0, 1001, 5):  # 201 reports, 0.1 s apart
        report(done, 1000)
        clock.now += 0.1
    assert lines[0] == "embeddings: 0 of 1,000 passages (0%)"
    assert lines[-1].startswith("embeddings: 1,000 of 1,000 passages (100%), 50/s, done in")
    assert len(lines) == 11
    report(1000, 1000)  # a repeated end says nothing more
    assert len(lines) == 11


def test_a_slow_job_gets_a_line_every_ten_seconds_when_it_moved() -> None:
    clock, lines = Clock(), []
    report = ProgressLines(lines.append, "embeddings", "passages", clock=clock)
    report(0, 10_000)
    for done in (10, 20, 30):
        clock.now += 10
        report(done, 10_000)
    clock.now += 30
    report(30, 10_000)  # no progress: no line, however long it has been
    assert lines == [
        "embeddings: 0 of 10,000 passages (0%)",
        "embeddings: 10 of 10,000 passages (0%), 1.0/s, about 2 h 46 min left",
        "embeddings: 20 of 10,000 passages (0%), 1.0/s, about 2 h 46 min left",
        "embeddings: 30 of 10,000 passages (0%), 1.0/s, about 2 h 46 min left",
    ]
