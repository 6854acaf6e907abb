"""``trawl demo``: serve a real website on loopback, crawl it, index it, and serve the whole engine.

The site is Debian's ``python3.11-doc`` (``/usr/share/doc/python3.11/html``), served by a
static file server on 127.0.0.1 so the crawl goes over real HTTP through the whole crawler.
Loopback is refused by the address guard unless a crawl allows it; the demo does, for its
own server only, and drops the politeness delay for it (our own process on our machine).

Search answers with BM25 as soon as the index is built. The embeddings backfill then runs in
a niced child process (a thread would share the serving process's interpreter), with a
progress bar here and a progress file the service shows on ``/healthz`` and the home page.
When it has published a generation with vectors, this process loads the query encoder for
them and refreshes the service's generation set: it warms the new generation and switches
to the default ranker for vectors, without a restart.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.console import make_console
from cli.crawl import _human_bytes
from cli.embed import passage_progress, vector_counts
from cli.ports import bind_error, port_taken_message
from core.settings import Settings
from crawl.run.loop import Crawler

if TYPE_CHECKING:
    from fastapi import FastAPI

    from crawl.run.counters import CrawlSummary

console = make_console(stderr=True)
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        return


def serve_directory(root: Path, port: int) -> http.server.ThreadingHTTPServer:
    """A static file server for ``root`` on 127.0.0.1:``port``, in a daemon thread."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="demo-site").start()
    return server


def busy_port(ports: dict[str, int]) -> str | None:
    """A one-line message for the first port that cannot be bound on 127.0.0.1, else None.

    The free port it suggests is none of ``ports``: the demo listens on all of them.
    """
    for flag, port in ports.items():
        problem = bind_error("127.0.0.1", port)
        if problem is not None:
            return port_taken_message("127.0.0.1", port, problem, flag=flag, avoid=ports.values())
    return None


def describe_crawl(summary: CrawlSummary) -> str:
    """One readable line: pages, size, time, what became documents, what went wrong."""
    parts = [
        f"crawled {summary.pages:,} pages ({_human_bytes(summary.bytes)}) in {summary.elapsed_s:.1f} s",
        f"{summary.indexed:,} documents, {summary.duplicates:,} duplicates",
    ]
    if summary.pending:
        parts.append(f"{summary.pending:,} URLs left in the frontier")
    errors = sum(n for _, n in summary.errors)
    if errors:
        parts.append(f"{errors:,} errors (" + ", ".join(f"{k} {n:,}" for k, n in summary.errors) + ")")
    if summary.stopped:
        parts.append("stopped early")
    return " · ".join(parts)


def _die_with(parent: int) -> None:
    """End this process when ``parent`` dies, however it dies (SIGKILL included).

    A daemonic multiprocessing child is stopped only when its parent exits normally; a
    demo killed by a signal would leave its backfill encoding for minutes. Linux's
    ``PR_SET_PDEATHSIG`` sends SIGTERM at the parent's death; the ``getppid`` check
    covers a parent that died before the call.
    """
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's normal exit still stops it
        pass
    if os.getppid() != parent:
        os._exit(1)


def _background_backfill(root: str, threads: int, parent: int | None = None) -> None:
    """The child process: embed the serving generation into a new one and publish it."""
    if parent is not None:
        _die_with(parent)
    os.nice(10)  # queries first: the scheduler gives the serving process the CPU it asks for
    # lazy: retrieval code (tantivy, hnswlib) loads in this child only, never in a crawl worker
    from retrieval.index.root import IndexRoot
    from retrieval.vectors.backfill import backfill_new_generation, collect_garbage  # lazy: as above
    from retrieval.vectors.backfill_progress import ProgressFile  # lazy: as above
    from retrieval.vectors.embed import Embedder  # lazy: as above

    settings = Settings()
    embed = settings.embed.model_copy(update={"torch_threads": threads})
    progress = ProgressFile(Path(root), model_id="")
    progress.state("loading", "loading the embedding model")
    try:
        embedder = Embedder.from_settings(embed)
        progress.model_id = embedder.model_id
        progress.generation = f"derived from {IndexRoot(Path(root)).current()}"
        out = make_console(stderr=True)

        with passage_progress(out, "embeddings (background)") as bar:

            def on_progress(done: int, total: int) -> None:
                bar(done, total)
                progress(done, total)

            generation, report = backfill_new_generation(Path(root), embedder, embed, on_progress=on_progress)
        progress.generation = generation
        collect_garbage(Path(root))
        counts = vector_counts(report)  # adds up to the passages the bar counted, and says why more
        out.print(f"embeddings (background): {counts}", soft_wrap=True)
        progress.state("done", counts, done=report.encoded, total=report.encoded)
    except BaseException as exc:
        progress.state("failed", f"{type(exc).__name__}: {exc}")
        raise


