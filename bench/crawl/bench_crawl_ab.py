"""One SQLite crawl worker of two code trees, interleaved, beside the minimal httpx loop.

    git worktree add /tmp/base <commit>
    python bench/crawl/bench_crawl_ab.py --base /tmp/base --repeat 5

``bench_crawl.py`` compares Trawl with its peers; this compares Trawl with itself, for a
change to the worker. On a shared 2-core machine runs drift by more than a few percent
between minutes, so the two trees (and the minimal loop, as the yardstick) run in turn on
the same benchmark site, and the report gives the median of each and how many of the
paired runs the working tree won.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_crawl import REPO, run_minimal, run_trawl  # noqa: E402
from bench_site import BenchSite  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", type=Path, required=True, help="A checkout of the code to compare with.")
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages-per-host", type=int, default=250)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "this tree": REPO}
    runs: dict[str, list[dict[str, float]]] = {"minimal": [], "base": [], "this tree": []}
    with BenchSite(args.hosts, args.pages_per_host) as site:
        time.sleep(1.0)
        for rep in range(args.repeat):
            runs["minimal"].append(run_minimal(site, args.concurrency))
            for label, tree in trees.items():
                runs[label].append(run_trawl(site, args.concurrency, tree=tree))
            rates = ", ".join(f"{k} {_rate(v[-1]):.0f} pages/s" for k, v in runs.items())
            print(f"  rep {rep + 1}: {rates}", flush=True)
    print("| run | pages/s (median) | CPU ms/page (median) | peak RSS MB | vs minimal |")
    print("|---|---|---|---|---|")
    base_rate = statistics.median(_rate(r) for r in runs["minimal"])
    for label, results in runs.items():
        rate = statistics.median(_rate(r) for r in results)
        cpu = statistics.median(r["cpu_s"] * 1000 / r["pages"] for r in results)
        peak = max(r["rss_mb"] for r in results)
        print(f"| {label} | {rate:.0f} | {cpu:.2f} | {peak:.0f} | {rate / base_rate:.2f}× |")
    wins = sum(_rate(a) > _rate(b) for a, b in zip(runs["this tree"], runs["base"], strict=True))
    ratio = statistics.median(_rate(r) for r in runs["this tree"]) / statistics.median(
        _rate(r) for r in runs["base"]
    )
    print(f"this tree / base: {ratio:.3f}× pages/s; faster in {wins} of {args.repeat} pairs")


def _rate(run: dict[str, float]) -> float:
    return run["pages"] / run["elapsed_s"]


if __name__ == "__main__":
    main()
