"""The default ranker on websites it was never trained on, against bm25, through the served path.

The packaged LTR model is trained on cranfield, cisi and the crawl-derived Python-docs
set; a user's own crawl is none of these. This bench crawls other real documentation
sites that Debian ships as HTML (each served on loopback and crawled by ``trawl demo
--no-serve``, as the demo crawls the Python docs), builds their crawl-derived judged sets
(``trawl dataset from-crawl``: anchors, titles and headings as known-item queries) and
compares the rankers on them with ``trawl experiment compare`` (paired randomization
test, Holm-adjusted over the B rankers):

    apt-get install postgresql-doc-15 sqlite3-doc   # the sites (optional: missing ones are skipped)
    .venv/bin/python bench/relevance/unseen_sites.py [--site pgdocs] [--rebuild] \\
        [--b ltr:v3] [--out bench/results/unseen-sites.md]

A site that a model was trained on is not unseen for it: its model card lists the
collections it was trained on. The packaged model (``ltr:v4``) is trained on both of these
sites, so its rows here are in-sample; ``ltr-transfer`` is the estimate for a site no
model saw: one model trained on the rest of ``rankers.toml``'s mix (cranfield, cisi, the
Python docs and the other site; leave-one-site-out) scores every query of this one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cli.ports import free_port  # noqa: E402
from training.crawl_sets import SITES as CRAWL_SITES  # noqa: E402
from training.crawl_sets import CrawlSite, build_crawl_set  # noqa: E402

TRAWL = [sys.executable, "-m", "cli.main"]
METRICS = ("ndcg@10", "mrr@10")


SITES = tuple(s for s in CRAWL_SITES.values() if s.name != "pydocs")
"""The two sites besides the demo's (training.crawl_sets builds their judged sets)."""


def _trawl(*args: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    done = subprocess.run([*TRAWL, *args], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"trawl {' '.join(args[:3])} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def compare(dataset: Path, baseline: str, rankers: list[str]) -> dict[str, dict[str, Any]]:
    """``trawl experiment compare --json``: metric → its comparison object."""
    args = ["experiment", "compare", "--a", baseline, "--dataset", str(dataset), "--json"]
    for ranker in rankers:
        args += ["--b", ranker]
    for metric in METRICS:
        args += ["--metric", metric]
    out: dict[str, dict[str, Any]] = json.loads(_trawl(*args))["metrics"]
    return out


def _p_value(comparison: dict[str, Any]) -> float:
    """The Holm-adjusted randomization p when several rankers were compared, else the plain one."""
    return float(comparison.get("p_randomization_holm", comparison["p_randomization"]))


def report_rows(site: CrawlSite, queries: int, result: dict[str, dict[str, Any]]) -> list[str]:
    first = result[METRICS[0]]
    rows = []
    base = " / ".join(f"{result[m]['comparisons'][0]['mean_a']:.4f}" for m in METRICS)
    rows.append(f"| {site.name} ({queries} queries) | {first['a']} | {base} | — | — |")
    for i, comparison in enumerate(first["comparisons"]):
        means = " / ".join(f"{result[m]['comparisons'][i]['mean_b']:.4f}" for m in METRICS)
        deltas = " / ".join(f"{result[m]['comparisons'][i]['delta']:+.4f}" for m in METRICS)
        p = " / ".join(f"{_p_value(result[m]['comparisons'][i]):.4g}" for m in METRICS)
        rows.append(f"| | {comparison['b']} | {means} | {deltas} | {p} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--site", action="append", choices=[s.name for s in SITES], help="Default: every installed one."
    )
    parser.add_argument("--rebuild", action="store_true", help="Crawl again and rebuild the judged sets.")
    parser.add_argument("--a", default="bm25", help="Baseline ranker.")
    parser.add_argument(
        "--b", action="append", help="Compared rankers (default: hybrid, ltr-transfer, ltr:v4)."
    )
    parser.add_argument("--sets", type=Path, default=REPO / "data" / "eval-crawl")
    parser.add_argument("--out", type=Path, help="Write the Markdown table here too.")
    args = parser.parse_args(argv)
    rankers = args.b or ["hybrid", "ltr-transfer", "ltr:v4"]
    lines = [
        f"| site | ranker | nDCG@10 / MRR@10 | Δ vs {args.a} | p (randomization, Holm) |",
        "|---|---|---|---|---|",
    ]
    for site in SITES:
        if args.site and site.name not in args.site:
            continue
        if not (site.root / "index.html").exists():
            print(f"{site.name}: not run ({site.root} missing; apt-get install the package named above)")
            continue
        dataset = args.sets / site.name
        started = time.perf_counter()
        if args.rebuild or not (dataset / "qrels" / "test.tsv").exists():
            build_crawl_set(site.name, dataset, site_port=free_port())
        with (dataset / "queries.jsonl").open(encoding="utf-8") as handle:
            queries = sum(1 for line in handle if line.strip())
        lines += report_rows(site, queries, compare(dataset, args.a, rankers))
        print(f"{site.name}: {site.root}, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
