"""`trawl pagerank --data`: page and host PageRank of a crawl, written where index build reads them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from cli.main import app
from core.crawldir import CrawlDir
from core.linkgraph import Edge, LinkGraphStore
from retrieval.index.docs_source import page_ranks
from training.pagerank import crawl_pagerank, host_pagerank, host_ranks, url_pagerank

REPO = Path(__file__).resolve().parents[3]

# b.org/ is linked from three pages on two other hosts; c.org is linked from nowhere.
# Host graph: a.org → b.org, b.org → a.org, c.org → b.org, so b.org > a.org > c.org.
EDGES = [
    Edge("https://a.org/1", "https://b.org/", "B"),
    Edge("https://a.org/2", "https://b.org/", "B"),
    Edge("https://www.c.org/x", "https://b.org/", "B"),
    Edge("https://b.org/", "https://a.org/1", "A one"),
    Edge("https://a.org/1", "https://a.org/2", "A two"),
    Edge("https://a.org/1", "https://a.org/2", "A two, again"),
]


def crawl_with_links(root: Path) -> Path:
    store = LinkGraphStore(CrawlDir(root).links)
    store.append(EDGES[:3])
    LinkGraphStore(CrawlDir(root).links, worker="w-2").append(EDGES[3:])
    return root


def test_command_writes_page_and_host_pagerank(tmp_path: Path) -> None:
    data = crawl_with_links(tmp_path / "crawl")
    result = CliRunner().invoke(app, ["pagerank", "--data", str(data)])
    assert result.exit_code == 0, result.output
    assert "pages: 4 nodes, 5 edges" in result.output
    assert f"→ {CrawlDir(data).pagerank}" in result.output
    assert "hosts: 3 nodes, 3 edges" in result.output
    assert f"→ {CrawlDir(data).pagerank_hosts}" in result.output
    assert "on local" in result.output

    edges = LinkGraphStore(CrawlDir(data).links).read_edges()
    pages = pl.read_parquet(CrawlDir(data).pagerank)
    hosts = pl.read_parquet(CrawlDir(data).pagerank_hosts)
    assert pages.equals(url_pagerank(edges))
    assert hosts.equals(host_pagerank(edges))
    assert pages["pagerank"].sum() == pytest.approx(1.0)
    assert pages["pagerank_scaled"].sum() == pytest.approx(pages.height)
    assert hosts["pagerank"].sum() == pytest.approx(1.0)
    assert pages.sort("pagerank", descending=True)["url"][0] == "https://b.org/"
    assert hosts.sort("pagerank", descending=True)["host"].to_list() == ["b.org", "a.org", "c.org"]

    by_host = host_ranks(data)
    assert by_host == dict(zip(hosts["host"], hosts["pagerank_scaled"], strict=True))
    assert sum(by_host.values()) == pytest.approx(3.0)
    assert page_ranks(data) == dict(zip(pages["url"], pages["pagerank_scaled"], strict=True))


def test_job_reports_both_graphs_and_reruns_identically(tmp_path: Path) -> None:
    data = crawl_with_links(tmp_path / "crawl")
    first = crawl_pagerank(data)
    assert first is not None
    assert (first.pages.nodes, first.pages.edges, first.hosts.nodes, first.hosts.edges) == (4, 5, 3, 3)
    assert first.pages.converged and first.hosts.converged and first.pages.iterations > 1
    written = first.hosts_path.read_bytes()
    assert crawl_pagerank(data) is not None
    assert first.hosts_path.read_bytes() == written
    assert sorted(p.name for p in data.iterdir()) == sorted(
        ["links", CrawlDir(data).pagerank.name, CrawlDir(data).pagerank_hosts.name]
    )


def test_a_crawl_without_links_is_a_clear_error(tmp_path: Path) -> None:
    data = tmp_path / "crawl"
    data.mkdir()
    assert crawl_pagerank(data) is None
    assert host_ranks(data) == {}
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "pagerank", "--data", str(data)],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "has no link graph" in run.stderr
    assert list(data.iterdir()) == []
