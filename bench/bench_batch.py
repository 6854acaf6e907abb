"""Batch jobs on Ray against the local path: backfill throughput, 2-shard index build, PageRank.

Targets (2 cores): Ray backfill ≥ 0.85× the local passages/s; the 100K-document synthetic
corpus indexed with 2 shards on Ray ≥ 1.5× the local sequential build; PageRank on a
1M-edge graph reported beside the local job. Ray is started here, sized to the machine.

Example: HF_HUB_OFFLINE=1 python bench/bench_batch.py --docs 100000 --backfill-docs 2000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from bench.synth_corpus import synthetic_documents
from core.settings import EmbedSettings
from retrieval.batch.ray_jobs import ray_build_index, ray_encoder
from retrieval.index.build import build_index
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from training.pagerank import pagerank
from training.ray_training import ray_pagerank

EVAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "eval"


def backfill(work: Path, docs: int, eval_dir: Path) -> dict[str, float]:
    corpus = list(synthetic_documents(docs, eval_dir, seed=11))
    settings = EmbedSettings()
    embedder = Embedder.from_settings(settings)
    out: dict[str, float] = {}
    for engine in ("local", "ray"):
        index = work / f"embed-{engine}"
        build_index(corpus, index)
        encode = ray_encoder(settings) if engine == "ray" else None
        report = backfill_index(index, embedder, settings, encode=encode)
        out[f"backfill_{engine}_passages_per_s"] = report.encoded / report.seconds
        out["backfill_passages"] = report.encoded
    out["backfill_ray_vs_local"] = out["backfill_ray_passages_per_s"] / out["backfill_local_passages_per_s"]
    return out


def index_build(work: Path, docs: int, eval_dir: Path) -> dict[str, float]:
    started = time.perf_counter()
    build_index(synthetic_documents(docs, eval_dir), work / "index-local", shards=2)
    local = time.perf_counter() - started
    started = time.perf_counter()
    ray_build_index(partial(synthetic_documents, docs, eval_dir), work / "index-ray", shards=2)
    ray = time.perf_counter() - started
    return {
        "index_docs": docs,
        "index_local_s": local,
        "index_ray_s": ray,
        "index_ray_speedup": local / ray,
        "index_local_docs_per_s": docs / local,
    }


def ranks(edges: int) -> dict[str, float]:
    rng = np.random.default_rng(3)
    n = edges // 10
    src, dst = rng.integers(0, n, edges), rng.zipf(1.5, edges) % n
    started = time.perf_counter()
    local = pagerank(n, src, dst)
    local_s = time.perf_counter() - started
    started = time.perf_counter()
    ray = ray_pagerank(n, src, dst)
    ray_s = time.perf_counter() - started
    return {
        "pagerank_edges": edges,
        "pagerank_local_s": local_s,
        "pagerank_ray_s": ray_s,
        "pagerank_iterations": local.iterations,
        "pagerank_max_diff": float(np.abs(local.scores - ray.scores).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000, help="Index-build corpus size.")
    parser.add_argument("--backfill-docs", type=int, default=2000, help="Documents embedded per engine.")
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--eval-dir", type=Path, default=EVAL)
    parser.add_argument("--out", type=Path, default=Path("bench/results/batch.json"))
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    try:
        results: dict[str, float] = {"cpus": float(os.cpu_count() or 1)}
        results |= ranks(args.edges)
        results |= index_build(work, args.docs, args.eval_dir)
        results |= backfill(work, args.backfill_docs, args.eval_dir)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    for key, value in results.items():
        print(f"{key:32s} {value:,.4g}")


if __name__ == "__main__":
    main()
