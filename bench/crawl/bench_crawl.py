"""Crawl throughput and memory: Trawl vs a minimal asyncio+httpx+selectolax loop (and Scrapy
when ``/tmp/scrapy-venv`` exists), same site, same concurrency, same run.

    .venv/bin/python bench/crawl/bench_crawl.py [--hosts 20] [--pages-per-host 250] [--repeat 3]

Each crawler runs as its own process under ``/usr/bin/time`` (peak RSS, CPU seconds);
politeness delays are zero. Also reports extraction throughput (``crawl.extract``
against bare selectolax parsing) on the same pages, and on the Python docs when
``/usr/share/doc/python3.11/html`` exists.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_site import BenchSite  # noqa: E402

SCRAPY_PYTHON = Path("/tmp/scrapy-venv/bin/python")


def _timed(command: list[str], env: dict[str, str]) -> tuple[dict, float, float, float]:
    """Run under /usr/bin/time: (json from stdout, wall s, cpu s, peak RSS MB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as times:
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-o", times.name, "-f", "%M %U %S", *command],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{command[:3]} failed: {done.stderr[-2000:]}")
        rss_kb, user, system = times.read().split()[-3:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]), wall, float(user) + float(system), int(rss_kb) / 1024


EXTRA_PATH: list[str] = []
"""``--pythonpath`` entries, put in front for both httpx crawlers alike (e.g. sniffio)."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*EXTRA_PATH, str(REPO)])
    return env


def run_minimal(site: BenchSite, concurrency: int) -> dict[str, float]:
    result, wall, cpu, rss = _timed(
        [
            sys.executable,
            str(Path(__file__).parent / "minimal_httpx.py"),
            "--concurrency",
            str(concurrency),
            *site.seeds,
        ],
        _env(),
    )
    return {"pages": result["pages"], "elapsed_s": result["elapsed_s"], "cpu_s": cpu, "rss_mb": rss}


def run_trawl(site: BenchSite, concurrency: int) -> dict[str, float]:
    env = _env()
    env.update(
        {
            "TRAWL_CRAWL__RESPONSE_TIME_FACTOR": "0",
            "TRAWL_CRAWL__MAX_PAGES": "1000000",
            "TRAWL_CRAWL__MAX_PAGES_PER_HOST": "1000000",
            "TRAWL_CRAWL__MAX_DEPTH": "1000",
        }
    )
    with tempfile.TemporaryDirectory() as data:
        result, wall, cpu, rss = _timed(
            [
                sys.executable,
                "-m",
                "cli.main",
                "crawl",
                *site.seeds,
                "--data",
                data,
                "--allow-loopback",
                "--delay",
                "0",
                "--concurrency",
                str(concurrency),
                "--no-progress",
                "--json",
            ],
            env,
        )
    return {
        "pages": result["pages"],
        "elapsed_s": result["elapsed_s"],
        "cpu_s": cpu,
        "rss_mb": rss,
        "indexed": result["indexed"],
    }


def run_scrapy(site: BenchSite, concurrency: int) -> dict[str, float]:
    result, wall, cpu, rss = _timed(
        [
            str(SCRAPY_PYTHON),
            str(Path(__file__).parent / "scrapy_peer.py"),
            "--concurrency",
            str(concurrency),
            *site.seeds,
        ],
        dict(os.environ),
    )
    return {"pages": result["pages"], "elapsed_s": result["elapsed_s"], "cpu_s": cpu, "rss_mb": rss}


def extraction(pages: list[bytes], label: str) -> None:
    from selectolax.lexbor import LexborHTMLParser

    from crawl.content import decode_html
    from crawl.dedup import fingerprints
    from crawl.extract import parse_html

    texts = [p.decode("utf-8", "replace") for p in pages]
    started = time.process_time()
    for text in texts:
        tree = LexborHTMLParser(text)
        if tree.body is not None:
            tree.body.text(separator=" ")
        [a.attributes.get("href") for a in tree.css("a[href]")]
    bare = len(texts) / (time.process_time() - started)
    started = time.process_time()
    for i, raw in enumerate(pages):
        html, _ = decode_html(raw, "utf-8")
        page = parse_html(html, f"http://127.0.0.1:8000/dir/page{i}.html")
        fingerprints(page.body)
    ours = len(pages) / (time.process_time() - started)
    mb = sum(map(len, pages)) / 1e6
    print(
        f"extraction [{label}: {len(pages)} pages, {mb:.1f} MB]: bare selectolax {bare:.0f} pages/s; "
        f"crawl.extract + dedup fingerprints {ours:.0f} pages/s ({ours / bare:.2f}×)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages-per-host", type=int, default=250)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pythonpath", action="append", default=[], help="Extra import path for both.")
    parser.add_argument("--no-scrapy", action="store_true")
    args = parser.parse_args()
    EXTRA_PATH.extend(args.pythonpath)
    runners = {"minimal httpx+selectolax": run_minimal, "trawl crawl": run_trawl}
    if SCRAPY_PYTHON.exists() and not args.no_scrapy:
        runners["scrapy"] = run_scrapy
    results: dict[str, list[dict[str, float]]] = {name: [] for name in runners}
    with BenchSite(args.hosts, args.pages_per_host) as site:
        time.sleep(1.0)
        print(f"site: {site.page_count} pages on {args.hosts} hosts; concurrency {args.concurrency}")
        for rep in range(args.repeat):
            for name, run in runners.items():
                outcome = run(site, args.concurrency)
                results[name].append(outcome)
                print(f"  rep {rep + 1} {name}: {outcome}", flush=True)
        pages = list(site.pages.values())
    print()
    print("| crawler | pages | pages/s (median) | CPU ms/page | peak RSS MB | vs minimal |")
    print("|---|---|---|---|---|---|")
    base = statistics.median(r["pages"] / r["elapsed_s"] for r in results["minimal httpx+selectolax"])
    for name, runs in results.items():
        rate = statistics.median(r["pages"] / r["elapsed_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] * 1000 / r["pages"] for r in runs)
        rss = max(r["rss_mb"] for r in runs)
        print(
            f"| {name} | {int(runs[0]['pages'])} | {rate:.0f} | {cpu:.2f} | {rss:.0f} | {rate / base:.2f}× |"
        )
    print()
    extraction(pages[:2000], "benchmark site")
    docs = sorted(glob.glob("/usr/share/doc/python3.11/html/**/*.html", recursive=True))
    if docs:
        extraction([Path(p).read_bytes() for p in docs], "Python docs")


if __name__ == "__main__":
    main()
