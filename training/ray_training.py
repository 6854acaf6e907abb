"""The training batch jobs on Ray: PageRank (pages and hosts) and LTR feature frames.

**PageRank**: the edges are partitioned by source block, one actor per block. A block
holds every out-edge of its sources, so out-degrees and dangling pages are exact inside
it; each iteration the driver sends each block its slice of ``x``, the blocks return
their ``Mᵀx`` contributions, and the driver applies the local job's rule
(:mod:`training.pagerank`: damping 0.85, dangling mass spread evenly, duplicate edges
once, stop when the L1 change is below ``n · tol``). Only the sum's order differs from the
scipy product, so the two agree to ~1e-15.

**Feature frames**: per-query tasks on actors that each open the collection's retrieval
once (:func:`training.frames.open_retrieval`) and call
:func:`training.frames.build_frame` for their queries; the driver concatenates the
parts in query order and writes the Parquet file ``collection_frame`` caches, so
``trawl train ltr`` reads it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp
from numpy.typing import NDArray

from core.atomic import write_with
from core.jobs import cluster_cpus, import_ray
from core.settings import Settings
from core.types import DocId, Query
from retrieval.vectors.embed import Embedder
from training.datasets import BeirDataset
from training.pagerank import DAMPING, MAX_ITERATIONS, TOLERANCE, PageRankResult, RankFn, beir_pagerank

# -- PageRank --------------------------------------------------------------------------------------


class EdgeBlock:
    """The out-edges of sources ``lo..hi-1``: their share of ``Mᵀx`` each iteration."""

    def __init__(self, n: int, lo: int, hi: int, src: NDArray[np.int64], dst: NDArray[np.int64]) -> None:
        self.lo, self.hi = lo, hi
        adjacency = sp.coo_matrix((np.ones(src.size), (src - lo, dst)), shape=(hi - lo, n)).tocsr()
        adjacency.data[:] = 1.0  # duplicate edges count once
        out_degree = np.asarray(adjacency.sum(axis=1)).ravel()
        self.dangling_mask = out_degree == 0
        inverse = np.divide(1.0, out_degree, out=np.zeros(hi - lo), where=~self.dangling_mask)
        self.transition = (sp.diags(inverse) @ adjacency).T.tocsr()

    def dangling(self) -> NDArray[np.int64]:
        """Global ids of this block's sources without out-links."""
        return np.flatnonzero(self.dangling_mask).astype(np.int64) + self.lo

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def step(self, x_block: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(self.transition @ x_block)


def ray_pagerank(
    n: int,
    src: NDArray[np.int64],
    dst: NDArray[np.int64],
    *,
    blocks: int | None = None,
    damping: float = DAMPING,
    tol: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
    on_iteration: Callable[[int, float], None] | None = None,
) -> PageRankResult:
    """:func:`training.pagerank.pagerank` on the connected Ray, ``blocks`` source blocks
    (default: one per CPU of the cluster); ``on_iteration(i, l1 change)`` after each step."""
    ray = import_ray()
    if n == 0:
        return PageRankResult(np.zeros(0), 0, True)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    count = max(1, min(n, blocks or cluster_cpus(ray)))
    bounds = np.linspace(0, n, count + 1).astype(np.int64)
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    cuts = np.searchsorted(src, bounds)
    # A CPU per block while they fit (so blocks spread over nodes), else none: never wait for CPUs.
    cpus = 1 if count <= cluster_cpus(ray) else 0
    block = ray.remote(num_cpus=cpus, max_restarts=0, scheduling_strategy="SPREAD")(EdgeBlock)
    actors = [
        block.remote(
            n, int(bounds[b]), int(bounds[b + 1]), src[cuts[b] : cuts[b + 1]], dst[cuts[b] : cuts[b + 1]]
        )
        for b in range(count)
    ]
    try:
        dangling = np.concatenate(ray.get([a.dangling.remote() for a in actors]))
        x = np.full(n, 1.0 / n)
        teleport = (1.0 - damping) / n
        for iteration in range(1, max_iterations + 1):
            previous = x
            parts = ray.get(
                [a.step.remote(previous[bounds[b] : bounds[b + 1]]) for b, a in enumerate(actors)]
            )
            x = damping * (np.sum(parts, axis=0) + previous[dangling].sum() / n) + teleport
            change = float(np.abs(x - previous).sum())
            if on_iteration is not None:
                on_iteration(iteration, change)
            if change < n * tol:
                return PageRankResult(x, iteration, True)
        return PageRankResult(x, max_iterations, False)
    finally:
        for actor in actors:
            ray.kill(actor)


def ray_rank(
    *, blocks: int | None = None, on_iteration: Callable[[int, float], None] | None = None
) -> RankFn:
    """A ``rank`` for :func:`training.pagerank.url_pagerank` / ``host_pagerank`` / ``crawl_pagerank``
    (the pages' and the hosts' power iterations alike); ``on_iteration`` as in :func:`ray_pagerank`."""

    def rank(n: int, src: NDArray[np.int64], dst: NDArray[np.int64]) -> PageRankResult:
        return ray_pagerank(n, src, dst, blocks=blocks, on_iteration=on_iteration)

    return rank


# -- feature frames --------------------------------------------------------------------------------


class FrameWorker:
    """Opens a collection's retrieval once; builds the frame rows of the queries it is given."""

    def __init__(
        self, dataset_dir: str, index_dir: str, settings: Settings, queries: dict[str, Query]
    ) -> None:
        # lazy: tantivy and hnswlib, which the PageRank actors (this module too) never need
        from training.frames import beir_labels, open_retrieval

        self.dataset = BeirDataset.open(Path(dataset_dir))
        self.queries = queries
        self.retrieval = open_retrieval(Path(index_dir), settings, queries)
        self.labels = beir_labels(self.dataset, self.dataset.qrels())
        pagerank: dict[DocId, float] = beir_pagerank(self.dataset.root)
        self.static = {d: {"pagerank": v} for d, v in pagerank.items()}

    def frame(self, qids: list[str], depth: int) -> pl.DataFrame:
        # lazy: as in __init__
        from training.frames import build_frame

        return build_frame(
            self.dataset.name,
            {q: self.queries[q] for q in qids},
            self.retrieval,
            self.labels,
            depth=depth,
            static=self.static,
        )


def ray_collection_frame(
    dataset_dir: Path,
    settings: Settings,
    *,
    queries: Mapping[str, Query] | None = None,
    depth: int | None = None,
    actors: int | None = None,
    queries_per_task: int = 8,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[Path, pl.DataFrame]:
    """The training frame of a BEIR collection built on Ray, written where ``collection_frame``
    reads it (kept when already there); returns (path, frame)."""
    # lazy: tantivy and hnswlib, which the PageRank actors (this module too) never need
    from retrieval.batch.ray_jobs import ray_encoder
    from retrieval.vectors.backfill import backfill_index  # lazy: as above
    from training.eval_index import cached_index, parse_queries  # lazy: as above
    from training.frames import empty_frame, frame_cache_path  # lazy: as above

    ray = import_ray()
    dataset = BeirDataset.open(dataset_dir)
    depth = depth or settings.search.candidate_k
    index_dir, cache_dir = cached_index(dataset, settings)
    chosen = dict(queries) if queries is not None else parse_queries(dataset.judged_queries())
    path = frame_cache_path(cache_dir, settings, chosen, depth)
    if path.exists():
        return path, pl.read_parquet(path)
    backfill_index(
        index_dir,
        Embedder.from_settings(settings.embed),
        settings.embed,
        encode=ray_encoder(settings.embed, threads=settings.jobs.actor_threads),
    )
    pool = max(1, min(actors or cluster_cpus(ray), len(chosen)))
    worker = ray.remote(num_cpus=1, max_restarts=0)(FrameWorker)
    handles = [worker.remote(str(dataset.root), str(index_dir), settings, chosen) for _ in range(pool)]
    qids = list(chosen)
    tasks = [qids[i : i + queries_per_task] for i in range(0, len(qids), queries_per_task)]
    try:
        refs = [handles[i % pool].frame.remote(chunk, depth) for i, chunk in enumerate(tasks)]
        index = {ref: i for i, ref in enumerate(refs)}
        parts: dict[int, pl.DataFrame] = {}
        remaining = list(refs)
        while remaining:
            ready, remaining = ray.wait(remaining, num_returns=1)
            parts[index[ready[0]]] = ray.get(ready[0])
            if on_progress is not None:
                on_progress(sum(len(tasks[i]) for i in parts), len(qids))
    finally:
        for handle in handles:
            ray.kill(handle)
    frame = pl.concat([parts[i] for i in range(len(tasks))], how="vertical") if tasks else empty_frame()
    write_with(path, frame.write_parquet)
    return path, frame


def frame_job_summary(path: Path, frame: pl.DataFrame) -> dict[str, Any]:
    """Rows, queries and file of a written frame (what the command prints)."""
    return {
        "path": str(path),
        "rows": frame.height,
        "queries": frame["qid"].n_unique() if frame.height else 0,
    }
