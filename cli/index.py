"""``trawl index``: build a generation (from a BEIR corpus or a crawl), list, publish, roll back, gc."""

from __future__ import annotations

import datetime as dt
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from cli.engine import EngineOption, RayAddressOption, beir_documents, crawl_documents, job_engine
from core.errors import ConfigError
from core.settings import Settings

if TYPE_CHECKING:
    from training.pagerank import CrawlPageRank

console = Console(stderr=True)
index_app = typer.Typer(
    help=(
        "Build index generations and choose which one serves.\n\n"
        "Example: trawl index --data data/demo/crawl --index data/demo/index"
    ),
    invoke_without_command=True,
    no_args_is_help=False,
)


@index_app.callback()
def index_command(
    ctx: typer.Context,
    index: Annotated[Path | None, typer.Option("--index", help="Index root (generations + CURRENT).")] = None,
    beir: Annotated[Path | None, typer.Option("--beir", help="A BEIR collection (corpus.jsonl).")] = None,
    data: Annotated[
        Path | None, typer.Option("--data", help="A crawl data directory (its docstore).")
    ] = None,
    shards: Annotated[int, typer.Option("--shards", min=1, max=256, help="Document partitions.")] = 1,
    publish: Annotated[bool, typer.Option("--publish/--no-publish", help="Serve it once built.")] = True,
    engine: EngineOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Build a new generation from a BEIR corpus or a crawl's docstore, and publish it.

    With --engine ray each shard is built by its own Ray task (and a crawl's PageRank runs
    on Ray too); the generation appears only when every shard succeeded.

    Example: trawl index --beir data/eval/cranfield --index data/cranfield-index --shards 2
    Example: trawl index --data data/crawl --index data/index --shards 8 --engine ray --ray-address auto
    Then: trawl index list --index data/cranfield-index · trawl index rollback --index data/cranfield-index
    """
    if ctx.invoked_subcommand is not None:
        return
    # lazy: loads tantivy; `trawl --help` stays fast
    from retrieval.index.root import IndexRoot

    if index is None:
        raise typer.BadParameter("--index DIR is required")
    if (beir is None) == (data is None):
        raise typer.BadParameter("give exactly one of --beir DIR or --data DIR")
    settings = Settings()
    job = job_engine(settings, engine, ray_address)
    started = time.perf_counter()
    root = IndexRoot(index)
    # One writer at a time, from the build to the publish: a second build (or a `trawl run`
    # compaction) is refused with the holder's name instead of breaking this one. The engine
    # connects first, so an unreachable cluster leaves nothing on disk.
    with job.session(), root.writing(wait_s=0):
        if beir is not None:
            source = partial(beir_documents, beir)
            source_name = f"beir:{beir}"
        else:
            assert data is not None
            source = partial(crawl_documents, data)
            source_name = f"crawl:{data}"
            run_crawl_pagerank(data, job.is_ray, settings)
        with console.status(f"indexing ({job.engine})…") as status:
            progress = lambda n: status.update(f"indexing ({job.engine})… {n:,} documents")  # noqa: E731
            if job.is_ray:
                # lazy: loads tantivy and hnswlib; `trawl --help` stays fast
                from retrieval.batch.ray_jobs import ray_build_generation

                generation = ray_build_generation(
                    root, source, shards=shards, source_name=source_name, on_progress=progress
                )
            else:
                generation = root.build(source(), shards=shards, source=source_name, on_progress=progress)
        info = next(g for g in root.list() if g.generation == generation)
        console.print(
            f"built generation {generation}: {info.manifest.docs:,} documents, {shards} shard(s) "
            f"on {job.engine} in {time.perf_counter() - started:.1f} s"
        )
        if publish:
            root.publish(generation)
            console.print(f"published {generation} (serving processes pick it up on their next query)")


def run_crawl_pagerank(data: Path, on_ray: bool, settings: Settings) -> CrawlPageRank | None:
    """The crawl's link-graph job (page and host PageRank beside the docstore), here or on the
    connected Ray; None when the crawl has no links."""
    # lazy: loads polars and scipy; `trawl --help` stays fast
    from training.pagerank import crawl_pagerank

    with console.status("PageRank…") as status:
        rank = None
        if on_ray:
            # lazy: loads polars and scipy; `trawl --help` stays fast
            from training.ray_training import ray_rank

            rank = ray_rank(
                blocks=settings.jobs.pagerank_blocks,
                on_iteration=lambda i, change: status.update(
                    f"PageRank on ray… iteration {i}, L1 change {change:.1e}"
                ),
            )
        return crawl_pagerank(data, rank=rank)


@index_app.command("list")
def index_list(index: Annotated[Path, typer.Option("--index", help="Index root.")]) -> None:
    """List the generations of an index root; the serving one is marked.

    Example: trawl index list --index data/index
    """
    # lazy: loads tantivy; `trawl --help` stays fast
    from retrieval.index.root import IndexRoot

    if not index.is_dir():  # an empty table for a mistyped path read as "no generations yet"
        raise ConfigError(
            f"{index} is not an index root (no such directory); "
            f"build one with `trawl index --data DIR --index {index}`."
        )
    table = Table(title=str(index))
    for column in ("", "generation", "documents", "shards", "built", "source"):
        table.add_column(column)
    for g in IndexRoot(index).list():
        built = dt.datetime.fromtimestamp(g.manifest.built_at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(
            "*" if g.current else "",
            g.generation,
            f"{g.manifest.docs:,}",
            str(g.manifest.shards),
            built,
            g.manifest.source,
        )
    Console().print(table)


@index_app.command("publish")
def index_publish(
    generation: Annotated[str, typer.Argument(help="Generation id (see `trawl index list`).")],
    index: Annotated[Path, typer.Option("--index", help="Index root.")],
) -> None:
    """Make a generation the serving one (atomic).

    Example: trawl index publish g20261130T114100-a1b2c3 --index data/index
    """
    # lazy: loads tantivy; `trawl --help` stays fast
    from retrieval.index.root import IndexRoot

    IndexRoot(index, lock_wait_s=Settings().index.lock_wait_s).publish(generation)
    console.print(f"published {generation}")


@index_app.command("rollback")
def index_rollback(index: Annotated[Path, typer.Option("--index", help="Index root.")]) -> None:
    """Serve the generation that served before the current one.

    Example: trawl index rollback --index data/index
    """
    # lazy: loads tantivy; `trawl --help` stays fast
    from retrieval.index.root import IndexRoot

    root = IndexRoot(index, lock_wait_s=Settings().index.lock_wait_s)
    console.print(f"rolled back to {root.rollback()}")


@index_app.command("gc")
def index_gc(
    index: Annotated[Path, typer.Option("--index", help="Index root.")],
    keep: Annotated[
        int | None,
        typer.Option(
            "--keep", min=0, help="Generations kept for rollback (default: index.keep_generations)."
        ),
    ] = None,
) -> None:
    """Remove old generations: all but the serving one, the KEEP that served before it, one
    built but not yet published, and any a serving process has open (cursors on it).

    Example: trawl index gc --index data/index
    """
    # lazy: loads tantivy; `trawl --help` stays fast
    from retrieval.index.retention import collect, human_bytes
    from retrieval.index.root import IndexRoot  # lazy: as above

    if not index.is_dir():
        raise ConfigError(f"{index} is not an index root (no such directory).")
    settings = Settings().index
    report = collect(
        IndexRoot(index, lock_wait_s=settings.lock_wait_s),
        settings.keep_generations if keep is None else keep,
    )
    out = Console()
    for removed in report.removed:
        out.print(f"removed {removed.name}  {human_bytes(removed.bytes)}  ({removed.why})")
    for generation, why in sorted(report.kept.items()):
        out.print(f"kept    {generation}  ({why})")
    if report.vector_bytes:
        out.print(f"vector store: {human_bytes(report.vector_bytes)} of vectors no kept generation uses")
    out.print(f"freed {human_bytes(report.freed)} ({report.freed:,} bytes)")


@index_app.command("verify")
def index_verify(
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    generation: Annotated[
        str | None, typer.Argument(help="Generation id (default: every generation of the root).")
    ] = None,
) -> None:
    """Check every file of a generation against its recorded size and checksum.

    Prints each damaged file (generation, shard, path, what differs) and exits 1 if any is.

    Example: trawl index verify --index data/index
    Example: trawl index verify g20261130T114100-a1b2c3 --index data/index
    """
    # lazy: crawl workers load no retrieval code (tests/unit/cli/test_crawl_imports.py)
    from retrieval.index import integrity, layout, manifest
    from retrieval.index.root import IndexRoot  # lazy: loads tantivy; `trawl --help` stays fast

    if layout.is_index(index):
        targets = [index]
    elif generation is not None:
        targets = [IndexRoot(index).path_of(generation)]
    else:
        gens = layout.generations_dir(index)
        targets = sorted(p for p in gens.iterdir() if layout.is_index(p)) if gens.is_dir() else []
        if not targets:
            raise ConfigError(f"{index} holds no generations; build one with `trawl index --index {index}`.")
    serving = manifest.read_pointer(layout.current_pointer(index))
    damaged = 0
    for path in targets:
        name = path.name + (" (serving)" if path.name == serving else "")
        damage = integrity.check_generation(path, content=True, writer_files=True)
        for d in damage:
            typer.echo(f"damaged: generation {path.name}, {d}")
        damaged += len(damage)
        if damage:
            console.print(f"{name}: {len(damage)} damaged file(s)", markup=False)
        elif not integrity.is_checksummed(path):
            console.print(f"{name}: built before checksums: no sizes or hashes to compare with", markup=False)
        else:
            console.print(f"{name}: ok", markup=False)
    if damaged:
        console.print(
            f"{damaged} damaged file(s): rebuild the generation (`trawl index`) or publish another.",
            markup=False,
        )
        raise typer.Exit(1)
