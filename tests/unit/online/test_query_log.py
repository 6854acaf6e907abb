"""Frequent past queries from the impression log: enough distinct visitors, found something, no operators."""

from __future__ import annotations

from pathlib import Path

from online.book import ExperimentBook
from online.logs import ExperimentLogs
from online.query_log import frequent_queries, is_topic
from online.runtime import ExperimentRuntime


def search(
    runtime: ExperimentRuntime, query: str, visitor: str, *, page: int = 1, found: bool = True
) -> None:
    runtime.record_impression(
        query=query,
        doc_ids=[7] if found else [],
        assignment=None,
        unit_id=visitor,
        ranker="bm25",
        generation="g1",
        page=page,
        size=10,
    )


def test_queries_enough_visitors_searched_are_counted_by_visitor(tmp_path: Path) -> None:
    logs = ExperimentLogs(tmp_path, max_buffer_rows=4, flush_interval_s=None)
    runtime = ExperimentRuntime(ExperimentBook.load(tmp_path / "none.toml"), logs)
    for visitor in ("a", "b", "c", "c", "c"):
        search(runtime, "Event  loop", visitor)
    for visitor in ("a", "b", "c", "d"):
        search(runtime, "event loop", visitor)  # same query, other spelling: one more visitor (d)
    for visitor in ("a", "a", "a", "a", "b"):
        search(runtime, "private thing", visitor)  # five searches, two visitors
    for visitor in ("a", "b", "c"):
        search(runtime, "site:python.org loop", visitor)
        search(runtime, "nothing found", visitor, found=False)
        search(runtime, "second page", visitor, page=2)
    runtime.close()
    assert frequent_queries(tmp_path / "impressions") == [("Event loop", 4)]
    assert frequent_queries(tmp_path / "impressions", min_visitors=2) == [
        ("Event loop", 4),
        ("private thing", 2),
    ]
    assert frequent_queries(tmp_path / "missing") == []


def test_operators_are_tools_not_topics() -> None:
    assert is_topic("event loop")
    assert not is_topic('"event loop"')
    assert not is_topic("loop -asyncio")
    assert not is_topic("lang:en loop")
    assert not is_topic("")
    assert not is_topic("x" * 101)
