"""Clicks are checked against their impression, and impressions outlive a restart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import BadClick, UnknownImpression
from online.book import ExperimentBook
from online.logs import CLICK_SCHEMA, ExperimentLogs, read_log
from online.runtime import ExperimentRuntime


def open_runtime(log_dir: Path) -> ExperimentRuntime:
    return ExperimentRuntime(ExperimentBook({}), ExperimentLogs(log_dir, flush_interval_s=None))


def test_clicks_must_match_what_was_shown(tmp_path: Path) -> None:
    rt = open_runtime(tmp_path)
    imp = rt.record_impression(query="q", doc_ids=[7, 8, 9])
    with pytest.raises(UnknownImpression, match=re.escape("Unknown impression_id 'f00'")):
        rt.record_click(impression_id="f00", doc_id=7, position=1)
    with pytest.raises(
        BadClick, match=re.escape("position=4 is out of range; the impression showed 3 results.")
    ):
        rt.record_click(impression_id=imp, doc_id=7, position=4)
    with pytest.raises(
        BadClick, match=re.escape(f"doc_id=7 was not shown at position 2 of impression {imp}.")
    ):
        rt.record_click(impression_id=imp, doc_id=7, position=2)
    rt.record_click(impression_id=imp, doc_id=8, position=2)
    rt.close()
    clicks = read_log(tmp_path / "clicks", CLICK_SCHEMA).to_pylist()
    assert [(c["impression_id"], c["doc_id"], c["position"]) for c in clicks] == [(imp, 8, 2)]


def test_a_restarted_runtime_accepts_clicks_on_earlier_impressions(tmp_path: Path) -> None:
    first = open_runtime(tmp_path)
    imp = first.record_impression(query="q", doc_ids=[7, 8, 9])
    first.close()
    second = open_runtime(tmp_path)
    second.record_click(impression_id=imp, doc_id=9, position=3)
    second.close()
    assert len(read_log(tmp_path / "clicks", CLICK_SCHEMA)) == 1


def test_the_same_click_twice_within_the_window_is_logged_once(tmp_path: Path) -> None:
    now = [100.0]
    rt = ExperimentRuntime(
        ExperimentBook({}),
        ExperimentLogs(tmp_path, flush_interval_s=None),
        click_dedup_s=0.3,
        clock=lambda: now[0],
    )
    imp = rt.record_impression(query="q", doc_ids=[7, 8])
    first = rt.click(impression_id=imp, doc_id=7, position=1)
    again = rt.click(impression_id=imp, doc_id=7, position=1)
    other = rt.click(impression_id=imp, doc_id=8, position=2)
    assert not first.duplicate and again == type(first)(first.click_id, duplicate=True)
    assert not other.duplicate
    now[0] += 0.35
    later = rt.click(impression_id=imp, doc_id=7, position=1)
    assert not later.duplicate and later.click_id != first.click_id
    rt.close()
    clicks = read_log(tmp_path / "clicks", CLICK_SCHEMA)
    assert clicks.column("click_id").to_pylist() == [first.click_id, other.click_id, later.click_id]
