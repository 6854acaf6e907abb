"""The ``trawl`` command line. The only module (with its ``cli_*`` siblings) that prints."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer
from rich.console import Console
from rich.table import Table

from core.errors import TrawlError
from core.logging import configure_logging
from core.settings import Settings

app = typer.Typer(
    name="trawl",
    help="Trawl: crawl, index, evaluate and serve a web search engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)


def _settings() -> Settings:
    return Settings()


@app.callback()
def _main(
    log_level: Annotated[str, typer.Option("--log-level", help="DEBUG, INFO, WARNING or ERROR.")] = "WARNING",
) -> None:
    configure_logging(log_level)


index_app = typer.Typer(
    help="Build index generations and choose which one serves.",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(index_app, name="index")


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
) -> None:
    """Build a new generation from a BEIR corpus or a crawl's docstore, and publish it.

    Example: trawl index --beir ../shared/data/eval/cranfield --index data/cranfield-index --shards 2
    Then: trawl index list --index data/cranfield-index · trawl index rollback --index data/cranfield-index
    """
    if ctx.invoked_subcommand is not None:
        return
    from retrieval.manifest import IndexRoot

    if index is None:
        raise typer.BadParameter("--index DIR is required")
    if (beir is None) == (data is None):
        raise typer.BadParameter("give exactly one of --beir DIR or --data DIR")
    if beir is not None:
        from training.datasets import BeirDataset

        docs = BeirDataset.open(beir).iter_documents()
        source = f"beir:{beir}"
    else:
        from retrieval.docs_source import crawled_documents

        assert data is not None
        compute_pagerank(data)
        docs = crawled_documents(data)
        source = f"crawl:{data}"
    root = IndexRoot(index)
    with console.status("indexing…") as status:
        generation = root.build(
            docs,
            shards=shards,
            source=source,
            on_progress=lambda n: status.update(f"indexing… {n:,} documents"),
        )
    info = next(g for g in root.list() if g.generation == generation)
    console.print(f"built generation {generation}: {info.manifest.docs:,} documents, {shards} shard(s)")
    if publish:
        root.publish(generation)
        console.print(f"published {generation} (serving processes pick it up on their next query)")


def compute_pagerank(data: Path) -> None:
    """The link-graph job: PageRank of the crawl's pages, written beside the docstore."""
    from core.linkgraph import LinkGraphStore
    from retrieval.docs_source import PAGERANK_FILE
    from training.linkgraph import url_pagerank, write_pagerank

    if not (data / "links").exists():
        return
    edges = LinkGraphStore(data / "links").read_edges()
    if not edges.is_empty():
        with console.status("PageRank…"):
            write_pagerank(url_pagerank(edges), data / PAGERANK_FILE)


@index_app.command("list")
def index_list(index: Annotated[Path, typer.Option("--index", help="Index root.")]) -> None:
    """List the generations of an index root; the serving one is marked.

    Example: trawl index list --index data/index
    """
    from retrieval.manifest import IndexRoot

    table = Table(title=str(index))
    for column in ("", "generation", "documents", "shards", "built", "source"):
        table.add_column(column)
    import datetime as dt

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
    from retrieval.manifest import IndexRoot

    IndexRoot(index).publish(generation)
    console.print(f"published {generation}")


@index_app.command("rollback")
def index_rollback(index: Annotated[Path, typer.Option("--index", help="Index root.")]) -> None:
    """Serve the generation that served before the current one.

    Example: trawl index rollback --index data/index
    """
    from retrieval.manifest import IndexRoot

    console.print(f"rolled back to {IndexRoot(index).rollback()}")


@app.command("eval")
def eval_command(
    dataset: Annotated[Path, typer.Option("--dataset", help="A BEIR collection directory.")],
    ranker: Annotated[str, typer.Option("--ranker", help="bm25, dense, hybrid-rrf, hybrid, ltr, …")] = "bm25",
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")] = False,
    model: Annotated[Path | None, typer.Option("--model", help="A trained model directory (ltr).")] = None,
    folds: Annotated[int, typer.Option("--folds", min=2, max=20, help="Cross-validation folds.")] = 5,
) -> None:
    """Evaluate a ranker on every judged query of a collection (nDCG@10, MAP, Recall@100, MRR@10).

    Example: trawl eval --dataset ../shared/data/eval/cisi --ranker bm25 --json
    """
    from training.evaluate import evaluate

    options = {"model": str(model)} if model else {}
    result = evaluate(dataset, ranker, settings=_settings(), options=options, folds=folds)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
        return
    table = Table(title=f"{result.dataset} · {result.ranker} · {result.queries} queries")
    for name in ("nDCG@10", "MAP", "Recall@100", "MRR@10"):
        table.add_column(name, justify="right")
    table.add_row(*(f"{result.means[m]:.4f}" for m in ("ndcg@10", "map", "recall@100", "mrr@10")))
    Console().print(table)
    for key, value in result.extra.items():
        Console().print(f"{key}: {value}")


