"""Query latency of Trawl's search path against a bare Tantivy searcher on the same index.

Both sides answer the same queries over the same on-disk index, in one process,
interleaved query by query so machine noise hits both alike:

* bare Tantivy: ``index.parse_query_lenient`` over the analysed query text, top 10,
  and the 10 stored documents read back (what any Tantivy app must do);
* Trawl: ``SearchService.search`` — analyzer, boolean query with field boosts and
  filters, top 10, stored documents, highlighted snippets, response object.

Usage: python bench/bench_search.py [--dataset DIR] [--repeat 3]
Prints p50/p99 for each and their ratio (Trawl / bare) as JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tantivy

from core.errors import QueryError
from core.settings import SearchSettings
from retrieval.index.build import build_index
from retrieval.index.layout import lexical_dir
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.text.tokenizer import analyzed_text
from training.datasets import BeirDataset


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dataset", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/eval/cranfield"
    )
    parser.add_argument(
        "--index", type=Path, default=None, help="use an existing index instead of building one"
    )
    parser.add_argument(
        "--queries", type=Path, default=None, help="one query per line (default: the dataset's)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="trawl-bench-"))
    if args.index is None:
        dataset = BeirDataset.open(args.dataset)
        index_dir = tmp / "index"
        build_index(dataset.iter_documents(), index_dir)
        queries = list(dataset.queries().values())
    else:
        index_dir = args.index
        queries = args.queries.read_text().splitlines() if args.queries else []
    # The response cache is off: every query must do the work.
    service = SearchService.open(index_dir, SearchSettings(cache_entries=0))
    bare = tantivy.Index.open(str(lexical_dir(index_dir, 0)))
    searcher = bare.searcher()
    fields = ["title", "headings", "body", "anchors"]

    def run_bare(raw: str) -> int:
        text = analyzed_text(raw)
        query, _errors = bare.parse_query_lenient(text, fields)
        hits = searcher.search(query, limit=10).hits
        for _, address in hits:
            searcher.doc(address)
        return len(hits)

    shard = service.generation.broker.shards[0][0].lexical  # type: ignore[attr-defined]

    def run_trawl_no_snippets(raw: str) -> int:
        """Trawl's retrieval alone: analyzer, query build, search, stored documents."""
        try:
            result = shard.search(service.parse(SearchRequest(raw)), k=10)
        except QueryError:
            return 0
        for address in result.addresses:
            shard.stored_at(address)
        return len(result.hits)

    def run_trawl(raw: str) -> int:
        try:
            return len(service.search(SearchRequest(raw, size=10)).hits)
        except QueryError:
            return 0

    for q in queries[:20]:  # warm both
        run_bare(q)
        run_trawl(q)
    bare_ms: list[float] = []
    trawl_ms: list[float] = []
    retrieval_ms: list[float] = []
    for _ in range(args.repeat):
        for q in queries:
            t0 = time.perf_counter()
            run_bare(q)
            t1 = time.perf_counter()
            run_trawl(q)
            t2 = time.perf_counter()
            run_trawl_no_snippets(q)
            t3 = time.perf_counter()
            bare_ms.append((t1 - t0) * 1000)
            trawl_ms.append((t2 - t1) * 1000)
            retrieval_ms.append((t3 - t2) * 1000)
    out = {
        "queries": len(queries),
        "repeat": args.repeat,
        "bare_tantivy_ms": {
            "p50": percentile(bare_ms, 50),
            "p99": percentile(bare_ms, 99),
            "mean": statistics.fmean(bare_ms),
        },
        "trawl_retrieval_ms": {
            "p50": percentile(retrieval_ms, 50),
            "p99": percentile(retrieval_ms, 99),
            "mean": statistics.fmean(retrieval_ms),
        },
        "trawl_ms": {
            "p50": percentile(trawl_ms, 50),
            "p99": percentile(trawl_ms, 99),
            "mean": statistics.fmean(trawl_ms),
        },
    }
    out["ratio_p50"] = out["trawl_ms"]["p50"] / out["bare_tantivy_ms"]["p50"]
    out["ratio_p99"] = out["trawl_ms"]["p99"] / out["bare_tantivy_ms"]["p99"]
    out["retrieval_ratio_p50"] = out["trawl_retrieval_ms"]["p50"] / out["bare_tantivy_ms"]["p50"]
    out["retrieval_ratio_p99"] = out["trawl_retrieval_ms"]["p99"] / out["bare_tantivy_ms"]["p99"]
    json.dump({k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
