"""``trawl pagerank --engine ray``: the crawl's page and host PageRank on Ray equal the local job's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from cli.main import app
from core.crawldir import CrawlDir
from core.linkgraph import Edge, LinkGraphStore
from training.pagerank import crawl_pagerank, host_ranks

pytestmark = pytest.mark.ray  # starts a local Ray: `make test-ray`

REPO = Path(__file__).resolve().parents[3]


def crawl_with_links(root: Path, seed: int = 4) -> Path:
    """400 pages on 23 hosts, zipf-skewed targets, every ninth page dangling."""
    rng = np.random.default_rng(seed)
    url = [f"https://h{i % 23}.example/p{i}" for i in range(400)]
    src, dst = rng.integers(0, 400, 3000), rng.zipf(1.5, 3000) % 400
    LinkGraphStore(CrawlDir(root).links).append(
        Edge(url[a], url[b]) for a, b in zip(src, dst, strict=True) if a % 9 != 0
    )
    return root


def test_host_and_page_pagerank_on_ray_equal_local(tmp_path: Path, ray_local: ModuleType) -> None:
    local = crawl_with_links(tmp_path / "local")
    on_ray = crawl_with_links(tmp_path / "ray")
    assert crawl_pagerank(local) is not None
    result = CliRunner().invoke(app, ["pagerank", "--data", str(on_ray), "--engine", "ray"])
    assert result.exit_code == 0, result.output
    assert "on ray" in result.output

    for name in (CrawlDir(local).pagerank.name, CrawlDir(local).pagerank_hosts.name):
        expected, got = pl.read_parquet(local / name), pl.read_parquet(on_ray / name)
        assert got[:, 0].to_list() == expected[:, 0].to_list()
        assert np.abs(got["pagerank"].to_numpy() - expected["pagerank"].to_numpy()).max() < 1e-9
    hosts_local, hosts_ray = host_ranks(local), host_ranks(on_ray)
    assert len(hosts_ray) == 23 and hosts_ray.keys() == hosts_local.keys()
    assert max(abs(hosts_ray[h] - hosts_local[h]) for h in hosts_local) < 1e-9 * len(hosts_local)


def test_unreachable_cluster_exits_non_zero_and_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = crawl_with_links(tmp_path / "crawl")
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "pagerank", "--data", str(data), "--engine", "ray"]
        + ["--ray-address", f"127.0.0.1:{port}"],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert "cannot reach the Ray cluster" in run.stderr
    assert not CrawlDir(data).pagerank.exists() and not CrawlDir(data).pagerank_hosts.exists()
