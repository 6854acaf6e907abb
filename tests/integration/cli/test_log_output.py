"""``trawl`` output written to a pipe (CI, nohup, a service manager) reads line by line: no rich
bar cut at 80 columns, no sentence or URL broken across lines, progress as whole lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from cli.main import app
from core.types import DocId, Document
from retrieval.index.root import IndexRoot
from tests.fixtures.cli import REPO

BAR_GLYPHS = "━╸╺…"


def trawl_to_pipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m cli.main ARGS`` with stdout and stderr to pipes and no width given."""
    clean = {k: v for k, v in os.environ.items() if k not in {"COLUMNS", "LINES", "TERMINAL_WIDTH"}}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**clean, "HF_HUB_OFFLINE": "1", **(env or {})},
        check=False,
    )


@pytest.mark.parametrize("path", [("serve",), ("demo",), ("embed",), ("crawl",), ("run",), ("index", "gc")])
def test_help_in_a_log_cuts_no_word_url_or_example(path: tuple[str, ...]) -> None:
    command = get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    done = trawl_to_pipe(*path, "--help")
    assert done.returncode == 0, done.stderr
    shown_lines = [" ".join(line.strip(" │").split()) for line in done.stdout.splitlines()]
    shown_words = {word for line in shown_lines for word in line.split()}
    shown_params = [p for p in command.params if not getattr(p, "hidden", False)]
    described = [command.help or ""] + [p.help or "" for p in shown_params]
    words = {word for text in described for word in text.split()}
    words |= {opt for p in shown_params for opt in p.opts if opt.startswith("--")}
    assert not words - shown_words, f"cut: {sorted(words - shown_words)} in:\n{done.stdout}"
    for line in (command.help or "").splitlines():
        if line.strip().startswith("Example:"):  # commands and URLs to copy: one line each
            assert " ".join(line.split()) in shown_lines, f"{line!r} is broken in:\n{done.stdout}"


@pytest.mark.slow  # loads the embedding model in a child process
def test_embed_to_a_pipe_prints_whole_progress_lines_and_counts_that_add_up(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    docs = [
        Document(DocId(i), f"https://site.test/{i}", f"Report {i}", f"wing {i} measured at station {i % 7}")
        for i in range(40)
    ]
    # Four copies of one page (the same title and text at other URLs): one passage, encoded once.
    docs += [Document(DocId(100 + i), f"https://mirror.test/{i}", "Report 0", docs[0].body) for i in range(4)]
    root.publish(root.build(docs, shards=1))
    done = trawl_to_pipe(
        "embed", "--index", str(root.root), "--chunk-docs", "4", env={"TRAWL_EMBED__BACKEND": "torch"}
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    lines = [line for line in output.splitlines() if line.strip()]
    for line in lines:
        assert not any(glyph in line for glyph in BAR_GLYPHS), line
    progress = [line for line in lines if line.startswith("embedding: ")]
    assert progress[0] == "embedding: 0 of 40 passages (0%)"
    assert progress[-1].startswith("embedding: 40 of 40 passages (100%), ") and "done in" in progress[-1]
    assert 3 <= len(progress) <= 12, progress  # about one line per tenth, not one per report
    (summary,) = [line for line in lines if " passage vectors: " in line]
    counts = re.search(r"(\d+) passage vectors: (\d+) encoded now, (\d+) reused", summary)
    assert counts is not None, summary
    vectors, encoded, reused = map(int, counts.groups())
    assert (vectors, encoded, reused) == (44, 40, 4)  # the bar's total, and the repeats on top
    assert summary.startswith("44 documents in ")
