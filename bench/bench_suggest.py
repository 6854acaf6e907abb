"""Search-as-you-type latency: ``/v1/suggest`` over HTTP at every keystroke, beside two floors.

    .venv/bin/python bench/bench_suggest.py [--docs 100000] [--shards 2] [--queries 150]

1. Builds (once, cached under data/bench/suggest-N-S/) an index root of synthetic documents
   (bench/synth_corpus.py); each also gets three headings, the first words of three of its
   sentences, so the completion structure holds about as many phrases as a real index of
   that size would offer (titles repeat in the synthetic corpus; headings mostly do not).
2. Starts ``trawl serve`` (rate limit off, an empty query log) and times the first
   suggester build (the cost each new generation pays once, in the background).
3. Types the cranfield and cisi queries one key at a time: every prefix of every word, the
   earlier words as context, one request at a time on one keep-alive connection (a person
   typing), each followed by a request to a peer route on the same connection: ``/healthz``
   and ``/opensearch.xml`` (a route that reads nothing), the floor of HTTP, uvicorn,
   FastAPI and the middleware on this machine.

Results go to stdout (JSON) and bench/results/suggest.md, latest run first. Goal: p99 ≤ 10 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_serving import EVAL, free_port, percentile, queries, wait_ready  # noqa: E402
from bench.results_file import record_run  # noqa: E402
from core.types import Document  # noqa: E402
from retrieval.index.root import IndexRoot  # noqa: E402
from retrieval.query.suggest import MAX_TYPED  # noqa: E402

RESULTS = REPO / "bench" / "results" / "suggest.md"
PEERS = ("/healthz", "/opensearch.xml")


def with_headings(docs: Iterator[Document], seed: int = 11) -> Iterator[Document]:
    """Each document with three headings: the first 2–6 words of three of its sentences."""
    rng = random.Random(seed)
    for doc in docs:
        sentences = [s for s in doc.body.split(". ") if s]
        picked = rng.sample(sentences, min(3, len(sentences)))
        headings = tuple(" ".join(s.split()[: rng.randint(2, 6)]).capitalize() for s in picked)
        yield dataclasses.replace(doc, headings=headings)


def build(root: Path, docs: int, shards: int) -> None:
    from bench.synth_corpus import synthetic_documents

    index = IndexRoot(root)
    if index.current() is None:
        t0 = time.perf_counter()
        source = with_headings(synthetic_documents(docs, EVAL))
        index.publish(index.build(source, shards=shards, source=f"synthetic+headings:{docs}"))
        print(f"indexed {docs} docs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def keystrokes(qs: list[str], limit: int) -> list[str]:
    """What the box holds after each key of each query: ``"wh"``, ``"what"``, ``"what s"``, …,
    up to the route's 500 characters (suggest.js asks nothing past them; a paragraph-long CISI
    topic is typed to there)."""
    out: list[str] = []
    for q in qs:
        words = q.lower().split()
        for j, word in enumerate(words):
            context = " ".join(words[:j])
            typed = ((f"{context} {word[:k]}" if context else word[:k]) for k in range(1, len(word) + 1))
            out.extend(t for t in typed if len(t) <= MAX_TYPED)
        if len(out) >= limit:
            break
    return out[:limit]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def summary(latencies_ms: list[float], errors: int) -> dict[str, Any]:
    return {
        "requests": len(latencies_ms),
        "p50_ms": round(percentile(latencies_ms, 50), 2),
        "p90_ms": round(percentile(latencies_ms, 90), 2),
        "p99_ms": round(percentile(latencies_ms, 99), 2),
        "max_ms": round(max(latencies_ms), 2),
        "mean_ms": round(sum(latencies_ms) / len(latencies_ms), 2),
        "errors": errors,
    }


def drive(url: str, typed: list[str]) -> dict[str, dict[str, Any]]:
    """One keep-alive connection: each keystroke's suggest request, then each peer's request."""
    timings: dict[str, list[float]] = {"/v1/suggest": [], **{p: [] for p in PEERS}}
    errors = dict.fromkeys(timings, 0)
    empty = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        for text in typed:
            for path in timings:
                params = {"q": text} if path == "/v1/suggest" else None
                t0 = time.perf_counter()
                answer = client.get(path, params=params)
                timings[path].append((time.perf_counter() - t0) * 1000)
                errors[path] += answer.status_code != 200
                if path == "/v1/suggest" and answer.status_code == 200:
                    empty += not answer.json()["suggestions"]
    out = {path: summary(ms, errors[path]) for path, ms in timings.items()}
    out["/v1/suggest"]["empty_answers"] = empty
    return out


def start(root: Path, port: int, log_dir: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TRAWL_API__RATE_LIMIT_PER_S": "0",
        "TRAWL_API__SUGGEST_AT_START": "false",  # the first build is timed from the first request
        "TRAWL_SEARCH__USE_VECTORS": "false",
        "TRAWL_EXPERIMENTS__LOG_DIR": str(log_dir),
    }
    cmd = [sys.executable, "-m", "cli.main", "serve", "--index", str(root), "--port", str(port)]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def first_build(url: str) -> float:
    """Seconds from the first suggest request until one answers with suggestions."""
    t0 = time.perf_counter()
    while not httpx.get(f"{url}/v1/suggest", params={"q": "a"}, timeout=120).json()["suggestions"]:
        time.sleep(0.5)
    return round(time.perf_counter() - t0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--keystrokes", type=int, default=10_000, help="suggest requests to time")
    args = parser.parse_args()
    root = REPO / "data" / "bench" / f"suggest-{args.docs}-{args.shards}"
    build(root, args.docs, args.shards)
    typed = keystrokes(queries(), args.keystrokes)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as logs:
        server = start(root, port, Path(logs))
        try:
            wait_ready(url, server)
            rss_before = rss_mib(server.pid)
            build_s = first_build(url)
            results: dict[str, Any] = {
                "docs": args.docs,
                "shards": args.shards,
                "first_build_s": build_s,
                "server_rss_mib_before_after_build": [rss_before, rss_mib(server.pid)],
                "load_average_before": round(load_before, 2),
            }
            drive(url, typed[:500])  # warm: connection, page cache, code paths
            results.update(drive(url, typed))
        finally:
            server.terminate()
            server.wait(timeout=60)
    json.dump(results, sys.stdout, indent=1)
    sys.stdout.write("\n")
    write_report(args, results, len(typed))


def write_report(args: argparse.Namespace, results: dict[str, Any], keystrokes_timed: int) -> None:
    rows = ["| route | requests | p50 ms | p90 ms | p99 ms | max ms | mean ms | errors |", "|---" * 8 + "|"]
    for path in ("/v1/suggest", *PEERS):
        r = results[path]
        cells = [path, *(str(r[c]) for c in ("requests", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms"))]
        rows.append("| " + " | ".join([*cells, str(r["errors"])]) + " |")
    before, after = results["server_rss_mib_before_after_build"]
    text = (
        f"{args.docs:,} documents, {args.shards} shards; `python bench/bench_suggest.py`; "
        f"{platform.machine()}, {os.cpu_count()} cores, "
        f"load average {results['load_average_before']} before.\n\n"
        f"{keystrokes_timed:,} keystrokes (every prefix of every word of the cranfield and cisi queries, "
        "earlier words as context), one at a time on one connection, each followed by one request "
        f"to each peer route. {results['/v1/suggest']['empty_answers']:,} suggest answers were empty.\n\n"
        + "\n".join(rows)
        + f"\n\nFirst suggester build: {results['first_build_s']} s after the first request "
        f"(server RSS {before} MiB before, {after} MiB after).\n"
    )
    intro = (
        "# Suggestions: search-as-you-type latency\n\nMade by `bench/bench_suggest.py` (see its docstring).\n"
    )
    record_run(RESULTS, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), text, intro=intro)


if __name__ == "__main__":
    main()
