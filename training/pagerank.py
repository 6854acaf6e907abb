"""PageRank over the crawl's link graph (pages and hosts), as an offline batch job.

PageRank is a static signal: computed here over the whole graph, stored per document
(``Document.pagerank``, then the index's doc values) and only read at query time, as a
feature. Textbook power iteration on a scipy sparse matrix, so a graph of millions of
edges is a handful of sparse products::

    x ← d · (Mᵀx + (Σ dangling x) / n) + (1 - d) / n

with ``d`` = 0.85, every dangling page's mass spread evenly, duplicate edges counted once,
and a stop when the L1 change falls below ``n · tol`` (networkx's criterion). Stored values
are scaled by ``n`` (mean 1): a probability shrinks as the collection grows, a ratio to the
uniform page does not, so a model trained on one collection can read another's values.
Host PageRank is stored beside the pages' (``CrawlDir.pagerank_hosts``) but is not yet an
LTR feature (DECISIONS 28). Entry points: :func:`crawl_pagerank`, :func:`host_ranks`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import polars as pl
import scipy.sparse as sp
from numpy.typing import NDArray

from core.atomic import write_with
from core.crawldir import CrawlDir
from core.errors import ConfigError
from core.linkgraph import LinkGraphStore
from core.types import DocId, doc_id_for

logger = logging.getLogger(__name__)

DAMPING = 0.85
TOLERANCE = 1e-10
MAX_ITERATIONS = 500


@dataclass(frozen=True, slots=True)
class PageRankResult:
    scores: NDArray[np.float64]
    """One probability per node (sums to 1)."""
    iterations: int
    converged: bool


def pagerank(
    n: int,
    src: Sequence[int] | NDArray[np.int64],
    dst: Sequence[int] | NDArray[np.int64],
    *,
    damping: float = DAMPING,
    tol: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
) -> PageRankResult:
    """PageRank of nodes ``0..n-1`` given directed edges ``src[i] → dst[i]``.

    >>> r = pagerank(3, [0, 1, 2], [1, 2, 0])
    >>> [round(float(x), 4) for x in r.scores]
    [0.3333, 0.3333, 0.3333]
    """
    if not 0.0 < damping < 1.0:
        raise ConfigError(f"damping={damping} must be strictly between 0 and 1 (0.85 is usual).")
    if n == 0:
        return PageRankResult(np.zeros(0), 0, True)
    src_a = np.asarray(src, dtype=np.int64)
    dst_a = np.asarray(dst, dtype=np.int64)
    if src_a.shape != dst_a.shape:
        raise ConfigError(f"src and dst differ in length: {src_a.size} vs {dst_a.size}.")
    if src_a.size and (min(src_a.min(), dst_a.min()) < 0 or max(src_a.max(), dst_a.max()) >= n):
        raise ConfigError(f"edge endpoints must lie in 0..{n - 1}.")
    # Duplicate edges count once (a page linking twice to the same target is one vote).
    adjacency = sp.coo_matrix((np.ones(src_a.size), (src_a, dst_a)), shape=(n, n)).tocsr()
    adjacency.data[:] = 1.0
    out_degree = np.asarray(adjacency.sum(axis=1)).ravel()
    dangling = out_degree == 0
    inverse = np.divide(1.0, out_degree, out=np.zeros(n), where=~dangling)
    # transition[dst, src] = 1 / outdeg(src): x_new = transition @ x
    transition = (sp.diags(inverse) @ adjacency).T.tocsr()
    x = np.full(n, 1.0 / n)
    teleport = (1.0 - damping) / n
    for iteration in range(1, max_iterations + 1):
        previous = x
        x = damping * (transition @ x + previous[dangling].sum() / n) + teleport
        if np.abs(x - previous).sum() < n * tol:
            return PageRankResult(x, iteration, True)
    logger.warning("PageRank did not converge in %d iterations (n=%d)", max_iterations, n)
    return PageRankResult(x, max_iterations, False)


RankFn = Callable[[int, NDArray[np.int64], NDArray[np.int64]], PageRankResult]
"""PageRank of nodes ``0..n-1`` from (n, src, dst): :func:`pagerank` here, or an engine's."""


def pagerank_by_key(
    edges: Iterable[tuple[str, str]], nodes: Iterable[str] = (), *, rank: RankFn | None = None
) -> dict[str, float]:
    """PageRank of string-named nodes; ``nodes`` adds pages no edge mentions."""
    index: dict[str, int] = {}
    for node in nodes:
        index.setdefault(node, len(index))
    src: list[int] = []
    dst: list[int] = []
    for a, b in edges:
        src.append(index.setdefault(a, len(index)))
        dst.append(index.setdefault(b, len(index)))
    result = (rank or pagerank)(len(index), np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64))
    return {key: float(result.scores[i]) for key, i in index.items()}


