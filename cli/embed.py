"""``trawl embed``: the embeddings backfill from the command line, with a progress bar."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from core.settings import Settings


def embed_command(
    index: Annotated[
        Path | None, typer.Option("--index", help="An index directory (a generation or an index root).")
    ] = None,
    beir: Annotated[
        Path | None,
        typer.Option("--beir", help="A BEIR collection: embeds its cached evaluation index."),
    ] = None,
    chunk_docs: Annotated[
        int | None, typer.Option("--chunk-docs", min=1, help="Documents per checkpointed chunk.")
    ] = None,
) -> None:
    """Give every indexed document a vector for the current embedding model (resumable).

    Killed midway, it resumes from its last checkpoint; run again after new documents
    are indexed and only those are embedded.

    Example: trawl embed --index data/index
    """
    from retrieval.backfill import backfill_index
    from retrieval.embed import Embedder
    from retrieval.manifest import resolve_index

    if (index is None) == (beir is None):
        raise typer.BadParameter("give exactly one of --index DIR or --beir DIR")
    settings = Settings()
    console = Console(stderr=True)
    if beir is not None:
        from training.datasets import BeirDataset
        from training.evaluate import cached_index

        target, _ = cached_index(BeirDataset.open(beir), settings)
    else:
        assert index is not None
        target = resolve_index(index)
    with console.status("loading the embedding model…"):
        embedder = Embedder.from_settings(settings.embed)
    console.print(f"model {embedder.model_id} ({embedder.precision}) → {target}")
    with Progress(
        TextColumn("embedding"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("embed", total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = backfill_index(
            target, embedder, settings.embed, chunk_docs=chunk_docs, on_progress=on_progress
        )
    console.print(
        f"{report.docs:,} documents, {report.embedded:,} embedded now, "
        f"{report.rows:,} passage vectors in {report.version} ({report.seconds:.1f} s)"
    )