@app.command("search")
def search_command(
    query: Annotated[
        str, typer.Argument(help='The query, with operators: "phrase" -term site: lang: filetype:')
    ],
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    page: Annotated[int, typer.Option("--page", min=1)] = 1,
    size: Annotated[int, typer.Option("--size", min=1)] = 10,
    ranker: Annotated[
        str | None, typer.Option("--ranker", help="bm25, hybrid-rrf, hybrid, ltr (default: best)")
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show why each result ranks where it does.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Search an index from the terminal.

    Example: trawl search '"list comprehension" -lambda' --index data/index --ranker ltr --explain
    """
    from api.app import _extra_stages, _load_encoder
    from retrieval.search import SearchService

    settings = _settings()
    service = SearchService.open(index, settings.search, stages=_extra_stages(settings))
    _load_encoder(settings, service)
    response = service.search(query, page=page, size=size, ranker=ranker, explain=explain)
    if as_json:
        from api.schemas import SearchResponseModel

        sys.stdout.write(SearchResponseModel.from_domain(response).model_dump_json() + "\n")
        return
    out = Console()
    out.print(
        f"{response.total:,} results · {response.took_ms:.1f} ms · {response.ranker} · {response.generation}"
    )
    for rank, hit in enumerate(response.hits, start=response.size * (response.page - 1) + 1):
        out.print(f"[bold]{rank}. {hit.title}[/bold]  ({hit.score:.3f})", markup=True, highlight=False)
        out.print(f"   {hit.url}\n   {hit.snippet}", markup=False, highlight=False)
        if explain and hit.explain:
            out.print("   " + json.dumps(hit.explain, default=str), markup=False, highlight=False)


@app.command("serve")
def serve_command(
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8000,
    shards: Annotated[
        str | None,
        typer.Option("--shards", help="Remote shards: URL,URL,… (replicas of one shard joined by |)."),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Worker processes.")] = 1,
) -> None:
    """Serve the search API and page (in-process shards, or a broker over `trawl shard serve`).

    Example: trawl serve --index data/index --port 8000   then open http://127.0.0.1:8000/
    """
    import uvicorn

    settings = _settings()
    if shards:
        os.environ["TRAWL_SERVE_SHARDS"] = shards
    os.environ["TRAWL_SERVE_INDEX"] = str(index)
    console.print(f"Trawl is serving {index} at http://{host}:{port}/")
    if workers > 1:
        uvicorn.run(
            "api.app:app_from_environment",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
        )
        return
    from api.app import create_app

    uvicorn.run(
        create_app(settings, index_dir=index, shard_urls=shards), host=host, port=port, log_level="warning"
    )


shard_app = typer.Typer(help="Run one shard as its own process.", no_args_is_help=True)
app.add_typer(shard_app, name="shard")


@shard_app.command("serve")
def shard_serve(
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    shard: Annotated[int, typer.Option("--shard", min=0, help="Which shard of the generation.")],
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 9001,
    delay_ms: Annotated[
        float, typer.Option("--delay-ms", min=0, help="Slow every answer (fault drills).")
    ] = 0.0,
    allow_faults: Annotated[
        bool, typer.Option("--allow-fault-injection", help="Enable POST /shard/fault (drills, tests).")
    ] = False,
) -> None:
    """Serve one shard over HTTP for a broker (`trawl serve --shards …`).

    Example: trawl shard serve --index data/index --shard 0 --port 9001
    """
    import uvicorn

    from retrieval.shard_http import create_shard_app

    settings = _settings()
    application = create_shard_app(
        index, shard, settings.search, delay_s=delay_ms / 1000, allow_faults=allow_faults
    )
    console.print(f"shard {shard} of {index} at http://{host}:{port}/")
    uvicorn.run(application, host=host, port=port, log_level="warning")


def _register_plugins() -> None:
    """Commands that live beside this module (crawl, embed, train, …) once their issue lands."""
    import importlib

    for module in ("api.cli_crawl", "api.cli_embed", "api.cli_train", "api.cli_demo", "api.cli_experiment"):
        try:
            importlib.import_module(module).register(app)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


_register_plugins()


def main() -> None:
    try:
        app()
    except TrawlError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
