"""A hung shard under load: latency over time with circuit breakers, and without them as the peer.

    .venv/bin/python bench/bench_hung_shard.py [--docs 100000] [--clients 8] [--deadline 2]

Two ``trawl shard serve`` processes (the 2-shard synthetic index of bench/bench_suggest.py,
built once under data/bench/) behind ``trawl serve --shard-urls``, BM25, caches off. Eight
clients search without pause; at ``--stop-at`` seconds shard 1 gets SIGSTOP (a hang: its
socket accepts, nothing answers), at ``--resume-at`` SIGCONT. The same timeline runs twice:
as shipped (circuits on) and with ``search.circuit_trip_after`` out of reach (every query
waits for the hung shard, the behaviour before circuits). Reported per run: the healthy p50,
p50 and partial share per window after the stop, the seconds until the p50 of a one-second
window is back under 3x the healthy p50 (and stays there until the resume), and the seconds
after the resume until answers are whole again. Goal (issue 50): back under 3x within 10 s.
Results to stdout (JSON) and bench/results/hung-shard.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_serving import free_port, percentile, queries, wait_ready  # noqa: E402
from bench.bench_suggest import build  # noqa: E402
from bench.results_file import record_run  # noqa: E402

Sample = tuple[float, float, bool]
"""(seconds since the load began when the answer came, latency ms, partial)."""


def start_shard(root: Path, shard: int, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "cli.main", "shard", "serve", "--index", str(root), "--shard", str(shard)]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc, path="/healthz")
    return proc, url


def load(url: str, qs: list[str], clients: int, duration: float, events: dict[float, Any]) -> list[Sample]:
    """``clients`` searching without pause for ``duration`` s; ``events[t]()`` runs at second t."""
    samples: list[Sample] = []
    lock = threading.Lock()
    began = time.perf_counter()
    stop = began + duration

    def client(offset: int) -> None:
        mine: list[Sample] = []
        with httpx.Client(base_url=url, timeout=60) as http:
            i = offset
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                r = http.get("/v1/search", params={"q": qs[i % len(qs)], "ranker": "bm25"})
                done = time.perf_counter()
                mine.append((done - began, (done - t0) * 1000, r.status_code != 200 or r.json()["partial"]))
                i += clients
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for at, event in sorted(events.items()):
        time.sleep(max(0.0, began + at - time.perf_counter()))
        event()
    for t in threads:
        t.join()
    return samples


def window(samples: list[Sample], start: float, end: float) -> dict[str, Any]:
    inside = [s for s in samples if start <= s[0] < end]
    if not inside:
        return {"answers": 0}
    ms = [s[1] for s in inside]
    return {
        "answers": len(inside),
        "p50_ms": round(percentile(ms, 50), 1),
        "p99_ms": round(percentile(ms, 99), 1),
        "partial": round(sum(s[2] for s in inside) / len(inside), 2),
    }


def recovery_s(samples: list[Sample], stop_at: float, resume_at: float, healthy_p50: float) -> float | None:
    """Seconds after the stop from which every one-second window's p50 is under 3x healthy."""
    seconds = range(int(stop_at), int(resume_at))
    fine = [
        (w.get("p50_ms") is not None and w["p50_ms"] < 3 * healthy_p50)
        for w in (window(samples, t, t + 1) for t in seconds)
    ]
    for k in range(len(fine)):
        if all(fine[k:]):
            return float(k)
    return None


def whole_again_s(samples: list[Sample], resume_at: float) -> float | None:
    after = sorted(s for s in samples if s[0] >= resume_at)
    last_partial = max((s[0] for s in after if s[2]), default=resume_at)
    return round(last_partial - resume_at, 1) if any(not s[2] for s in after if s[0] > last_partial) else None


