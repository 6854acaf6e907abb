"""PageRank on Ray by source blocks equals the local scipy job within 1e-9 (pages and hosts)."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import polars as pl
import pytest

from training.pagerank import host_pagerank, pagerank, url_pagerank
from training.ray_training import ray_pagerank, ray_rank

pytestmark = pytest.mark.ray  # starts a local Ray: `make test-ray`


def graph(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.zipf(1.6, m) % n
    keep = src % 7 != 0  # every seventh page is dangling
    return src[keep], dst[keep]


@pytest.mark.parametrize("blocks", [1, 3, 5])
def test_blocks_equal_local_scipy(blocks: int, ray_local: ModuleType) -> None:
    n = 5000
    src, dst = graph(n, 40_000, seed=blocks)
    src = np.concatenate([src, src[:500]])  # duplicate edges count once
    dst = np.concatenate([dst, dst[:500]])
    local = pagerank(n, src, dst)
    ray = ray_pagerank(n, src, dst, blocks=blocks)
    assert ray.iterations == local.iterations and ray.converged
    assert np.abs(ray.scores - local.scores).max() < 1e-9
    assert ray.scores.sum() == pytest.approx(1.0)


def test_url_and_host_pagerank_on_ray(ray_local: ModuleType) -> None:
    src, dst = graph(300, 2000, seed=9)
    url = [f"https://h{i % 17}.example/p{i}" for i in range(300)]
    edges = pl.DataFrame({"src_url": [url[i] for i in src], "dst_url": [url[i] for i in dst]})
    for local_frame, ray_frame in (
        (url_pagerank(edges), url_pagerank(edges, rank=ray_rank(blocks=2))),
        (host_pagerank(edges), host_pagerank(edges, rank=ray_rank(blocks=2))),
    ):
        assert ray_frame.columns == local_frame.columns
        assert ray_frame[:, 0].to_list() == local_frame[:, 0].to_list()
        assert np.abs(ray_frame["pagerank"].to_numpy() - local_frame["pagerank"].to_numpy()).max() < 1e-9
