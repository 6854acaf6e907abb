"""Serving benchmark: QPS and latency over HTTP for bm25, hybrid and ltr on a 100K-document index,
beside a bare Tantivy + hnswlib search over the same data in the same run.

    python bench/bench_serving.py [--docs 100000] [--shards 2] [--duration 60] [--clients 1,8]

1. Builds (once, cached under data/bench/) an index root of synthetic documents made from
   the evaluation corpora (see bench/synth_corpus.py) and embeds one short passage per
   document (MiniLM embeds ~30–80 full documents/s on 2 cores; these are ~80 words).
2. Starts `trawl serve` (rate limit off) and drives it over HTTP with wrk, C concurrent
   clients for D seconds per ranker, over two query sets: **web** (the main rows: 2-5 word
   queries as people type them, drawn with a realistic repeat rate, see :func:`web_queries`)
   with the caches as shipped (hit rate reported) and with every cache off, and **cisi**
   (the paragraph-long cranfield and cisi topics, caches off) as the second set.
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

from api.workers import default_workers  # noqa: E402
from bench.results_file import record_run  # noqa: E402
from core.settings import Settings  # noqa: E402
from retrieval.index.root import IndexRoot, resolve_index  # noqa: E402
from retrieval.query.request import SearchRequest  # noqa: E402
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


WEB_ZIPF_S = 0.8
"""Exponent of the web set's query popularity. Query logs are power laws (Excite, AltaVista
and AOL studies put the exponent near 0.8-1.0, with a third to a half or more of all
queries repeats of an earlier one); 0.8 over every 2-5 word window of the topics (~60,000
distinct) gives a 20,000-query stream with 56% repeats (printed with the results), the
upper end of that range: a result cache hits at most that share."""


def web_queries(total: int = 20_000, pool: int = 60_000, seed: int = 7) -> tuple[list[str], float]:
    """(a stream of 2-5 word queries, its repeat share): windows of content words of the
    cranfield and cisi topics (what the synthetic index holds), popularity Zipf(WEB_ZIPF_S)."""
    from retrieval.text.tokenizer import ENGLISH_STOPWORDS, words

    rng = random.Random(seed)
    distinct: dict[str, None] = {}
    for topic in queries():
        content = [w for w in words(topic) if w not in ENGLISH_STOPWORDS and not w.isdigit()]
        for size in range(2, 6):
            for start in range(len(content) - size + 1):
                distinct[" ".join(content[start : start + size])] = None
    ranked = list(distinct)[:pool]
    rng.shuffle(ranked)
    weights = [1 / (rank + 1) ** WEB_ZIPF_S for rank in range(len(ranked))]
    stream = rng.choices(ranked, weights=weights, k=total)
    return stream, round(1 - len(set(stream)) / len(stream), 3)


def partial_answers(url: str) -> float:
    """Answers so far that missed a shard (a 200 that wrk counts as a success), from /metrics."""
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("trawl_partial_responses_total "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def cache_hits(url: str) -> tuple[float, float]:
    """(hits, lookups) of the response cache so far, from /metrics."""
    hits = misses = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("trawl_query_cache_total{"):
            value = float(line.rsplit(" ", 1)[1])
            if 'result="hit"' in line:
                hits += value
            else:
                misses += value
    return hits, hits + misses


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
    from retrieval.index import layout
    from retrieval.index.lexical import LexicalShard
    from retrieval.index.manifest import IndexManifest
    from retrieval.vectors.embed import Embedder
    from retrieval.vectors.hnsw import VectorShard, current_version

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


def write_query_file(qs: list[str], path: Path) -> Path:
    from urllib.parse import quote

    path.write_text("".join(quote(" ".join(q.split()), safe="") + "\n" for q in qs))
    return path


def pin_plan() -> tuple[list[str], str]:
    """(taskset prefix for the generator, note): the last core for wrk when there are 4 or more."""
    cores = os.cpu_count() or 1
    if cores >= 4:
        return ["taskset", "-c", str(cores - 1)], f"wrk pinned to core {cores - 1} of {cores}"
    return [], f"wrk not pinned: only {cores} cores (pinning would halve the server's)"


_RUNS = iter(range(10**6))


def wrk_drive(url: str, prefix: str, qfile: Path, clients: int, duration: float) -> dict[str, Any]:
    """Load from ``wrk`` (one thread, ``clients`` connections) rotating the query file, each
    run from its own stretch of it (a cache warmed by one run does not see the same stream replayed).

    Reports the generator's own CPU time as a share of the machine over the run."""
    pin, _ = pin_plan()
    start_at = str(next(_RUNS) * 7919)
    env = {**os.environ, "QUERIES": str(qfile), "PATH_PREFIX": prefix, "START_AT": start_at}
    cmd = [*pin, "wrk", "-t1", f"-c{clients}", f"-d{int(duration)}s", "--timeout", "30s"]
    cmd += ["-s", str(REPO / "bench" / "wrk_queries.lua"), url]
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = child.stdout.read() if child.stdout else ""
    _, status, usage = os.wait4(child.pid, 0)
    line = next((x for x in out.splitlines() if x.startswith("WRK_JSON ")), None)
    if status != 0 or line is None:
        raise RuntimeError(f"wrk failed: {out}")
    data = json.loads(line.removeprefix("WRK_JSON "))
    seconds = data["duration_us"] / 1e6
    return {
        "requests": data["requests"],
        "qps": round(data["requests"] / seconds, 1),
        "p50_ms": round(data["p50_us"] / 1000, 2),
        "p95_ms": round(data["p95_us"] / 1000, 2),
        "p99_ms": round(data["p99_us"] / 1000, 2),
        "mean_ms": round(data["mean_us"] / 1000, 2),
        "errors": data["errors"],
        "generator_cpu": round((usage.ru_utime + usage.ru_stime) / (seconds * (os.cpu_count() or 1)), 3),
    }