def run(root: Path, args: argparse.Namespace, *, circuits: bool) -> dict[str, Any]:
    env = {
        **os.environ,
        "TRAWL_SEARCH__USE_VECTORS": "false",
        "TRAWL_SEARCH__CACHE_ENTRIES": "0",
        "TRAWL_SEARCH__DEADLINE_S": str(args.deadline),
        "TRAWL_API__RATE_LIMIT_PER_S": "0",
        "OPENBLAS_NUM_THREADS": "1",
    }
    if not circuits:
        env["TRAWL_SEARCH__CIRCUIT_TRIP_AFTER"] = str(10**9)
    shards = [start_shard(root, i, env) for i in (0, 1)]
    port = free_port()
    spec = ",".join(url for _, url in shards)
    cmd = [sys.executable, "-m", "cli.main", "serve", "--index", str(root), "--port", str(port)]
    server = subprocess.Popen(
        [*cmd, "--shard-urls", spec], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    hung = shards[1][0]
    try:
        wait_ready(url, server)
        qs = queries()
        load(url, qs, args.clients, 5.0, {})  # warm: connections, page cache, history
        samples = load(
            url,
            qs,
            args.clients,
            args.duration,
            {
                args.stop_at: lambda: hung.send_signal(signal.SIGSTOP),
                args.resume_at: lambda: hung.send_signal(signal.SIGCONT),
            },
        )
    finally:
        hung.send_signal(signal.SIGCONT)
        for proc in (server, *(p for p, _ in shards)):
            proc.terminate()
            proc.wait(timeout=60)
    healthy = window(samples, 2.0, args.stop_at)
    after = {
        f"{a:g}-{b:g} s": window(samples, args.stop_at + a, args.stop_at + b)
        for a, b in ((0, 2), (2, 5), (5, 10), (10, args.resume_at - args.stop_at))
    }
    return {
        "circuits": circuits,
        "healthy": healthy,
        "after_stop": after,
        "back_under_3x_after_s": recovery_s(samples, args.stop_at, args.resume_at, healthy["p50_ms"]),
        "after_resume": window(samples, args.resume_at, args.duration),
        "whole_again_after_resume_s": whole_again_s(samples, args.resume_at),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--deadline", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=50.0)
    parser.add_argument("--stop-at", type=float, default=12.0)
    parser.add_argument("--resume-at", type=float, default=40.0)
    args = parser.parse_args()
    root = REPO / "data" / "bench" / f"suggest-{args.docs}-2"
    build(root, args.docs, 2)
    load_before = os.getloadavg()[0]
    results = {
        "docs": args.docs,
        "clients": args.clients,
        "deadline_s": args.deadline,
        "load_average_before": round(load_before, 2),
        "runs": [run(root, args, circuits=True), run(root, args, circuits=False)],
    }
    json.dump(results, sys.stdout, indent=1)
    sys.stdout.write("\n")
    write_report(args, results)


def write_report(args: argparse.Namespace, results: dict[str, Any]) -> None:
    head = "| circuits | healthy p50 ms | " + " | ".join(
        f"p50 ms / partial {w} after" for w in results["runs"][0]["after_stop"]
    )
    rows = [
        head + " | back under 3× after | whole again after resume |",
        "|---" * (5 + len(results["runs"][0]["after_stop"]) - 1) + "|",
    ]
    for r in results["runs"]:
        cells = [f"{w.get('p50_ms', '–')} / {w.get('partial', '–')}" for w in r["after_stop"].values()]
        back = r["back_under_3x_after_s"]
        rows.append(
            f"| {'on' if r['circuits'] else 'off (peer)'} | {r['healthy']['p50_ms']} | "
            + " | ".join(cells)
            + f" | {'never' if back is None else f'{back:g} s'} | {r['whole_again_after_resume_s']} s |"
        )
    body = "\n".join(
        [
            f"{results['docs']:,} documents, 2 shard processes, {results['clients']} clients, BM25, "
            "caches off, "
            f"deadline {results['deadline_s']:g} s; shard 1 SIGSTOPped at {args.stop_at:g} s, resumed at "
            f"{args.resume_at:g} s; `python bench/bench_hung_shard.py`; {platform.machine()}, "
            f"{os.cpu_count()} cores, load average {results['load_average_before']} before.",
            "",
            *rows,
        ]
    )
    intro = "# A hung shard under load\n\nMade by `bench/bench_hung_shard.py` (see its docstring).\n"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    record_run(REPO / "bench" / "results" / "hung-shard.md", when, body, intro=intro)


if __name__ == "__main__":
    main()
