"""``trawl run``: crawl continuously while the index follows the docstore, until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from cli.console import make_console
from cli.deprecated import renamed_flag
from core.crawldir import CrawlDir
from core.errors import DirectoryBusy
from core.settings import CrawlSettings, Settings
from crawl.run.continuous import ContinuousCrawl

console = make_console(stderr=True)


def run_command(
    seeds: Annotated[list[str], typer.Argument(help="Start URLs (the crawl's scope follows them).")],
    data: Annotated[Path, typer.Option("--data", help="Crawl data directory (created; resumed if present).")],
    index: Annotated[Path, typer.Option("--index", help="Index root the serving generation lives in.")],
    shards: Annotated[int, typer.Option("--shards", min=1, max=256, help="Shards of a new base.")] = 1,
    poll_s: Annotated[
        float, typer.Option("--poll-s", min=0.05, help="Seconds between index steps (bounds the lag).")
    ] = 1.0,
    compact_every_s: Annotated[
        float, typer.Option("--compact-every-s", min=0, help="Seconds between compactions (0: never).")
    ] = 3600.0,
    allow_loopback: Annotated[
        bool, typer.Option("--allow-loopback", help="Allow loopback addresses (local sites, tests).")
    ] = False,
    delay_s: Annotated[
        float | None, typer.Option("--delay-s", min=0, help="Minimum seconds between requests to a host.")
    ] = None,
    old_delay: Annotated[
        float | None, typer.Option("--delay", min=0, hidden=True, help="Deprecated name of --delay-s.")
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=0, help="Serve freshness metrics (Prometheus) on 127.0.0.1:PORT."),
    ] = None,
) -> None:
    """Crawl new URLs and due recrawls without end while an incremental indexer applies every
    crawl batch to the serving generation. SIGINT/SIGTERM stop gracefully; after SIGKILL
    a restart resumes both where they were.

    Example: trawl run http://127.0.0.1:8000/ --data data/crawl --index data/index --allow-loopback

    With --metrics-port: trawl_crawl_to_searchable_seconds (histogram), trawl_unindexed_backlog,
    trawl_deletions_applied_total.
    """
    settings = Settings()
    updates: dict[str, object] = {}
    if allow_loopback:
        updates["allow_loopback"] = True
    delay = renamed_flag("--delay", "--delay-s", old_delay, delay_s)
    if delay is not None:
        updates["min_delay_s"] = delay
    crawl_settings = settings.crawl.model_copy(update=updates)
    # Refused here, naming the holder, before the indexer starts, when another crawl writes
    # this directory; held to the end (the crawl's rounds take it again, re-entrant).
    lock = CrawlDir(data).writer_lock(crawl_settings.frontier_url, crawl_settings.worker_id)
    with lock.held() if lock is not None else contextlib.nullcontext():
        _run(data, index, seeds, crawl_settings, settings, shards, poll_s, compact_every_s, metrics_port)


def _run(
    data: Path,
    index: Path,
    seeds: list[str],
    crawl_settings: CrawlSettings,
    settings: Settings,
    shards: int,
    poll_s: float,
    compact_every_s: float,
    metrics_port: int | None,
) -> None:
    # lazy: tantivy, hnswlib and polars; `trawl --help` stays fast
    from retrieval.index.incremental import IncrementalIndexer, follow

    crawl = ContinuousCrawl(data, crawl_settings, seeds=seeds)
    indexer = IncrementalIndexer(
        data, index, shards=shards, embed=settings.embed, keep_generations=settings.index.keep_generations
    )
    if metrics_port is not None:
        from prometheus_client import start_http_server

        # lazy: prometheus_client, only with --metrics-port
        from retrieval.index.freshness_metrics import REGISTRY

        start_http_server(metrics_port, addr="127.0.0.1", registry=REGISTRY)
        console.print(f"freshness metrics on http://127.0.0.1:{metrics_port}/metrics")
    stop = threading.Event()
    failure: list[BaseException] = []

    def index_loop() -> None:
        try:
            follow(indexer, stop, poll_s=poll_s, compact_every_s=compact_every_s)
        except BaseException as exc:  # reported by the main thread, which then stops the crawl
            failure.append(exc)
            crawl.request_stop()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, crawl.request_stop)
        await crawl.run()

    indexer_thread = threading.Thread(target=index_loop, name="trawl-indexer", daemon=True)
    indexer_thread.start()
    try:
        asyncio.run(main())
    finally:
        stop.set()
        indexer_thread.join()
    if failure:
        raise failure[0]
    if indexer.generation() is not None:
        try:
            indexer.step()  # what the last crawl batches wrote
        except DirectoryBusy as exc:
            console.print(f"the last crawl batches are indexed at the next start: {exc}")
    console.print(f"stopped after {crawl.rounds} crawl round(s)")
