"""``trawl pagerank``: the crawl's link-graph job on its own (page and host PageRank)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.console import make_console
from cli.engine import EngineOption, RayAddressOption, job_engine, run_crawl_pagerank
from core.crawldir import CrawlDir
from core.errors import ConfigError
from core.settings import Settings

console = make_console(stderr=True)


def pagerank_command(
    data: Annotated[Path, typer.Option("--data", help="A crawl data directory (its link graph).")],
    engine: EngineOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Compute PageRank of a crawl's pages and hosts and write it where `trawl index` reads it.

    `trawl index --data` runs the same job before building; run it alone to refresh the
    scores after a crawl, or to run it on a Ray cluster. Both files are replaced atomically.

    Example: trawl pagerank --data data/crawl
    Example: trawl pagerank --data data/crawl --engine ray --ray-address auto
    """
    settings = Settings()
    job = job_engine(settings, engine, ray_address)
    with job.session():
        result = run_crawl_pagerank(data, job.is_ray, settings)
    if result is None:
        raise ConfigError(
            f"{data} has no link graph (no edges under {CrawlDir(data).links}): crawl it first, "
            f"e.g. trawl crawl URL --data {data}"
        )
    for name, run, path in (
        ("pages", result.pages, result.pages_path),
        ("hosts", result.hosts, result.hosts_path),
    ):
        note = "" if run.converged else " (not converged)"
        console.print(
            f"{name}: {run.nodes:,} nodes, {run.edges:,} edges, {run.iterations} iterations{note} → {path}",
            soft_wrap=True,
        )
    console.print(f"PageRank on {job.engine} in {result.seconds:.2f} s")
