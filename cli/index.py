"""``trawl index``: build a generation (BEIR, a crawl, WARC, JSON Lines), list, publish, roll back, gc."""

from __future__ import annotations

import datetime as dt
import time
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cli.console import make_console
from cli.embed import build_embed_publish
from cli.engine import (
    EngineOption,
    RayAddressOption,
    beir_documents,
    crawl_documents,
    job_engine,
    run_crawl_pagerank,
)
from cli.ingest import import_sources
from core.errors import ConfigError
from core.jobs import JobEngine
from core.settings import Settings

console = make_console(stderr=True)
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
        Path | None,
        typer.Option(
            "--data", help="A crawl data directory (its docstore); with --warc/--jsonl, where they go."
        ),
    ] = None,
    warc: Annotated[
        list[str] | None,
        typer.Option(
            "--warc", help="WARC/ARC files, folders or globs (.warc, .warc.gz, .arc.gz); repeatable."
        ),
    ] = None,
    jsonl: Annotated[
        list[Path] | None,
        typer.Option("--jsonl", help="JSON Lines documents (id, url, title, body, …); repeatable."),
    ] = None,
    scope: Annotated[
        str | None, typer.Option("--scope", help="With --warc: host, domain or any (default any).")
    ] = None,
    site: Annotated[
        list[str] | None, typer.Option("--site", help="With --warc and --scope: a site to keep; repeatable.")
    ] = None,
    respect_robots: Annotated[
        bool,
        typer.Option("--respect-robots", help="With --warc: drop pages the archived robots.txt disallows."),
    ] = False,
    embed: Annotated[
        bool, typer.Option("--embed", help="Embed the new generation's passages before publishing it.")
    ] = False,
    shards: Annotated[int, typer.Option("--shards", min=1, max=256, help="Document partitions.")] = 1,
    publish: Annotated[bool, typer.Option("--publish/--no-publish", help="Serve it once built.")] = True,
    engine: EngineOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Build a new generation from a BEIR corpus, a crawl, WARC archives or JSON Lines; publish it.

    --warc reads archives from any crawler (wget, Heritrix, Common Crawl, Trawl's own
    DIR/warc) through the crawler's extraction and dedup into --data DIR; a damaged record is
    counted and skipped. --jsonl reads one document a line: id, url, title, body, and optional
    headings, lang, published; other fields are kept as stored metadata.

    With --engine ray each shard is built by its own Ray task (and a crawl's PageRank runs
    on Ray too); the generation appears only when every shard succeeded.

    Example: trawl index --beir data/eval/cranfield --index data/cranfield-index --shards 2
    Example: trawl index --data data/crawl --index data/index --shards 8 --engine ray --ray-address auto
    Example: trawl index --warc archives/ --data data/imported --index data/index --embed
    Example: trawl index --jsonl docs.jsonl --data data/docs --index data/docs-index
    Then: trawl index list --index data/cranfield-index · trawl index rollback --index data/cranfield-index
    """
    if ctx.invoked_subcommand is not None:
        return
    if index is None:
        raise typer.BadParameter("--index DIR is required")
    imports = bool(warc or jsonl)
    if warc and jsonl:
        raise typer.BadParameter("give --warc or --jsonl, not both")
    if (beir is None) == (data is None):
        raise typer.BadParameter(
            "give exactly one of --beir DIR or --data DIR (--warc and --jsonl need --data)"
        )
    if imports and beir is not None:
        raise typer.BadParameter("--warc and --jsonl import into --data DIR, not --beir")
    if embed and (beir is not None or not publish):
        raise typer.BadParameter("--embed goes with --data (or --warc/--jsonl) and publishing")
    if not imports and (scope is not None or site or respect_robots):
        raise typer.BadParameter("--scope, --site and --respect-robots go with --warc")
    settings = Settings()
    job = job_engine(settings, engine, ray_address)
    # One engine session for the import, PageRank, the build and the embedding (the steps'
    # own sessions join it), so a local Ray starts once.
    with job.session():
        _index(
            settings, job, index, beir, data, warc, jsonl, scope, site, respect_robots, embed, shards, publish
        )


def _index(
    settings: Settings,
    job: JobEngine,
    index: Path,
    beir: Path | None,
    data: Path | None,
    warc: list[str] | None,
    jsonl: list[Path] | None,
    scope: str | None,
    site: list[str] | None,
    respect_robots: bool,
    embed: bool,
    shards: int,
    publish: bool,
) -> None:
    # lazy: loads tantivy; `trawl --help` stays fast
    from retrieval.index.root import IndexRoot

    imports = bool(warc or jsonl)
    if imports:
        assert data is not None
        import_sources(
            settings,
            data,
            warc=warc or [],
            jsonl=jsonl or [],
            scope=scope,
            sites=site or [],
            respect_robots=respect_robots,
            on_ray=job.is_ray,
        )
    if embed:
        assert data is not None
        build_embed_publish(settings, job, index, data, shards)
        return
    started = time.perf_counter()
    root = IndexRoot(index)
    # One writer at a time, from the build to the publish: a second build (or a `trawl run`
    # compaction) is refused with the holder's name instead of breaking this one. The engine
    # connects first, so an unreachable cluster leaves nothing on disk.
    with root.writing(wait_s=0):
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
    make_console().print(table)


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
    out = make_console()
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