def wait_ready(url: str, proc: subprocess.Popen[bytes], path: str = "/readyz") -> None:
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start: {server_log(proc)}")
        time.sleep(0.5)


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and its descendants (its workers), from /proc."""
    total, todo = 0.0, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


def worker_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds so far of each child (worker) of ``pid``, or of ``pid`` itself alone."""
    children = [
        int(c)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for c in (task / "children").read_text().split()
    ]
    return {c: _tree_cpu_s(c) for c in children} if children else {pid: _tree_cpu_s(pid)}


def cpu_split(before: dict[int, float], after: dict[int, float]) -> str:
    """Each worker's share of the server's CPU over a run, "61/39": wrk's connections stay with
    the worker that accepted them, so two workers are not always loaded alike."""
    used = [after[p] - before.get(p, 0.0) for p in after]
    total = sum(used)
    return "/".join(f"{100 * u / total:.0f}" for u in sorted(used, reverse=True)) if total > 0 else "–"


def wait_quiet(proc: subprocess.Popen[bytes], *, busy_below: float = 0.1, limit_s: float = 180.0) -> None:
    """Wait until the server's processes use under ``busy_below`` of a core over a second: each
    worker builds its suggester and checks its files after it is ready (~7 s of CPU each), which
    would be measured as the first row's latency."""
    deadline = time.monotonic() + limit_s
    last = _tree_cpu_s(proc.pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _tree_cpu_s(proc.pid)
        if now - last < busy_below:
            return
        last = now
    print(f"server still busy after {limit_s:.0f} s; measuring anyway", file=sys.stderr)


SERVER_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "trawl-bench-server.log"
"""Where servers write stderr: a pipe nobody reads fills (64 KiB) and then blocks the server's
next log line, which showed as partial answers in a long run (Ray logs more than uvicorn)."""


def server_log(proc: subprocess.Popen[bytes]) -> str:
    if proc.stderr is not None:
        return proc.stderr.read().decode(errors="replace")[-3000:]
    return SERVER_LOG.read_text(encoding="utf-8", errors="replace")[-3000:] if SERVER_LOG.exists() else ""


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


def bare_peer(
    root: Path, qs: list[str], clients: int, duration: float, *, hybrid: bool, depth: int = 10
) -> dict[str, Any]:
    """Tantivy's own query parser + hnswlib over the same shard files, no Trawl code on the path
    except the analyser (the indexes hold analysed tokens) and, for hybrid, the same encoder.
    ``depth``: each list's length per shard (10, a page; Trawl's fused rankers read 100)."""
    import heapq

    import tantivy

    from retrieval.index import layout
    from retrieval.index.manifest import IndexManifest
    from retrieval.text.tokenizer import analyzed_text
    from retrieval.vectors.embed import Embedder
    from retrieval.vectors.hnsw import VectorShard, current_version

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
            result = searcher.search(query, limit=depth)
            hits.extend((score, addr, searcher) for score, addr in result.hits)
        top = heapq.nlargest(10, hits, key=lambda h: h[0])
        for _, addr, searcher in top:
            searcher.doc(addr)
        if encoder is not None:
            vec = encoder.encode_query(q)
            for shard in vectors:
                shard.search(vec, depth)

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


STAGES = (
    "encode",
    "shard candidates",
    "shard features",
    "features",
    "LightGBM",
    "fetch",
    "snippets",
    "other",
)


def stage_breakdown(root: Path, qs: list[str], ranker: str, n: int, *, forward: bool) -> dict[str, float]:
    """Mean ms per stage of one in-process query at a time (query-vector cache off).

    ``forward=False`` hides the shards' forward indexes: features are then computed at the
    broker from fetched stored text (the path before the forward index).
    """
    import rerank.ltr
    import retrieval.query.results
    import retrieval.query.retriever
    import retrieval.query.shard_backend
    from rerank.pipeline import open_search_service

    os.environ["TRAWL_EMBED__QUERY_CACHE_SIZE"] = "0"
    os.environ["TRAWL_SEARCH__CACHE_ENTRIES"] = "0"
    service = open_search_service(Settings(), root)
    spent: dict[str, float] = dict.fromkeys(STAGES, 0.0)

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0

        return wrapper

    broker = service.generation.broker
    if not forward:
        for replicas in broker.shards:
            replicas[0].lexical.forward = None  # type: ignore[attr-defined]
    patches = [
        (retrieval.query.shard_backend, "shard_features"),
        (rerank.ltr, "compute_features"),
        (retrieval.query.results, "snippet_and_section"),
        (rerank.ltr.LtrModel, "score"),
        # Stored documents, fetched for a stage (LTR's text) and for the page's hits.
        (retrieval.query.retriever, "fetch_stored"),
        (retrieval.query.results, "fetch_stored"),
    ]
    names = {
        "shard_features": "shard features",
        "compute_features": "features",
        "snippet_and_section": "snippets",
        "score": "LightGBM",
        "fetch_stored": "fetch",
    }
    saved = [(m, a, getattr(m, a)) for m, a in patches]
    for module, attr in patches:
        setattr(module, attr, timed(names[attr], getattr(module, attr)))
    if service.encoder is not None:
        service.encoder = timed("encode", service.encoder)
    broker.gather = timed("shard candidates", broker.gather)  # type: ignore[method-assign]
    total = 0.0
    try:
        for q in qs[:20]:
            service.search(SearchRequest(q, ranker=ranker))
        for key in spent:
            spent[key] = 0.0
        for q in qs[:n]:
            t0 = time.perf_counter()
            service.search(SearchRequest(q, ranker=ranker))
            total += time.perf_counter() - t0
    finally:
        for module, attr, fn in saved:
            setattr(module, attr, fn)
        service.close()
    spent["shard candidates"] -= spent["shard features"]
    spent["other"] = total - sum(v for k, v in spent.items() if k != "other")
    out = {k: round(v / n * 1000, 2) for k, v in spent.items()}
    out["total"] = round(total / n * 1000, 2)
    return out


def start_server(root: Path, port: int, args: argparse.Namespace, *, layout: str, cache: bool) -> Any:
    """``cache``: the response and query-vector caches as shipped; otherwise both off."""
    env = {
        **os.environ,
        "TRAWL_API__RATE_LIMIT_PER_S": "0",
        "TRAWL_API__SUGGEST_AT_START": "false",  # no suggestions build beside the timed load
        "OPENBLAS_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    if not cache:
        env |= {"TRAWL_SEARCH__CACHE_ENTRIES": "0", "TRAWL_EMBED__QUERY_CACHE_SIZE": "0"}
    cmd = [sys.executable, "-m", "cli.main", "serve", "--index", str(root), "--port", str(port)]
    if layout == "ray":  # a local Ray instance, one replica per shard (the API is one process)
        return subprocess.Popen(
            [*cmd, "--engine", "ray", "--replicas", "1"],
            cwd=REPO,
            env=env | {"RAY_USAGE_STATS_ENABLED": "0"},
            stdout=subprocess.DEVNULL,
            stderr=SERVER_LOG.open("wb"),
        )
    if args.workers is not None:
        cmd += ["--workers", str(args.workers)]
    if layout == "shard-processes":
        cmd.append("--shard-processes")
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=SERVER_LOG.open("wb"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--rankers", default="bm25,hybrid,ltr")
    parser.add_argument(
        "--workers", type=int, default=None, help="uvicorn worker processes (default: trawl serve's own)"
    )
    parser.add_argument("--passage-words", type=int, default=32)
    parser.add_argument("--build-only", action="store_true", help="build and embed the index, then stop")
    parser.add_argument("--no-peers", action="store_true", help="skip the bare Tantivy/hnswlib runs")
    parser.add_argument("--out", default="serving.md", help="results file name under bench/results/")
    parser.add_argument(
        "--layouts",
        default="inproc,shard-processes",
        help="inproc (one process), shard-processes and/or ray (shards as Ray Serve replicas)",
    )
    parser.add_argument(
        "--sets",
        default="web:shipped,web:off,cisi:off",
        help="query set:caches rows (web|cisi : shipped|off)",
    )
    parser.add_argument("--stage-queries", type=int, default=100, help="queries for the per-stage breakdown")
    args = parser.parse_args()

    root = REPO / "data" / "bench" / f"serving-{args.docs}-{args.shards}"
    build(root, args.docs, args.shards, args.passage_words)
    if args.build_only:
        return
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    web, repeats = web_queries()
    sets = {"web": (web, write_query_file(web, tmp / "trawl-bench-web.txt"))}
    qs = queries()
    sets["cisi"] = (qs, write_query_file(qs, tmp / "trawl-bench-queries.txt"))
    clients = [int(c) for c in args.clients.split(",")]
    results: dict[str, Any] = {
        "docs": args.docs,
        "shards": args.shards,
        "duration_s": args.duration,
        "workers": args.workers or f"default {default_workers(push=False, shard_processes=False)}",
        "generator": "wrk -t1 (Lua rotating the query set); " + pin_plan()[1],
        "web_set": f"{len(web):,} queries of 2-5 words, Zipf {WEB_ZIPF_S}, {repeats:.0%} repeats",
    }
    rows = [tuple(row.split(":")) for row in args.sets.split(",")]
    for layout in args.layouts.split(","):
        for cache in sorted({mode == "shipped" for _, mode in rows}, reverse=True):
            port = free_port()
            server = start_server(root, port, args, layout=layout, cache=cache)
            url = f"http://127.0.0.1:{port}"
            try:
                wait_ready(url, server)
                wait_quiet(server)
                available = set(httpx.get(f"{url}/healthz").json()["rankers"])
                for name, mode in rows:
                    if (mode == "shipped") != cache:
                        continue
                    stream, qfile = sets[name]
                    for ranker in args.rankers.split(","):
                        if ranker not in available:
                            results[ranker] = f"not available on this index ({sorted(available)})"
                            continue
                        for q in stream[:30]:  # warm
                            httpx.get(f"{url}/v1/search", params={"q": q, "ranker": ranker}, timeout=30)
                        for c in clients:
                            key = f"{ranker}@{c} {layout} {name} caches {mode}"
                            before, partial_before = cache_hits(url), partial_answers(url)
                            cpu_before = worker_cpu_s(server.pid)
                            results[key] = wrk_drive(
                                url, f"/v1/search?ranker={ranker}&q=", qfile, c, args.duration
                            )
                            results[key]["worker_cpu"] = cpu_split(cpu_before, worker_cpu_s(server.pid))
                            after = cache_hits(url)
                            results[key]["partial"] = int(partial_answers(url) - partial_before)
                            lookups = after[1] - before[1]
                            results[key]["cache_hit_rate"] = (
                                round((after[0] - before[0]) / lookups, 3) if lookups else 0.0
                            )
                            print(key, results[key], file=sys.stderr)
            finally:
                server.terminate()
                server.wait(timeout=60)
    if not args.no_peers:
        gen = resolve_index(root)
        for hybrid in (False, True):
            name = "tantivy+hnswlib" if hybrid else "tantivy"
            port = free_port()
            cmd = [sys.executable, str(REPO / "bench" / "bare_http_peer.py"), str(gen), str(port)]
            env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
            peer = subprocess.Popen(cmd + (["--hybrid"] if hybrid else []), env=env, stderr=subprocess.PIPE)
            try:
                wait_ready(f"http://127.0.0.1:{port}", peer)
                for set_name in sorted({n for n, _ in rows}, key=["web", "cisi"].index):
                    for c in clients:
                        key = f"bare-http-{name}@{c} {set_name}"
                        results[key] = wrk_drive(
                            f"http://127.0.0.1:{port}", "/v1/search?q=", sets[set_name][1], c, args.duration
                        )
                        print(key, results[key], file=sys.stderr)
            finally:
                peer.terminate()
                peer.wait(timeout=30)
            for c in clients:
                key = f"bare-inprocess-{name}@{c} web"
                results[key] = bare_peer(root, web, c, args.duration, hybrid=hybrid)
                print(key, results[key], file=sys.stderr)
        # The floor of a fused ranker's first stage: both lists as deep as Trawl reads them.
        depth = Settings().search.candidate_k
        key = f"bare-inprocess-tantivy+hnswlib top-{depth}@1 web"
        results[key] = bare_peer(root, web, 1, args.duration, hybrid=True, depth=depth)
        print(key, results[key], file=sys.stderr)
    stages: dict[str, dict[str, float]] = {}
    if args.stage_queries:
        for ranker in args.rankers.split(","):
            for forward in (False, True):
                key = f"{ranker} {'after (forward index)' if forward else 'before (stored text)'}"
                stages[key] = stage_breakdown(root, qs, ranker, args.stage_queries, forward=forward)
                print(key, stages[key], file=sys.stderr)
        results["stages_ms"] = stages
    json.dump(results, sys.stdout, indent=1)
    sys.stdout.write("\n")
    write_report(args, results, stages)


def write_report(
    args: argparse.Namespace, results: dict[str, Any], stages: dict[str, dict[str, float]]
) -> None:
    lines = [
        "| run | QPS | p50 ms | p95 ms | p99 ms | errors | partial | cache hits | worker CPU split "
        "| generator CPU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, value in results.items():
        if isinstance(value, dict) and "qps" in value:
            cells = [key, *(str(value[c]) for c in ("qps", "p50_ms", "p95_ms", "p99_ms", "errors"))]
            cells.append(str(value.get("partial", "–")))
            cells.append(f"{value['cache_hit_rate']:.0%}" if "cache_hit_rate" in value else "–")
            cells.append(str(value.get("worker_cpu", "–")))
            cells.append(str(value.get("generator_cpu", "in-process threads")))
            lines.append("| " + " | ".join(cells) + " |")
    text = (
        f"{args.docs:,} documents, {args.shards} shards, "
        f"{args.duration:.0f} s per run, {results['workers']} worker(s); `python bench/bench_serving.py`\n\n"
        f'Generator: {results["generator"]}. Web set: {results["web_set"]}. "caches shipped": the '
        'response cache and query-vector cache as `trawl serve` ships them; "off": both off.\n\n'
        + "\n".join(lines)
        + "\n"
    )
    if stages:
        head = "| ranker, path | " + " | ".join(STAGES) + " | total |"
        rows = [head, "|---" * (len(STAGES) + 2) + "|"]
        for key, value in stages.items():
            rows.append("| " + key + " | " + " | ".join(str(value[s]) for s in (*STAGES, "total")) + " |")
        text += (
            f"\n### Per stage at 1 client, in-process, mean ms over {args.stage_queries} queries\n\n"
            + "\n".join(rows)
            + "\n\nframework (HTTP, uvicorn, FastAPI) = the @1 HTTP mean minus the in-process total.\n"
        )
    title = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    record_run(REPO / "bench" / "results" / args.out, title, text, intro="# Serving benchmark\n")


if __name__ == "__main__":
    main()
