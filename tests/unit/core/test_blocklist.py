"""core.blocklist: the rules file is looked at once per interval, and its own edits show at once."""

from __future__ import annotations

from pathlib import Path

from core.blocklist import BlockList


def test_another_writers_rule_shows_after_the_interval_and_own_edits_at_once(tmp_path: Path) -> None:
    path = tmp_path / "blocklist.json"
    crawler = BlockList(path, check_interval_s=3600)
    assert crawler.match("http://spam.example/x") is None
    BlockList(path).add("host", "spam.example", reason="test")  # another process, say
    assert crawler.match("http://spam.example/x") is None  # not looked at again yet
    assert BlockList(path, check_interval_s=0).match("http://spam.example/x") is not None
    crawler.add("pattern", "http://other.example/*", reason="own")
    assert crawler.match("http://other.example/a") is not None
    assert crawler.match("http://spam.example/x") is not None  # re-read with its own edit
    assert crawler.remove("spam.example")
    assert crawler.match("http://spam.example/x") is None
