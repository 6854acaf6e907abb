"""What page-quality tiers cost a BM25 query: the demo site's pages indexed with their tiers against
the same pages indexed without (every page at quality 1), the same queries, in one run.

    python bench/bench_page_quality.py --corpus data/eval-crawl/pydocs --queries 600
    python bench/bench_page_quality.py --synthetic 50000   # one page in fifty a listing

A shard with demoted pages ranks a window of plain BM25 hits by BM25 × quality
(retrieval.index.lexical); this measures that against the plain search of an index without
demoted pages, alternating the two indexes over three rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from core.settings import SearchSettings  # noqa: E402
from retrieval.index.build import build_index  # noqa: E402
from retrieval.index.page_quality import quality_of  # noqa: E402
from retrieval.query.request import SearchRequest  # noqa: E402
from retrieval.query.service import SearchService  # noqa: E402
from training.datasets import BeirDataset  # noqa: E402


def timed(services: dict[str, SearchService], queries: list[str], rounds: int = 3) -> dict[str, list[float]]:
    """Seconds per bm25 search, each index in turn, the order flipped every round."""
    for q in queries[:50]:  # warm both
        for service in services.values():
            service.search(SearchRequest(q, ranker="bm25"))
    times: dict[str, list[float]] = {k: [] for k in services}
    for rnd in range(rounds):
        order = list(services.items())
        for name, service in order if rnd % 2 == 0 else reversed(order):
            for q in queries:
                started = time.perf_counter()
                service.search(SearchRequest(q, ranker="bm25"))
                times[name].append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=REPO / "data" / "eval-crawl" / "pydocs")
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--synthetic", type=int, help="N synthetic pages (bench/synth_corpus.py) instead.")
    args = parser.parse_args()
    dataset = BeirDataset.open(args.corpus)
    queries = list(dataset.queries().values())[: args.queries]
    if args.synthetic:
        from bench.synth_corpus import synthetic_documents  # lazy: only this mode reads the collections

        synthetic = synthetic_documents(args.synthetic, REPO.parent / "shared" / "data" / "eval")
        # Every fiftieth page a listing: all of its words inside links.
        docs = [dataclasses.replace(d, link_words=len(d.body.split())) if i % 50 == 0 else d
                for i, d in enumerate(synthetic)]  # fmt: skip
    else:
        docs = list(dataset.iter_documents())
    settings = SearchSettings(use_vectors=False, cache_entries=0, spelling=False)
    with tempfile.TemporaryDirectory() as tmp:
        build_index(docs, Path(tmp) / "tiers")
        build_index([dataclasses.replace(d, link_words=0) for d in docs], Path(tmp) / "none")
        services = {k: SearchService.open(Path(tmp) / k, settings) for k in ("tiers", "none")}
        try:
            times = timed(services, queries)
        finally:
            for service in services.values():
                service.close()
    demoted = sum(1 for d in docs if quality_of(d).score < 1.0)
    print(json.dumps({
        "documents": len(docs), "demoted": demoted, "queries": len(queries),
        **{k: {"p50_ms": round(1000 * statistics.median(v), 3),
               "p90_ms": round(1000 * sorted(v)[int(0.9 * len(v))], 3)} for k, v in times.items()},
        "p50_ratio": round(statistics.median(times["tiers"]) / statistics.median(times["none"]), 3),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
