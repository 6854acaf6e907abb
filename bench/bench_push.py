"""Push-to-searchable lag: 1,000 documents through ``PUT /v1/documents/{id}`` under a search load.

    .venv/bin/python bench/bench_push.py [--documents 1000] [--pushers 8] [--searchers 2]

A ``trawl serve --push-data`` process over a small JSON Lines index (the push test's,
``tests/fixtures/push_service.py``). ``--pushers`` threads each push a document, then poll
``/v1/search`` for its own code word until it is found; ``--searchers`` threads search
meanwhile without pause. Reports the lag from the push's answer to the first search that
finds it (p50, p95, max; goal p95 ≤ 5 s), then the same for deletions of a tenth of them,
the errors seen (goal 0), and the search load's own latency. Latest run first in
bench/results/push.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_file import record_run  # noqa: E402
from tests.fixtures.push_service import PushClient, build_index, free_port, push_server, seed_corpus  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "push.md"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class _Searchers:
    def __init__(self, port: int, count: int) -> None:
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(port,), daemon=True) for _ in range(count)]

    def _run(self, port: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            n = 0
            while not self.stop.is_set():
                n += 1
                started = time.perf_counter()
                try:
                    response = http.get(
                        "/v1/search", params={"q": ["meadow notes", "pushed note", "river"][n % 3]}
                    )
                except httpx.HTTPError as exc:
                    self.errors.append(str(exc))
                    continue
                self.latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    self.errors.append(f"{response.status_code} {response.text[:100]}")


def _lag(client: PushClient, n: int, *, delete: bool, errors: list[str]) -> float:
    response = client.delete(n) if delete else client.put(n)
    if response.status_code != 200:
        errors.append(f"{response.status_code} {response.text[:100]}")
        return float("nan")
    answered = time.perf_counter()
    try:
        while client.findable(n) == delete:
            time.sleep(0.02)
    except httpx.HTTPStatusError as exc:
        errors.append(f"{exc.response.status_code} {exc.response.text[:200]}")
        return float("nan")
    return time.perf_counter() - answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--pushers", type=int, default=8)
    parser.add_argument("--searchers", type=int, default=2)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-push-") as tmp:
        data, index = Path(tmp) / "docs", Path(tmp) / "index"
        build_index(data, index, seed_corpus(Path(tmp) / "seed.jsonl"))
        port = free_port()
        log = Path(tmp) / "serve.log"
        with push_server(index, data, port, log):
            clients = [PushClient(port) for _ in range(args.pushers)]
            searchers = _Searchers(port, args.searchers)
            for thread in searchers.threads:
                thread.start()
            errors: list[str] = []
            started = time.perf_counter()
            with ThreadPoolExecutor(args.pushers) as pool:
                puts = list(
                    pool.map(lambda n: _lag(clients[n % args.pushers], n, delete=False, errors=errors),
                             range(args.documents))
                )  # fmt: skip
                push_s = time.perf_counter() - started
                gone = list(
                    pool.map(lambda n: _lag(clients[n % args.pushers], n, delete=True, errors=errors),
                             range(0, args.documents, 10))
                )  # fmt: skip
            searchers.stop.set()
            for thread in searchers.threads:
                thread.join()
            for client in clients:
                client.close()
        if errors or searchers.errors:
            print("the service's log ends:\n" + log.read_text(errors="replace")[-6000:])
    puts = [x for x in puts if x == x]
    gone = [x for x in gone if x == x]
    rows = [
        ("push → found", puts),
        ("delete → gone", gone),
        ("search (the load)", searchers.latencies),
    ]
    lines = ["| what | count | p50 | p95 | max |", "|---|---|---|---|---|"]
    for name, values in rows:
        p50, p95 = statistics.median(values), _quantile(values, 0.95)
        lines.append(f"| {name} | {len(values):,} | {p50:.3f} s | {p95:.3f} s | {max(values):.3f} s |")
    table = "\n".join(lines)
    all_errors = errors + searchers.errors
    print(table)
    print(f"{args.documents:,} pushes in {push_s:.1f} s; errors: {len(all_errors)} {all_errors[:3]}")
    if args.no_record:
        return
    body = (
        f"Command: `.venv/bin/python bench/bench_push.py --documents {args.documents} "
        f"--pushers {args.pushers} --searchers {args.searchers}`; {platform.node()}, "
        f"{os.cpu_count()} cores; `api.push_poll_s` 0.25 "
        "(default), lexical only (no vectors).\n\n"
        f"{table}\n\n"
        f"p95 push → found **{_quantile(puts, 0.95):.2f} s** (goal ≤ 5 s); "
        f"errors **{len(all_errors)}** (goal 0); "
        f"{args.documents:,} pushes (each waited on until found) took {push_s:.1f} s.\n"
    )
    record_run(
        RESULTS,
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        body,
        intro="# Push API: push-to-searchable lag\n\nMade by `bench/bench_push.py` (see its docstring).",
    )
    print(f"recorded in {RESULTS}")


if __name__ == "__main__":
    main()
