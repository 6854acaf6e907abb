"""``trawl embed``: the embeddings backfill from the command line, with a progress bar; ``trawl embed gc``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from cli.console import make_console
from cli.engine import EngineOption, RayAddressOption, crawl_documents, job_engine, run_crawl_pagerank
from cli.progress_lines import ProgressLines
from core.jobs import JobEngine
from core.settings import Settings

if TYPE_CHECKING:
    from retrieval.vectors.backfill import BackfillReport

console = make_console(stderr=True)
embed_app = typer.Typer(
    invoke_without_command=True,
    no_args_is_help=False,
)


class RateColumn(ProgressColumn):
    """Passages per second, as rich measures it over the last updates."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} passages/s" if speed else "… passages/s", style="progress.data.speed")


@contextmanager
def passage_progress(out: Console, label: str = "embedding") -> Iterator[Callable[[int, int], None]]:
    """A terminal bar for a backfill: passages done of total, rate, time left.

    Yields the ``on_progress(done, total)`` callback to pass to the backfill. When ``out``
    is not a terminal (a log), whole lines now and then instead (``cli.progress_lines``).
    """
    if not out.is_terminal:
        yield ProgressLines(lambda line: out.print(line, markup=False, highlight=False), label, "passages")
        return
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("passages"),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=out,
    ) as progress:
        task = progress.add_task(label, total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield on_progress


def vector_counts(report: BackfillReport) -> str:
    """The passage vectors a backfill left, as the sum of the passages it encoded and reused.

    Its progress counts the distinct passages it encodes; the index holds one vector per
    passage of each document, so a passage repeated in several documents (a footer, a
    notice) is encoded once and reused, as are the vectors already in the store.
    """
    reused = report.rows - report.encoded  # report.linked, said so that the sum always holds
    return (
        f"{report.rows:,} passage vectors: {report.encoded:,} encoded now, {reused:,} reused "
        "(already in the vector store, or repeated in another document)"
    )


@embed_app.callback()
def embed_command(
    ctx: typer.Context,
    index: Annotated[
        Path | None,
        typer.Option("--index", help="An index directory (a generation or an index root)."),
    ] = None,
    beir: Annotated[
        Path | None,
        typer.Option("--beir", help="A BEIR collection: embeds its cached evaluation index."),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="A crawl data directory: index its docstore into a new generation of --index, "
            "embed it, publish it.",
        ),
    ] = None,
    shards: Annotated[int, typer.Option("--shards", min=1, max=256, help="Partitions (with --data).")] = 1,
    chunk_docs: Annotated[
        int | None, typer.Option("--chunk-docs", min=1, help="Documents per committed segment.")
    ] = None,
    engine: EngineOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Give every indexed passage a vector for the current embedding model (resumable).

    Vectors are kept by passage hash in the index root (ROOT/vectors/), so a new
    generation encodes only passages that are new or changed; the rest are linked.
    Killed midway, it resumes from its last committed segment.

    --data DIR --index ROOT builds a generation from the crawl's docstore (as
    `trawl index --data` does), embeds it and publishes it only once it has vectors,
    so the serving generation never loses its vector search.

    With --engine ray the passages to encode stream through Ray Data to a pool of encoder
    actors (one per CPU of the cluster; the same encoder, so the same vectors), and this
    process writes them to the same store, just as resumably.

    Example: trawl embed --index data/index
    Example: trawl embed --index data/index --engine ray --ray-address auto
    Example: trawl embed --data data/demo/crawl --index data/demo/index
    Then: trawl embed gc --index data/demo/index
    """
    if ctx.invoked_subcommand is not None:
        return
    if sum(x is not None for x in (index, beir)) != 1:
        raise typer.BadParameter("give exactly one of --index DIR or --beir DIR (with --data: --index ROOT)")
    settings = Settings()
    job = job_engine(settings, engine, ray_address)
    with job.session():
        _embed(settings, job, index, beir, data, shards, chunk_docs)


def build_embed_publish(settings: Settings, job: JobEngine, index: Path, data: Path, shards: int) -> None:
    """``trawl embed --data DIR --index ROOT``: a generation from the docstore, embedded, then published."""
    _embed(settings, job, index, None, data, shards, None)


def _embed(
    settings: Settings,
    job: JobEngine,
    index: Path | None,
    beir: Path | None,
    data: Path | None,
    shards: int,
    chunk_docs: int | None,
) -> None:
    # lazy: retrieval code (tantivy, hnswlib); `trawl --help` and crawl workers stay light
    from retrieval.index.root import IndexRoot, resolve_index
    from retrieval.vectors.backfill import backfill_index, collect_garbage  # lazy: as above
    from retrieval.vectors.embed import Embedder  # lazy: as above

    root: IndexRoot | None = None
    generation = ""
    if beir is not None:
        if data is not None:
            raise typer.BadParameter("--data goes with --index ROOT, not --beir")
        # lazy: training code (tantivy); `trawl --help` and crawl workers stay light
        from training.datasets import BeirDataset
        from training.eval_index import cached_index  # lazy: as above

        target, _ = cached_index(BeirDataset.open(beir), settings)
    elif data is not None:
        assert index is not None
        root = IndexRoot(index)
        run_crawl_pagerank(data, job.is_ray, settings)
        with console.status("indexing…") as status:
            progress = lambda n: status.update(f"indexing… {n:,} documents")  # noqa: E731
            if job.is_ray:
                # lazy: loads tantivy and hnswlib; `trawl --help` stays fast
                from retrieval.batch.ray_jobs import ray_build_generation

                generation = ray_build_generation(
                    root,
                    partial(crawl_documents, data),
                    shards=shards,
                    source_name=f"crawl:{data}",
                    on_progress=progress,
                )
            else:
                generation = root.build(
                    crawl_documents(data), shards=shards, source=f"crawl:{data}", on_progress=progress
                )
        target = root.path_of(generation)
        console.print(f"built generation {generation} from {data}")
    else:
        assert index is not None
        target = resolve_index(index)
    with console.status("loading the embedding model…"):
        embedder = Embedder.from_settings(settings.embed)
    model = f"{embedder.model_id} ({embedder.backend} {embedder.precision} on {embedder.device})"
    console.print(f"model {model} → {target} on {job.engine}")
    encode = None
    if job.is_ray:
        # lazy: loads tantivy and hnswlib; `trawl --help` stays fast
        from retrieval.batch.ray_jobs import ray_encoder

        encode = ray_encoder(
            settings.embed, actors=settings.jobs.embed_actors, threads=settings.jobs.actor_threads
        )
    with passage_progress(console) as on_progress:
        report = backfill_index(
            target, embedder, settings.embed, chunk_docs=chunk_docs, on_progress=on_progress, encode=encode
        )
    console.print(
        f"{report.docs:,} documents in {report.version} ({report.seconds:.1f} s): {vector_counts(report)}"
    )
    if root is not None:
        root.publish(generation)
        console.print(f"published {generation}")
        for gc in collect_garbage(root.root):
            if gc.dropped:
                console.print(f"vector store: dropped {gc.dropped:,} unused vectors, kept {gc.kept:,}")


@embed_app.command("gc")
def embed_gc(index: Annotated[Path, typer.Option("--index", help="Index root (or a bare index).")]) -> None:
    """Drop stored vectors that no generation of the index root uses any more.

    Every complete generation under the root is retained; run it after deleting old ones.

    Example: trawl embed gc --index data/index
    """
    # lazy: loads tantivy and hnswlib; `trawl --help` stays fast
    from retrieval.vectors.backfill import collect_garbage

    reports = collect_garbage(index)
    if not reports:
        console.print(f"{index} has no vector store")
    for report in reports:
        console.print(f"{report.model_id}: kept {report.kept:,} vectors, dropped {report.dropped:,}")