def _with_scaled(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns((pl.col("pagerank") * frame.height).alias("pagerank_scaled"))


def url_pagerank(
    edges: pl.DataFrame, urls: Iterable[str] = (), *, rank: RankFn | None = None
) -> pl.DataFrame:
    """Page-level PageRank from ``src_url, dst_url`` edges: columns url, pagerank, pagerank_scaled."""
    pairs = edges.select("src_url", "dst_url").unique()
    scores = pagerank_by_key(pairs.iter_rows(), urls, rank=rank)
    frame = pl.DataFrame({"url": list(scores), "pagerank": list(scores.values())})
    return _with_scaled(frame).sort("url")


def host_of(url: str) -> str:
    host = (urlsplit(url).hostname or "").lower()
    return host[4:] if host.startswith("www.") else host


def host_pagerank(edges: pl.DataFrame, *, rank: RankFn | None = None) -> pl.DataFrame:
    """Host-level PageRank: one node per host, an edge when any page links across hosts.

    A host graph resists link farms inside one site (their internal links vanish) and
    gives new pages of a known host a prior before their own links are crawled.
    """
    hosts = edges.select(
        pl.col("src_url").map_elements(host_of, return_dtype=pl.String).alias("src"),
        pl.col("dst_url").map_elements(host_of, return_dtype=pl.String).alias("dst"),
    )
    nodes = sorted(set(hosts["src"].to_list()) | set(hosts["dst"].to_list()) - {""})
    across = hosts.filter((pl.col("src") != pl.col("dst")) & (pl.col("src") != "") & (pl.col("dst") != ""))
    scores = pagerank_by_key(across.unique().iter_rows(), nodes, rank=rank)
    frame = pl.DataFrame({"host": list(scores), "pagerank": list(scores.values())})
    return _with_scaled(frame).sort("host")


def beir_link_edges(corpus: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Document ids and (doc, linked doc) edges from a BEIR corpus's ``metadata.links``.

    cisi carries its co-citation links there: a small real graph to rank on.
    """
    ids: list[str] = []
    edges: list[tuple[str, str]] = []
    with corpus.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            record = json.loads(line)
            doc = str(record["_id"])
            ids.append(doc)
            links = (record.get("metadata") or {}).get("links") or []
            edges.extend((doc, str(target)) for target in links)
    known = set(ids)
    return ids, [(a, b) for a, b in edges if b in known]


def beir_pagerank(dataset_root: Path) -> dict[DocId, float]:
    """Scaled PageRank (mean 1) per document of a BEIR collection, keyed like its index."""
    root = Path(dataset_root)
    ids, edges = beir_link_edges(root / "corpus.jsonl")
    scores = pagerank_by_key(edges, ids)
    name = root.resolve().name
    logger.info("PageRank of %s: %d documents, %d links", name, len(ids), len(edges))
    return {DocId(doc_id_for(f"beir:{name}:{doc}")): score * len(ids) for doc, score in scores.items()}


def write_pagerank(frame: pl.DataFrame, path: Path) -> Path:
    """Write a PageRank frame as Parquet (temporary name, then rename)."""
    return write_with(path, frame.write_parquet)


@dataclass(frozen=True, slots=True)
class RankRun:
    """One power iteration of a job: its graph's size and how it converged."""

    nodes: int
    edges: int
    """Distinct edges (duplicates count once)."""
    iterations: int
    converged: bool


@dataclass(frozen=True, slots=True)
class CrawlPageRank:
    """What the link-graph job of a crawl computed and where it wrote it."""

    pages: RankRun
    hosts: RankRun
    pages_path: Path
    hosts_path: Path
    seconds: float


def _recorded(rank: RankFn, runs: list[RankRun]) -> RankFn:
    """``rank``, noting each graph it ranks (the frames keep scores only)."""

    def recorded(n: int, src: NDArray[np.int64], dst: NDArray[np.int64]) -> PageRankResult:
        result = rank(n, src, dst)
        runs.append(RankRun(n, int(src.size), result.iterations, result.converged))
        return result

    return recorded


def crawl_pagerank(data: Path, *, rank: RankFn | None = None) -> CrawlPageRank | None:
    """The link-graph job of a crawl: PageRank of its pages and of its hosts.

    Pages' scores go where index build reads them (``CrawlDir.pagerank``), hosts' beside
    them (``CrawlDir.pagerank_hosts``), each file written atomically after both are
    computed. ``rank`` runs both power iterations (an engine's, e.g.
    ``training.ray_training.ray_rank``). Returns None, writing nothing, for a crawl without
    links.
    """
    crawl = CrawlDir(data)
    if not crawl.links.exists():
        return None
    started = time.perf_counter()
    edges = LinkGraphStore(crawl.links).read_edges()
    if edges.is_empty():
        return None
    runs: list[RankRun] = []
    recording = _recorded(rank or pagerank, runs)
    pages = url_pagerank(edges, rank=recording)
    hosts = host_pagerank(edges, rank=recording)
    write_pagerank(pages, crawl.pagerank)
    write_pagerank(hosts, crawl.pagerank_hosts)
    return CrawlPageRank(
        pages=runs[0],
        hosts=runs[1],
        pages_path=crawl.pagerank,
        hosts_path=crawl.pagerank_hosts,
        seconds=time.perf_counter() - started,
    )


def host_ranks(data: Path) -> dict[str, float]:
    """Host PageRank per host (scaled to mean 1) as the job wrote it; empty when not run.

    Keys are :func:`host_of` a URL (lower case, no ``www.``), so a page's host prior is
    ``host_ranks(data).get(host_of(doc.url), 0.0)``.
    """
    path = CrawlDir(data).pagerank_hosts
    if not path.exists():
        return {}
    frame = pl.read_parquet(path, columns=["host", "pagerank_scaled"])
    return dict(zip(frame["host"].to_list(), frame["pagerank_scaled"].to_list(), strict=True))