def _switch_when_embedded(
    application: FastAPI, settings: Settings, root: Path, threads: int, crawl_end: float
) -> None:
    """Start the backfill child once search answers; switch the service when it is done."""
    while not getattr(application.state, "ready", False):
        time.sleep(0.05)
    console.print(f"search answers (BM25) {time.monotonic() - crawl_end:.1f} s after the crawl ended")
    child = multiprocessing.get_context("spawn").Process(
        target=_background_backfill,
        args=(str(root), threads, os.getpid()),
        name="trawl-demo-embed",
        daemon=True,
    )
    child.start()
    child.join()
    if child.exitcode != 0:
        console.print(
            f"[red]the embeddings backfill failed (exit {child.exitcode})[/red]; still serving BM25"
        )
        return
    # lazy: crawl workers import this module, and no retrieval code (tests/unit/cli/test_crawl_imports.py)
    from retrieval.vectors.backfill_progress import read_progress
    from retrieval.vectors.embed import Embedder  # lazy: as above

    service = application.state.search
    progress = read_progress(root)
    model_id = progress.model_id if progress is not None else None
    if model_id and service.encoder_model != model_id:
        # Loaded before the switch, so the warm-up of the new generation runs hybrid queries.
        embedder = Embedder.from_settings(settings.embed, serving=True, for_model_id=model_id)
        service.encoder, service.encoder_model = embedder.encode_query, embedder.model_id
    service.generations.refresh()
    generation = service.generation
    console.print(
        f"[green]full engine serving[/green] {time.monotonic() - crawl_end:.1f} s after the crawl ended: "
        f"generation {generation.id}, ranker {service.default_ranker(generation)} "
        f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})"
    )


def demo_command(
    site: Annotated[Path, typer.Option("--site", help="Directory of HTML to serve and crawl.")] = PYTHON_DOCS,
    data: Annotated[Path, typer.Option("--data", help="Where the crawl and index go.")] = Path("data/demo"),
    site_port: Annotated[int, typer.Option("--site-port", help="Port of the local site.")] = 8099,
    port: Annotated[int, typer.Option("--port", help="Port of the search service.")] = 8000,
    max_pages: Annotated[
        int, typer.Option("--max-pages", min=1, help="Stop the crawl after this many.")
    ] = 5000,
    no_serve: Annotated[bool, typer.Option("--no-serve", help="Stop after indexing.")] = False,
    no_embed: Annotated[
        bool, typer.Option("--no-embed", help="Serve BM25 only: no embeddings backfill in the background.")
    ] = False,
    embed_threads: Annotated[
        int, typer.Option("--embed-threads", min=1, help="Encoder threads of the background backfill.")
    ] = max(1, len(os.sched_getaffinity(0))),
    embed: Annotated[
        bool, typer.Option("--embed", hidden=True, help="With --no-serve: backfill before returning.")
    ] = False,
) -> None:
    """Crawl the Python docs served on loopback, index them and serve search; vectors follow.

    BM25 answers as soon as the index is built; the embeddings backfill runs in the
    background (progress bar here, on /healthz and on the home page) and the service
    switches to hybrid ranking when it is done. --no-serve stops after indexing.

    Example: trawl demo   then open http://127.0.0.1:8000/?q=list+comprehension
    Example: make demo ARGS="--no-embed --port 8001"
    """
    message = busy_port({"--site-port": site_port} | ({} if no_serve else {"--port": port}))
    if message is not None:
        console.print(f"[red]error:[/red] {message}", soft_wrap=True)
        raise typer.Exit(2)
    if not (site / "index.html").exists():
        raise typer.BadParameter(
            f"{site} has no index.html; install Debian's python3.11-doc "
            "(sudo apt-get install python3.11-doc) or pass --site DIR"
        )
    import uvicorn

    # lazy: FastAPI, tantivy, hnswlib, polars and scipy; `trawl --help` stays fast
    from api.app import create_app
    from retrieval.index.docs_source import crawled_documents  # lazy: as above
    from retrieval.index.root import IndexRoot  # lazy: as above
    from training.pagerank import crawl_pagerank  # lazy: as above

    settings = Settings()
    settings = settings.model_copy(
        update={"api": settings.api.model_copy(update={"crawl_data": (data / "crawl").resolve()})}
    )
    crawl_settings = settings.crawl.model_copy(
        update={
            "allow_loopback": True,
            "min_delay_s": 0.0,
            "response_time_factor": 0.0,
            "max_pages": max_pages,
        }
    )
    server = serve_directory(site, site_port)
    seed = f"http://127.0.0.1:{site_port}/index.html"
    console.print(f"serving {site} at http://127.0.0.1:{site_port}/ — crawling it into {data}")
    crawler = Crawler(data / "crawl", crawl_settings, seeds=[seed])
    with console.status("crawling…"):
        summary = asyncio.run(crawler.run())
    crawl_end = time.monotonic()
    console.print(describe_crawl(summary), soft_wrap=True)
    with console.status("indexing…"):
        crawl_pagerank(data / "crawl")
        root = IndexRoot(data / "index")
        generation = root.build(crawled_documents(data / "crawl"), source=f"crawl:{data}")
        root.publish(generation)
    console.print(f"indexed generation {generation} into {data / 'index'}")
    if no_serve:
        server.shutdown()
        if embed and not no_embed:
            _background_backfill(str(root.root), embed_threads)
        return
    application = create_app(settings, index_dir=data / "index")
    if not no_embed:
        threading.Thread(
            target=_switch_when_embedded,
            args=(application, settings, root.root, embed_threads, crawl_end),
            daemon=True,
            name="demo-embed",
        ).start()
    console.print(  # one line each in a log too: the console does not wrap there (cli.console)
        f"\n  Open http://127.0.0.1:{port}/  (try: http://127.0.0.1:{port}/?q=list+comprehension)\n"
        + (
            ""
            if no_embed
            else "  BM25 now; hybrid search follows when the embeddings backfill below is done.\n"
        )
    )
    from api.edge import server_options  # lazy: uvicorn's protocols; `trawl --help` stays fast

    uvicorn.run(application, host="127.0.0.1", port=port, **server_options())
