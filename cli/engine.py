"""The ``--engine`` / ``--ray-address`` options every batch command shares, and its document sources."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.console import make_console
from core.jobs import JobEngine
from core.settings import Settings
from core.types import Document

if TYPE_CHECKING:
    from training.pagerank import CrawlPageRank

console = make_console(stderr=True)

EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="Where the job runs: local (this process) or ray. Default: TRAWL_JOBS__ENGINE, else local.",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="With --engine ray: auto or HOST:PORT joins a cluster; unset starts a local Ray.",
    ),
]


def job_engine(settings: Settings, engine: str | None, address: str | None) -> JobEngine:
    return JobEngine.from_settings(settings.jobs, engine=engine, address=address)


def beir_documents(path: Path) -> Iterator[Document]:
    """A BEIR corpus's documents (module level, so a Ray shard task can call it by name)."""
    # lazy: crawl workers import this module, and no training code (tests/unit/cli/test_crawl_imports.py)
    from training.datasets import BeirDataset

    return BeirDataset.open(path).iter_documents()


def crawl_documents(path: Path) -> Iterator[Document]:
    """A crawl docstore's documents (module level, so a Ray shard task can call it by name)."""
    # lazy: loads polars; `trawl --help` stays fast
    from retrieval.index.docs_source import crawled_documents

    return crawled_documents(path)


def run_crawl_pagerank(data: Path, on_ray: bool, settings: Settings) -> CrawlPageRank | None:
    """The crawl's link-graph job (page and host PageRank beside the docstore), here or on the
    connected Ray; None when the crawl has no links."""
    # lazy: loads polars and scipy; `trawl --help` stays fast
    from training.pagerank import crawl_pagerank

    with console.status("PageRank…") as status:
        rank = None
        if on_ray:
            # lazy: loads polars and scipy; `trawl --help` stays fast
            from training.ray_training import ray_rank

            rank = ray_rank(
                blocks=settings.jobs.pagerank_blocks,
                on_iteration=lambda i, change: status.update(
                    f"PageRank on ray… iteration {i}, L1 change {change:.1e}"
                ),
            )
        return crawl_pagerank(data, rank=rank)
