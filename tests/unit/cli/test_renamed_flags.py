"""Renamed flags: the old spelling works for one release, says so, and cannot be mixed with the new."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


def test_the_old_shards_flag_is_read_as_shard_urls_with_a_warning(tmp_path: Path) -> None:
    # --shard-processes refuses remote shards: proof the old flag's value arrived as --shard-urls.
    args = ["serve", "--index", str(tmp_path), "--shard-processes", "--shards", "http://127.0.0.1:1"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code != 0
    assert "--shards is deprecated" in result.output and "use --shard-urls" in result.output
    assert "leave out --shard-urls" in result.output


def test_old_and_new_names_together_are_refused(tmp_path: Path) -> None:
    args = ["serve", "--index", str(tmp_path), "--shards", "http://a", "--shard-urls", "http://b"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code != 0
    assert "give only --shard-urls" in result.output


def test_the_old_delay_flag_is_hidden_from_help() -> None:
    result = runner.invoke(app, ["crawl", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--delay-s" in result.output and "--delay " not in result.output
