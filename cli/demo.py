"""``trawl demo``: serve a real website on loopback, crawl it, index it, and serve search.

The site is Debian's ``python3.11-doc`` (``/usr/share/doc/python3.11/html``, ~530
pages), served by a static file server on 127.0.0.1 so the crawl goes over real HTTP
through the whole crawler (robots, frontier, fetcher, extraction, dedup, docstore).
Loopback is refused by the address guard unless a crawl allows private addresses; the
demo does, for its own server only, and drops the politeness delay for it because it
is our own process on our own machine.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console(stderr=True)
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


def demo_command(
    site: Annotated[Path, typer.Option("--site", help="Directory of HTML to serve and crawl.")] = PYTHON_DOCS,
    data: Annotated[Path, typer.Option("--data", help="Where the crawl and index go.")] = Path("data/demo"),
    site_port: Annotated[int, typer.Option("--site-port", help="Port of the local site.")] = 8099,
    port: Annotated[int, typer.Option("--port", help="Port of the search service.")] = 8000,
    max_pages: Annotated[int, typer.Option("--max-pages", min=1)] = 5000,
    no_serve: Annotated[bool, typer.Option("--no-serve", help="Stop after indexing.")] = False,
    embed: Annotated[
        bool,
        typer.Option("--embed", help="Also embed every passage (hybrid and LTR; ~10+ min on 2 cores)."),
    ] = False,
) -> None:
    """Crawl the Python docs served on loopback, index them and serve search.

    Example: trawl demo   then open http://127.0.0.1:8000/?q=list+comprehension
    """
    import uvicorn

    from api.app import create_app
    from core.settings import Settings
    from crawl.loop import Crawler
    from retrieval.docs_source import crawled_documents
    from retrieval.manifest import IndexRoot
    from training.linkgraph import crawl_pagerank

    if not (site / "index.html").exists():
        raise typer.BadParameter(
            f"{site} has no index.html; install Debian's python3.11-doc "
            "(sudo apt-get install python3.11-doc) or pass --site DIR"
        )
    settings = Settings()
    crawl_settings = settings.crawl.model_copy(
        update={
            "allow_private": True,
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
    console.print(f"crawl: {summary}")
    with console.status("indexing…"):
        crawl_pagerank(data / "crawl")
        root = IndexRoot(data / "index")
        generation = root.build(crawled_documents(data / "crawl"), source=f"crawl:{data}")
        root.publish(generation)
    console.print(f"indexed generation {generation} into {data / 'index'}")
    if embed:
        from retrieval.backfill import backfill_index
        from retrieval.embed import Embedder
        from retrieval.manifest import resolve_index

        with console.status("embedding (resumable; Ctrl-C and rerun continues)…"):
            report = backfill_index(
                resolve_index(data / "index"), Embedder.from_settings(settings.embed), settings.embed
            )
        console.print(f"embedded {report.embedded:,} documents ({report.rows:,} passages)")
    if no_serve:
        server.shutdown()
        return
    application = create_app(settings, index_dir=data / "index")
    console.print(
        f"\n  Open http://127.0.0.1:{port}/  (try: http://127.0.0.1:{port}/?q=list+comprehension)\n"
    )
    uvicorn.run(application, host="127.0.0.1", port=port, log_level="warning")
