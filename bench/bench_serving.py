"""Serving benchmark: QPS and latency over HTTP for bm25, hybrid and ltr on a 100K-document index,
beside a bare Tantivy + hnswlib search over the same data in the same run.

    python bench/bench_serving.py [--docs 100000] [--shards 2] [--duration 60] [--clients 1,8]

1. Builds (once, cached under data/bench/) an index root of synthetic documents made from
   the evaluation corpora (see bench/synth_corpus.py) and embeds one short passage per
   document (MiniLM embeds ~30–80 full documents/s on 2 cores; these are ~80 words).
2. Starts `trawl serve` (response cache off, rate limit off) and drives it over HTTP
   from this process with C concurrent clients for D seconds per ranker, queries drawn
   from the cranfield and cisi query sets.
3. Runs the peer in this process: bare Tantivy (lenient parser over the same shards)
   plus hnswlib k-NN over the same vectors with the same query encoding, with the same
   concurrency and duration.

Results go to stdout (JSON) and bench/results/serving.md. The load generator shares the
two cores with the server, so absolute numbers are pessimistic; compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.settings import Settings  # noqa: E402
from retrieval.manifest import IndexRoot, resolve_index  # noqa: E402
from training.datasets import BeirDataset  # noqa: E402

EVAL = REPO.parent / "shared" / "data" / "eval"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return (
        ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else float("nan")
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def queries() -> list[str]:
    out = []
    for name in ("cranfield", "cisi"):
        out.extend(BeirDataset.open(EVAL / name).queries().values())
    random.Random(3).shuffle(out)
    return out


def build(root: Path, docs: int, shards: int, passage_words: int) -> None:
    from bench.synth_corpus import synthetic_documents

    index = IndexRoot(root)
    if index.current() is None:
        t0 = time.perf_counter()
        generation = index.build(synthetic_documents(docs, EVAL), shards=shards, source=f"synthetic:{docs}")
        index.publish(generation)
        print(f"indexed {docs} docs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    embed_short_passages(resolve_index(root), passage_words)


def embed_short_passages(gen_dir: Path, words: int) -> None:
    """One vector per document from its title and first ``words`` words (see module doc).

    `trawl embed` embeds every passage of every document; at ~30–80 documents/s on two
    cores that is hours for 100K documents, so the benchmark embeds one short passage
    each and writes the same vector layout the backfill writes.
    """
    import numpy as np

    from core.atomic import write_text
    from retrieval import layout
    from retrieval.embed import Embedder
    from retrieval.lexical import LexicalShard
    from retrieval.manifest import IndexManifest
    from retrieval.vector import VectorShard, current_version

    settings = Settings().embed.model_copy(update={"max_seq_length": 64, "batch_size": 64})
    embedder = Embedder.from_settings(settings)
    for shard in range(IndexManifest.load(gen_dir).shards):
        if current_version(gen_dir, shard) is not None:
            continue
        t0 = time.perf_counter()
        docs = list(LexicalShard(layout.lexical_dir(gen_dir, shard)).iter_stored())
        texts = [f"{d.title}. {' '.join(d.body.split()[:words])}" for d in docs]
        vectors = np.vstack([embedder.encode(texts[i : i + 1024]) for i in range(0, len(texts), 1024)])
        index = VectorShard.from_settings(
            settings, dim=embedder.dim, model_id=embedder.model_id, capacity=len(docs)
        )
        index.add([int(d.doc_id) for d in docs], vectors)
        index.save(layout.vector_index_dir(layout.version_dir(gen_dir, shard, embedder.model_id)))
        write_text(layout.vector_pointer(gen_dir, shard), layout.version_name(embedder.model_id) + "\n")
        print(f"shard {shard}: {len(docs)} vectors in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def drive(url: str, ranker: str, qs: list[str], clients: int, duration: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop = time.perf_counter() + duration

    def worker(offset: int) -> None:
        nonlocal errors
        local: list[float] = []
        bad = 0
        with httpx.Client(base_url=url, timeout=30) as client:
            i = offset
            while time.perf_counter() < stop:
                q = qs[i % len(qs)]
                i += clients
                t0 = time.perf_counter()
                r = client.get("/v1/search", params={"q": q, "ranker": ranker})
                local.append((time.perf_counter() - t0) * 1000)
                bad += r.status_code >= 500 or r.status_code == 429
        with lock:
            latencies.extend(local)
            errors += bad

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarize(latencies, duration, errors)


def summarize(latencies: list[float], duration: float, errors: int) -> dict[str, Any]:
    return {
        "requests": len(latencies),
        "qps": round(len(latencies) / duration, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "mean_ms": round(statistics.fmean(latencies), 2) if latencies else None,
        "errors": errors,
    }


def bare_peer(root: Path, qs: list[str], clients: int, duration: float, *, hybrid: bool) -> dict[str, Any]:
    """Tantivy's own query parser + hnswlib over the same shard files, no Trawl code on the path
    except the analyser (the indexes hold analysed tokens) and, for hybrid, the same encoder."""
    import heapq

    import tantivy

    from retrieval import layout
    from retrieval.embed import Embedder
    from retrieval.manifest import IndexManifest
    from retrieval.tokenizer import analyzed_text
    from retrieval.vector import VectorShard, current_version

    gen = resolve_index(root)
    manifest = IndexManifest.load(gen)
    shards = [tantivy.Index.open(str(layout.lexical_dir(gen, i))) for i in range(manifest.shards)]
    searchers = [s.searcher() for s in shards]
    vectors = []
    encoder = None
    if hybrid:
        for i in range(manifest.shards):
            version = current_version(gen, i)
            assert version is not None, "run the embedding step first"
            vectors.append(VectorShard.load(layout.vector_index_dir(layout.vector_root(gen, i) / version)))
        encoder = Embedder.from_settings(Settings().embed)
    fields = ["title", "headings", "body", "anchors"]

    def one(q: str) -> None:
        text = analyzed_text(q)
        hits = []
        for index, searcher in zip(shards, searchers, strict=True):
            query, _ = index.parse_query_lenient(text or "nothing", fields)
            result = searcher.search(query, limit=10)
            hits.extend((score, addr, searcher) for score, addr in result.hits)
        top = heapq.nlargest(10, hits, key=lambda h: h[0])
        for _, addr, searcher in top:
            searcher.doc(addr)
        if encoder is not None:
            vec = encoder.encode_query(q)
            for shard in vectors:
                shard.search(vec, 10)

    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + duration

    def worker(offset: int) -> None:
        local = []
        i = offset
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            one(qs[i % len(qs)])
            local.append((time.perf_counter() - t0) * 1000)
            i += clients
        with lock:
            latencies.extend(local)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarize(latencies, duration, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--rankers", default="bm25,hybrid,ltr")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--passage-words", type=int, default=32)
    parser.add_argument("--build-only", action="store_true", help="build and embed the index, then stop")
    parser.add_argument("--no-peers", action="store_true", help="skip the bare Tantivy/hnswlib runs")
    parser.add_argument("--out", default="serving.md", help="results file name under bench/results/")
    args = parser.parse_args()

    root = REPO / "data" / "bench" / f"serving-{args.docs}-{args.shards}"
    build(root, args.docs, args.shards, args.passage_words)
    if args.build_only:
        return
    qs = queries()
    port = free_port()
    env = {
        **os.environ,
        "TRAWL_SEARCH__CACHE_ENTRIES": "0",
        "TRAWL_API__RATE_LIMIT_PER_S": "0",
        "OPENBLAS_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "serve",
            "--index",
            str(root),
            "--port",
            str(port),
            "--workers",
            str(args.workers),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {server.stderr.read() if server.stderr else ''}")
            time.sleep(0.5)
        available = set(httpx.get(f"{url}/healthz").json()["rankers"])
        results: dict[str, Any] = {
            "docs": args.docs,
            "shards": args.shards,
            "duration_s": args.duration,
            "workers": args.workers,
        }
        for ranker in args.rankers.split(","):
            if ranker not in available:
                results[ranker] = f"not available on this index ({sorted(available)})"
                continue
            for q in qs[:30]:  # warm
                httpx.get(f"{url}/v1/search", params={"q": q, "ranker": ranker}, timeout=30)
            for clients in (int(c) for c in args.clients.split(",")):
                key = f"{ranker}@{clients}"
                results[key] = drive(url, ranker, qs, clients, args.duration)
                print(key, results[key], file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=30)
    for hybrid in () if args.no_peers else (False, True):
        for clients in (int(c) for c in args.clients.split(",")):
            key = f"bare-{'tantivy+hnswlib' if hybrid else 'tantivy'}@{clients}"
            results[key] = bare_peer(root, qs, clients, args.duration, hybrid=hybrid)
            print(key, results[key], file=sys.stderr)
    json.dump(results, sys.stdout, indent=1)
    sys.stdout.write("\n")
    lines = ["| run | QPS | p50 ms | p95 ms | p99 ms | errors |", "|---|---|---|---|---|---|"]
    for key, value in results.items():
        if isinstance(value, dict):
            cells = [key, *(str(value[c]) for c in ("qps", "p50_ms", "p95_ms", "p99_ms", "errors"))]
            lines.append("| " + " | ".join(cells) + " |")
    (REPO / "bench" / "results" / args.out).write_text(
        f"# Serving benchmark\n\n{args.docs:,} documents, {args.shards} shards, "
        f"{args.duration:.0f} s per run, {args.workers} worker(s); `python bench/bench_serving.py`\n\n"
        + "\n".join(lines)
        + "\n"
    )


if __name__ == "__main__":
    main()
