"""``trawl crawl``: run a polite crawl with live progress and a summary; Ctrl-C stops it gracefully."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cli.console import make_console
from cli.deprecated import renamed_flag
from core.crawldir import CrawlDir
from core.settings import CrawlSettings, Settings
from crawl.run.counters import CrawlStats, CrawlSummary
from crawl.run.loop import Crawler
from crawl.state.fleet import crawl_status

__all__ = ["crawl_command", "run_crawl"]

console = make_console(stderr=True)
ScopeChoice = Literal["host", "domain", "any"]


def _human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def _progress_table(stats: CrawlStats) -> Group:
    line = Text.assemble(
        (f"{stats.pages} pages", "bold"),
        f" · {stats.pages_per_s():.1f}/s · {_human_bytes(stats.bytes)} · queue {stats.queued}"
        f" · in flight {stats.in_flight} · indexed {stats.indexed} · duplicates {stats.duplicates}",
    )
    errors = ", ".join(f"{kind} {n}" for kind, n in stats.errors.most_common(6)) or "none"
    return Group(line, Text(f"errors: {errors}", style="yellow" if stats.errors else "dim"))


def _summary_table(summary: CrawlSummary) -> Table:
    table = Table(
        title="Crawl summary" + (" (stopped; resume with the same command)" if summary.stopped else "")
    )
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("elapsed", f"{summary.elapsed_s:.1f} s")
    table.add_row("HTTP exchanges", str(summary.fetches))
    table.add_row("HTML pages", f"{summary.pages} ({summary.pages_per_s:.1f}/s)")
    table.add_row("bytes", _human_bytes(summary.bytes))
    table.add_row("indexed", str(summary.indexed))
    table.add_row("duplicates", str(summary.duplicates))
    table.add_row("still queued", str(summary.pending))
    for outcome, n in summary.outcomes:
        table.add_row(f"outcome: {outcome}", str(n))
    for kind, n in summary.errors:
        table.add_row(f"error: {kind}", str(n))
    return table


async def run_crawl(crawler: Crawler, *, progress: bool) -> CrawlSummary:
    """Run a crawl; the first Ctrl-C (or SIGTERM) stops it gracefully, the second at once."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(crawler.run())
    interrupts = 0

    def on_signal() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            console.print("[yellow]Stopping after the fetches in flight (Ctrl-C again to stop now)…")
            crawler.request_stop()
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        if not progress:
            return await task
        with Live(_progress_table(crawler.stats), console=console, refresh_per_second=4) as live:
            while not task.done():
                await asyncio.wait({task}, timeout=0.25)
                live.update(_progress_table(crawler.stats))
        return task.result()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _print_status(data: Path, frontier_url: str | None) -> None:
    CrawlDir(data).require_crawl(frontier_url)
    typer.echo(json.dumps(crawl_status(data, frontier_url), indent=1))


def crawl_command(
    seeds: Annotated[list[str], typer.Argument(help="Start URLs.")],
    data: Annotated[Path, typer.Option("--data", help="Crawl data directory (created; resumed if present).")],
    max_pages: Annotated[int | None, typer.Option("--max-pages", min=1, help="Total page budget.")] = None,
    allow_loopback: Annotated[
        bool, typer.Option("--allow-loopback", help="Allow loopback addresses (local sites, the demo).")
    ] = False,
    allow_private_networks: Annotated[
        bool,
        typer.Option(
            "--allow-private-networks",
            help="Allow private networks (10/8, 172.16/12, 192.168/16, fc00::/7); never link-local.",
        ),
    ] = False,
    allow_private: Annotated[
        bool, typer.Option("--allow-private", hidden=True, help="Deprecated: means --allow-loopback.")
    ] = False,
    scope: Annotated[
        str | None, typer.Option("--scope", help="host (default), domain (subdomains too) or any.")
    ] = None,
    recrawl: Annotated[
        bool, typer.Option("--recrawl", help="Also refetch pages whose recrawl is due.")
    ] = False,
    delay_s: Annotated[
        float | None, typer.Option("--delay-s", min=0, help="Minimum seconds between requests to a host.")
    ] = None,
    old_delay: Annotated[
        float | None, typer.Option("--delay", min=0, hidden=True, help="Deprecated name of --delay-s.")
    ] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="Async workers.")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Live progress display.")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    frontier: Annotated[
        str | None,
        typer.Option(
            "--frontier",
            help="A postgresql:// frontier shared by many workers (default: the --data directory's SQLite).",
        ),
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option("--worker-id", help="This worker's name on a shared frontier (default host-pid)."),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", min=0, help="Serve Prometheus metrics on 127.0.0.1:PORT.")
    ] = None,
) -> None:
    """Crawl from SEEDs politely, storing WARC, documents and links under --data.

    Started N times with the same --frontier postgresql://… the workers form one crawl.
    `trawl crawl status --data DIR [--frontier …]` prints the crawl's (the fleet's) state.

    Example: trawl crawl http://127.0.0.1:8000/ --data data/crawl --allow-loopback --max-pages 500
    """
    if seeds == ["status"]:
        _print_status(data, frontier or Settings().crawl.frontier_url)
        return
    if scope is not None and scope not in ("host", "domain", "any"):
        raise typer.BadParameter(f"Unknown scope {scope!r}; expected one of: host, domain, any.")
    base = Settings().crawl
    updates: dict[str, Any] = {}
    if max_pages is not None:
        updates["max_pages"] = max_pages
    if allow_private:
        typer.echo("--allow-private is deprecated: it now means --allow-loopback.", err=True)
    if allow_loopback or allow_private:
        updates["allow_loopback"] = True
    if allow_private_networks:
        updates["allow_private"] = True
    if scope is not None:
        updates["scope"] = scope
    delay = renamed_flag("--delay", "--delay-s", old_delay, delay_s)
    if delay is not None:
        updates["min_delay_s"] = delay
    if concurrency is not None:
        updates["concurrency"] = concurrency
    if frontier is not None:
        updates["frontier_url"] = frontier
    if worker_id is not None:
        updates["worker_id"] = worker_id
    settings = CrawlSettings.model_validate(base.model_dump() | updates)
    crawler = Crawler(data, settings, seeds=seeds, recrawl=recrawl)
    if not crawler.seeds:
        raise typer.BadParameter("No seed is a valid http(s) URL.")
    if metrics_port is not None:
        # lazy: prometheus_client (~12 MB), only with --metrics-port
        from crawl.run.metrics import CrawlMetrics, FetchObserver, serve_metrics

        crawler.observer = FetchObserver()
        serve_metrics(CrawlMetrics(crawler.stats, observer=crawler.observer), metrics_port)
    try:
        summary = asyncio.run(run_crawl(crawler, progress=progress and console.is_terminal))
    except asyncio.CancelledError:
        console.print("[red]Stopped at once; fetches in flight are lost and will be redone on resume.")
        raise typer.Exit(130) from None
    if json_out:
        payload = {
            "elapsed_s": summary.elapsed_s,
            "fetches": summary.fetches,
            "pages": summary.pages,
            "bytes": summary.bytes,
            "indexed": summary.indexed,
            "duplicates": summary.duplicates,
            "pending": summary.pending,
            "outcomes": dict(summary.outcomes),
            "errors": dict(summary.errors),
            "stopped": summary.stopped,
        }
        typer.echo(json.dumps(payload))
    else:
        console.print(_summary_table(summary))
