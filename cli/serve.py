"""``trawl serve`` (the search API and page) and ``trawl shard serve`` (one shard for a broker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from cli.console import make_console
from cli.deprecated import renamed_flag
from cli.engine import RayAddressOption
from cli.ports import bind_error, free_port, port_taken_message
from core.errors import ConfigError
from core.settings import Settings

console = make_console(stderr=True)
shard_app = typer.Typer(
    help=(
        "Run one shard as its own process.\n\n"
        "Example: trawl shard serve --index data/index --shard 0 --port 9001"
    ),
    no_args_is_help=True,
)


def check_port(host: str, port: int) -> None:
    """Raise a one-line ConfigError (exit status 2) naming a port that cannot be listened on.

    Called before anything is announced or loaded: uvicorn would only fail after the index
    had loaded and "serving at …" had been printed.
    """
    problem = bind_error(host, port)
    if problem is not None:
        raise ConfigError(port_taken_message(host, port, problem))


@contextmanager
def shard_children(index: Path, *, ready_s: float = 120.0) -> Iterator[str]:
    """One `trawl shard serve` child per shard of the serving generation, on loopback ports.

    Yields the ``--shard-urls`` spec once every child answers ``/healthz``; the children are
    stopped on exit. Each shard process runs its own Python, so first-stage search and
    shard-side features of different shards run in parallel instead of under one GIL.
    """
    import httpx

    # lazy: crawl workers import this module, and no retrieval code (tests/unit/cli/test_crawl_imports.py)
    from retrieval.index.manifest import IndexManifest
    from retrieval.index.root import resolve_index  # lazy: loads tantivy; `trawl --help` stays fast

    count = IndexManifest.load(resolve_index(index)).shards
    ports: list[int] = []
    for _ in range(count):
        ports.append(free_port(avoid=ports))
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "cli.main", "shard", "serve", "--index", str(index), "--shard", str(i)]
            + ["--port", str(port)]
        )
        for i, port in enumerate(ports)
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        deadline = time.monotonic() + ready_s
        for url, child in zip(urls, children, strict=True):
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"shard process at {url} did not start")
                time.sleep(0.3)
        yield ",".join(urls)
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(timeout=30)


def serve_command(
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8000,
    shard_urls: Annotated[
        str | None,
        typer.Option("--shard-urls", help="Remote shards: URL,URL,… (replicas of one shard joined by |)."),
    ] = None,
    old_shards: Annotated[
        str | None, typer.Option("--shards", hidden=True, help="Deprecated name of --shard-urls.")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            max=64,
            help="Worker processes (default: one per usable CPU, at most 4; one with --push-data or "
            "--shard-processes).",
        ),
    ] = None,
    shard_processes: Annotated[
        bool,
        typer.Option(
            "--shard-processes",
            help="Start one `trawl shard serve` process per shard of the index and broker over them "
            "(the recommended layout on one multi-core machine).",
        ),
    ] = False,
    push_data: Annotated[
        Path | None,
        typer.Option(
            "--push-data",
            help="Take pushed documents (PUT /v1/documents/{id}) into this data directory, the one the "
            "index is built from; the index follows it in place.",
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="Where shards run: local (this process, or --shard-processes) or ray (Ray Serve "
            "deployments, replicas placed across the cluster).",
        ),
    ] = "local",
    ray_address: RayAddressOption = None,
    ray_config: Annotated[
        Path | None,
        typer.Option(
            "--ray-config", help="With --engine ray: the TOML file of replicas and resources per shard."
        ),
    ] = None,
    replicas: Annotated[
        int | None,
        typer.Option("--replicas", min=1, max=64, help="With --engine ray: replicas of every shard."),
    ] = None,
) -> None:
    """Serve the search API and page (in-process shards, or a broker over `trawl shard serve`).

    Example: trawl serve --index data/index --port 8000   then open http://127.0.0.1:8000/
    Example: trawl serve --index data/index --shard-processes   (shards in their own processes)
    Example: trawl serve --index data/docs-index --push-data data/docs   (with api.admin_api_key set)
    Example: trawl serve --index data/index --engine ray --ray-address HEAD:6379 --ray-config cluster.toml
    """
    import uvicorn

    # lazy: crawl workers import this module, and never the api package (tests/unit/cli/test_crawl_imports.py)
    from api.workers import PARENT_ENV, WORKERS_ENV, default_workers, index_size, shared_by_workers

    settings = Settings()
    if engine not in ("local", "ray"):
        raise typer.BadParameter(f"--engine is local or ray, not {engine!r}.")
    if engine == "ray":
        if (workers or 1) > 1 or shard_processes or shard_urls or old_shards or push_data:
            raise typer.BadParameter(
                "--engine ray runs one API process over Ray Serve shards; leave out --workers, "
                "--shard-processes, --shard-urls and --push-data (scale shards with --replicas)."
            )
        serve_on_ray(index, host, port, settings, address=ray_address, config=ray_config, replicas=replicas)
        return
    if ray_address or ray_config or replicas:
        raise typer.BadParameter("--ray-address, --ray-config and --replicas go with --engine ray.")
    if push_data is not None:
        if (workers or 1) > 1 or shard_processes or shard_urls or old_shards:
            raise typer.BadParameter("--push-data needs one worker with the index in this process.")
        settings = settings.model_copy(
            update={"api": settings.api.model_copy(update={"push_data": push_data})}
        )
    shards = renamed_flag("--shards", "--shard-urls", old_shards, shard_urls)
    check_port(host, port)
    if shard_processes:
        if shards:
            raise typer.BadParameter("--shard-processes starts its own shards; leave out --shard-urls.")
        with shard_children(index) as spec:
            console.print(f"shard processes: {spec}")
            serve_command(index, host=host, port=port, shard_urls=spec, workers=workers or 1)
        return
    if shards:
        os.environ["TRAWL_SERVE_SHARDS"] = shards
    else:
        # Said here, as one line, rather than as uvicorn's "Application startup failed"
        # after a traceback (exit status 3).
        # lazy: loads tantivy; `trawl --help` stays fast
        from retrieval.index.root import resolve_index

        generation = resolve_index(index)
    if workers is None:
        workers = default_workers(
            push=push_data is not None,
            shard_processes=False,
            index_bytes=0 if shards else index_size(generation),
        )
    os.environ["TRAWL_SERVE_INDEX"] = str(index)
    processes = f" ({workers} workers)" if workers > 1 else ""
    console.print(f"Trawl is serving {index} at http://{host}:{port}/{processes}")
    from api.edge import server_options  # lazy: uvicorn's protocols; `trawl --help` stays fast

    if workers > 1:
        # Several workers: uvicorn imports the factory by name in each worker process; they
        # count into one set of metrics and share a response cache.
        os.environ[WORKERS_ENV] = str(workers)
        os.environ[PARENT_ENV] = str(os.getpid())
        # lazy: uvicorn's supervisor; `trawl --help` stays fast
        from api import socket_per_worker

        factory = "api.app:app_from_environment"
        options = {"factory": True, "host": host, "port": port, "workers": workers, **server_options()}
        with shared_by_workers():
            if socket_per_worker.available():  # connections spread over the workers (Linux)
                socket_per_worker.run(uvicorn.Config(factory, **options))
            else:
                uvicorn.run(factory, **options)
        return
    # lazy: FastAPI, tantivy and hnswlib; `trawl --help` stays fast
    from api.app import create_app

    uvicorn.run(
        create_app(settings, index_dir=index, shard_urls=shards), host=host, port=port, **server_options()
    )


def serve_on_ray(
    index: Path,
    host: str,
    port: int,
    settings: Settings,
    *,
    address: str | None,
    config: Path | None,
    replicas: int | None,
) -> None:
    """The API in this process; every shard a Ray Serve application on the cluster at ``address``."""
    import uvicorn

    check_port(host, port)
    from api.app import create_app  # lazy: tantivy and FastAPI; `trawl --help` stays fast
    from api.edge import server_options  # lazy: uvicorn's protocols
    from retrieval.ray_serve.config import load_config  # lazy: reads the index manifest
    from retrieval.ray_serve.deploy import RayShards  # lazy: Ray

    plan = load_config(config, index=index, replicas=replicas)
    shards = RayShards(plan, settings.search, address=address)
    # Joined (or a local instance started) here, on the main thread: a local instance's
    # processes die with the thread that started them (Linux's parent-death signal is per
    # thread), and the app's start-up runs in a worker thread that is retired when idle;
    # seen as every shard lost about a minute into a benchmark.
    shards.connect()
    where = address or "a local Ray instance"
    console.print(
        f"Trawl is serving {index} at http://{host}:{port}/ ({plan.shards} shards on Ray Serve, {where})"
    )
    uvicorn.run(
        create_app(settings, index_dir=index, ray_shards=shards), host=host, port=port, **server_options()
    )


@shard_app.command("scale")
def shard_scale(
    shard: Annotated[int, typer.Option("--shard", min=0, help="Which shard.")],
    replicas: Annotated[
        int, typer.Option("--replicas", min=1, max=64, help="Its replica count from now on.")
    ],
    ray_address: Annotated[
        str, typer.Option("--ray-address", help="The cluster `trawl serve --engine ray` runs on (host:port).")
    ] = "auto",
) -> None:
    """Change one shard's replica count on Ray Serve while it serves (no restart, nothing else moves).

    Example: trawl shard scale --shard 1 --replicas 3 --ray-address HEAD:6379
    """
    from retrieval.ray_serve.deploy import scale_shard  # lazy: Ray; `trawl --help` stays fast

    scale_shard(ray_address, shard, replicas)
    console.print(f"shard {shard}: {replicas} replica(s) running")


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
    """Serve one shard over HTTP for a broker (`trawl serve --shard-urls …`).

    Example: trawl shard serve --index data/index --shard 0 --port 9001
    """
    import uvicorn

    check_port(host, port)
    from api.edge import server_options  # lazy: uvicorn's protocols; `trawl --help` stays fast

    # lazy: FastAPI, tantivy and hnswlib; `trawl --help` stays fast
    from retrieval.remote.shard_http import create_shard_app

    application = create_shard_app(
        index, shard, Settings().search, delay_s=delay_ms / 1000, allow_faults=allow_faults
    )
    console.print(f"shard {shard} of {index} at http://{host}:{port}/")
    uvicorn.run(application, host=host, port=port, **server_options())
