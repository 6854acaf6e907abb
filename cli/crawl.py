"""``trawl crawl`` and ``trawl inspect``: run a crawl with live progress, explain one URL.

``register(app)`` adds the commands to the ``trawl`` Typer app. Running this module
(``python -m api.cli_crawl crawl ...``) gives the same commands on their own, which
the resume tests use to SIGKILL a real crawl process.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from core.settings import CrawlSettings, Settings
from crawl.inspect import inspect_url
from crawl.loop import Crawler
from crawl.stats import CrawlStats, CrawlSummary

__all__ = ["register", "run_crawl"]

console = Console(stderr=True)
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


def crawl_command(
    seeds: Annotated[list[str], typer.Argument(help="Start URLs.")],
    data: Annotated[Path, typer.Option("--data", help="Crawl data directory (created; resumed if present).")],
    max_pages: Annotated[int | None, typer.Option("--max-pages", min=1, help="Total page budget.")] = None,
    allow_private: Annotated[
        bool, typer.Option("--allow-private", help="Allow loopback and private addresses (local sites).")
    ] = False,
    scope: Annotated[
        str | None, typer.Option("--scope", help="host (default), domain (subdomains too) or any.")
    ] = None,
    recrawl: Annotated[
        bool, typer.Option("--recrawl", help="Also refetch pages whose recrawl is due.")
    ] = False,
    delay: Annotated[
        float | None, typer.Option("--delay", min=0, help="Minimum seconds between requests to a host.")
    ] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="Async workers.")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Live progress display.")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
) -> None:
    """Crawl from SEEDs politely, storing WARC, documents and links under --data.

    Example: trawl crawl http://127.0.0.1:8000/ --data data/crawl --allow-private --max-pages 500
    """
    if scope is not None and scope not in ("host", "domain", "any"):
        raise typer.BadParameter(f"Unknown scope {scope!r}; expected one of: host, domain, any.")
    base = Settings().crawl
    updates: dict[str, Any] = {}
    if max_pages is not None:
        updates["max_pages"] = max_pages
    if allow_private:
        updates["allow_private"] = True
    if scope is not None:
        updates["scope"] = scope
    if delay is not None:
        updates["min_delay_s"] = delay
    if concurrency is not None:
        updates["concurrency"] = concurrency
    settings = CrawlSettings.model_validate(base.model_dump() | updates)
    crawler = Crawler(data, settings, seeds=seeds, recrawl=recrawl)
    if not crawler.seeds:
        raise typer.BadParameter("No seed is a valid http(s) URL.")
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


def inspect_command(
    url: Annotated[str, typer.Argument(help="The URL to explain.")],
    data: Annotated[Path, typer.Option("--data", help="Crawl data directory.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    index: Annotated[
        Path | None, typer.Option("--index", help="Index root: also say whether and where it is indexed.")
    ] = None,
) -> None:
    """Explain what the crawl knows about URL: canonical form, robots, state, history, duplicates,
    and (with --index) whether it is in the serving generation and in which shard.

    Example: trawl inspect "http://127.0.0.1:8000/library/os.html?utm_source=x" --data data/crawl
    """
    report = inspect_url(url, data, user_agent=Settings().crawl.user_agent)
    indexed = _indexed(report.canonical_url, index) if index is not None and report.canonical_url else None
    if json_out:
        payload = {
            "indexed": indexed,
            "url": report.url,
            "canonical_url": report.canonical_url,
            "doc_id": report.doc_id,
            "robots": report.robots,
            "state": report.state,
            "history": list(report.history),
            "dup_of": report.dup_of,
            "cluster": list(report.cluster),
        }
        typer.echo(json.dumps(payload, default=str))
        return
    out = Console()
    if not report.canonical_url:
        out.print(f"[red]{url!r} is not a crawlable http(s) URL.")
        raise typer.Exit(1)
    table = Table(title=f"Inspect {report.canonical_url}", show_header=False)
    table.add_row("canonical URL", report.canonical_url)
    table.add_row("doc id", str(report.doc_id))
    table.add_row("robots.txt", report.robots)
    if report.state is None:
        table.add_row("crawl state", "never seen by this crawl")
    else:
        for key in (
            "status",
            "outcome",
            "http_status",
            "depth",
            "kind",
            "parent",
            "retries",
            "blocked_reason",
            "etag",
            "last_modified",
            "content_hash",
            "fetch_count",
            "change_count",
            "interval_s",
        ):
            value = report.state.get(key)
            if value not in (None, "", 0):
                table.add_row(key, str(value))
    if indexed is not None:
        table.add_row("indexed", indexed)
    if report.dup_of:
        table.add_row("duplicate of", report.dup_of)
    if report.cluster:
        table.add_row("dedup cluster", "\n".join(report.cluster))
    for entry in report.history:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(entry["at"]))
        table.add_row(
            "fetched",
            f"{when} UTC: {entry['http_status']} {entry['outcome']} "
            f"({entry['bytes']} bytes, {entry['elapsed_s']:.2f} s)",
        )
    out.print(table)


def _indexed(canonical_url: str, index: Path) -> str:
    """Whether the serving generation of ``index`` holds the URL, and where."""
    from core.settings import SearchSettings
    from retrieval.search import SearchService

    service = SearchService.open(index, SearchSettings(use_vectors=False, cache_entries=0))
    try:
        located = service.locate_url(canonical_url)
        generation = service.generation.id
    finally:
        service.close()
    if located is None:
        return f"no (generation {generation})"
    return f"yes: doc {int(located[0])}, shard {located[1]}, generation {generation}"


def register(app: typer.Typer) -> None:
    """Add ``crawl`` and ``inspect`` to the ``trawl`` app."""
    app.command("crawl")(crawl_command)
    app.command("inspect")(inspect_command)


if __name__ == "__main__":
    from core.logging import configure_logging

    configure_logging("WARNING")
    standalone = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(standalone)
    standalone()
