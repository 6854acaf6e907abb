"""``trawl replay``: run one URL's stored raw response through parse, extract and dedup again."""

from __future__ import annotations

import difflib
import json
import textwrap
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from cli.console import make_console
from core.settings import Settings
from core.types import Document
from crawl.run.reprocess import replay

_FIELDS = ("title", "description", "lang", "headings", "body", "outlinks")


def replay_command(
    url: Annotated[str, typer.Argument(help="A URL the crawl fetched.")],
    data: Annotated[Path, typer.Option("--data", help="Crawl data directory (warc/ and docs/ are read).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print both documents as JSON on stdout.")] = False,
) -> None:
    """Show the document a stored response yields now, beside the stored one, as a diff.

    Nothing is fetched or written: the raw response kept in WARC goes through today's
    parse and extract; lines starting with - are the stored document, + the replayed one.

    Example: trawl replay http://127.0.0.1:8099/library/asyncio-eventloop.html --data data/demo/crawl
    """
    derived, stored = replay(url, data, Settings().crawl)
    if derived is None:
        raise typer.BadParameter(f"{url} has no stored response in {data}/warc.", param_hint="URL")
    if json_out:
        payload: dict[str, object] = {"outcome": derived.outcome, "dup_of": derived.dup_of}
        payload |= {"replayed": _fields(derived.document), "stored": _fields(stored)}
        typer.echo(json.dumps(payload))
        return
    out = make_console()
    out.print(
        Text(f"replay {derived.url}: {derived.outcome}" + (f" of {derived.dup_of}" if derived.dup_of else ""))
    )
    before, after = _lines(stored), _lines(derived.document)
    if before == after:
        out.print(Text("The replayed document equals the stored one."))
        return
    for line in difflib.unified_diff(before, after, "stored", "replayed", lineterm="", n=1):
        style = (
            "red"
            if line.startswith("-")
            else "green"
            if line.startswith("+")
            else "cyan"
            if line.startswith("@")
            else ""
        )
        out.print(Text(line, style=style), highlight=False, soft_wrap=True)


def _fields(doc: Document | None) -> dict[str, object] | None:
    return None if doc is None else {name: getattr(doc, name) for name in _FIELDS}


def _lines(doc: Document | None) -> list[str]:
    """A document as labelled lines (the body wrapped) so a diff points at what changed."""
    if doc is None:
        return []
    lines: list[str] = []
    for name in _FIELDS:
        value = getattr(doc, name)
        if isinstance(value, tuple):
            lines += [f"{name}: {item}" for item in value]
        elif name == "body":
            lines += [f"body: {piece}" for piece in textwrap.wrap(value, 100)]
        else:
            lines.append(f"{name}: {value}")
    return lines
