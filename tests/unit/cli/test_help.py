"""Every ``trawl`` help screen has an example, describes every option, and shows no ``<bool>``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(get_command(app)))


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "trawl")
def test_help_has_an_example_and_no_bool_placeholder(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert "<bool>" not in result.output


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "trawl" for p, _ in COMMANDS])
def test_every_option_is_described(path: tuple[str, ...], command: Any) -> None:
    undocumented = [p.opts for p in command.params if p.param_type_name == "option" and not p.help]
    assert not undocumented


def test_command_list_shows_whole_sentences() -> None:
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    inspect_line = next(line for line in result.output.splitlines() if " inspect " in line)
    assert "Explain what the crawl knows about one URL." in inspect_line


def test_inspect_names_a_missing_data_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    result = runner.invoke(app, ["inspect", "http://127.0.0.1:8099/", "--data", str(missing)])
    assert result.exit_code != 0
    assert str(missing) in str(result.exception) + result.output
