"""``trawl reprocess``: rebuild a crawl's documents and link graph from its WARC files, no fetching."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cli.console import make_console
from core.settings import Settings
from crawl.run.reprocess import reprocess


def reprocess_command(
    data: Annotated[Path, typer.Option("--data", help="Crawl data directory (its warc/ is read).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
) -> None:
    """Re-derive DIR/docs and DIR/links from the stored raw responses, without fetching anything.

    Use it after an extraction or dedup change; then rebuild the index (`trawl index --data DIR`).

    Example: trawl reprocess --data data/demo/crawl
    """
    summary = reprocess(data, Settings().crawl)
    if json_out:
        typer.echo(json.dumps({"responses": summary.responses, "documents": summary.documents,
                               "edges": summary.edges, "outcomes": summary.outcomes}))  # fmt: skip
        return
    outcomes = ", ".join(f"{n:,} {name}" for name, n in sorted(summary.outcomes.items()))
    make_console().print(
        f"Reprocessed {summary.responses:,} stored responses ({outcomes}): "
        f"{summary.documents:,} documents, {summary.edges:,} link edges in {data}.",
        markup=False,
        highlight=False,
    )
