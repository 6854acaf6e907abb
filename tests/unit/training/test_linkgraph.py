"""PageRank against networkx (the reference implementation) on random graphs."""

from __future__ import annotations

import random
from pathlib import Path

import networkx as nx
import numpy as np
import polars as pl
import pytest

from training.pagerank import beir_pagerank, host_pagerank, pagerank, pagerank_by_key, url_pagerank


def _random_graph(seed: int, n: int, edges: int) -> nx.DiGraph:
    rng = random.Random(seed)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for _ in range(edges):
        graph.add_edge(rng.randrange(n), rng.randrange(n))  # self-loops and dangling nodes included
    return graph


@pytest.mark.parametrize(("seed", "n", "m"), [(0, 50, 120), (1, 300, 900), (2, 200, 150), (3, 1000, 5000)])
def test_pagerank_matches_networkx(seed: int, n: int, m: int) -> None:
    graph = _random_graph(seed, n, m)
    assert any(graph.out_degree(v) == 0 for v in graph)  # dangling mass is exercised
    expected = nx.pagerank(graph, alpha=0.85, tol=1e-12, max_iter=1000)
    src, dst = zip(*graph.edges(), strict=True)
    result = pagerank(n, list(src), list(dst), tol=1e-12, max_iterations=1000)
    assert result.converged
    got = result.scores
    assert np.max(np.abs(got - np.array([expected[i] for i in range(n)]))) <= 1e-8
    assert got.sum() == pytest.approx(1.0, abs=1e-9)


def test_duplicate_edges_count_once_and_default_tolerance_agrees() -> None:
    graph = _random_graph(7, 80, 300)
    edges = [(str(a), str(b)) for a, b in graph.edges()]
    scores = pagerank_by_key(edges + edges[:40], [str(v) for v in graph.nodes])
    expected = nx.pagerank(graph, alpha=0.85, tol=1e-12, max_iter=1000)
    assert max(abs(scores[str(v)] - expected[v]) for v in graph.nodes) <= 1e-8


def test_all_dangling_graph_is_uniform() -> None:
    result = pagerank(4, [], [])
    assert result.scores.tolist() == pytest.approx([0.25] * 4)


def test_url_and_host_frames() -> None:
    edges = pl.DataFrame(
        {
            "src_url": ["https://a.org/1", "https://a.org/1", "https://www.b.org/x", "https://a.org/2"],
            "dst_url": ["https://b.org/y", "https://a.org/2", "https://a.org/1", "https://a.org/1"],
            "anchor_text": ["", "", "", ""],
        }
    )
    pages = url_pagerank(edges, ["https://c.org/"])
    graph = nx.DiGraph([tuple(r) for r in edges.select("src_url", "dst_url").iter_rows()])
    graph.add_node("https://c.org/")
    expected = nx.pagerank(graph, tol=1e-12, max_iter=1000)
    got = dict(zip(pages["url"], pages["pagerank"], strict=True))
    assert set(got) == set(expected)
    assert max(abs(got[u] - expected[u]) for u in got) <= 1e-8
    assert pages["pagerank_scaled"].sum() == pytest.approx(pages.height)
    hosts = host_pagerank(edges)
    assert hosts["host"].to_list() == ["a.org", "b.org"]
    # a.org ↔ b.org each link once across hosts: symmetric, so equal.
    assert hosts["pagerank"].to_list() == pytest.approx([0.5, 0.5])


def test_beir_pagerank_on_cisi_links(eval_dir: Path) -> None:
    scores = beir_pagerank(eval_dir / "cisi")
    assert len(scores) == 1460
    assert sum(scores.values()) == pytest.approx(1460.0)
    assert max(scores.values()) > 3.0  # a real graph: some documents are much more cited
