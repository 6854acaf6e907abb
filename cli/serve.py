"""``trawl serve`` (the search API and page) and ``trawl shard serve`` (one shard for a broker)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from core.settings import Settings

console = Console(stderr=True)
shard_app = typer.Typer(
    help="Run one shard as its own process.\n\nExample: trawl shard serve --index data/index --shard 0 --port 9001",
    no_args_is_help=True,
)


def serve_command(
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8000,
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

    settings = Settings()
    if shards:
        os.environ["TRAWL_SERVE_SHARDS"] = shards
    os.environ["TRAWL_SERVE_INDEX"] = str(index)
    console.print(f"Trawl is serving {index} at http://{host}:{port}/")
    if workers > 1:
        # Several workers: uvicorn imports the factory by name in each worker process.
        uvicorn.run(
            "api.app:app_from_environment",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            proxy_headers=False,  # api.protection reads X-Forwarded-For from trusted proxies only
        )
        return
    from api.app import create_app

    uvicorn.run(
        create_app(settings, index_dir=index, shard_urls=shards),
        host=host,
        port=port,
        log_level="warning",
        proxy_headers=False,  # api.protection reads X-Forwarded-For from trusted proxies only
    )


@shard_app.command("serve")
def shard_serve(
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    shard: Annotated[int, typer.Option("--shard", min=0, help="Which shard of the generation.")],
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 9001,
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

    application = create_shard_app(
        index, shard, Settings().search, delay_s=delay_ms / 1000, allow_faults=allow_faults
    )
    console.print(f"shard {shard} of {index} at http://{host}:{port}/")
    uvicorn.run(application, host=host, port=port, log_level="warning")
