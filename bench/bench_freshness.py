"""Freshness under a steady change stream: how long until a changed page is searchable.

A loopback site of ``--pages`` pages changes ``--rate`` pages per second (each change
puts a new token in the page) while ``trawl run`` follows it and a query thread
searches the same index continuously (in this process, through ``SearchService``,
which reopens the generation when its update stamp changes). Reported:

* change-to-searchable lag p50/p95: from the site's change to the publish of the
  first fetch after it (``ROOT/freshness.sqlite``, polled), with a sample of changes
  also checked by searching for their new token;
* crawl-to-searchable lag p50/p95 (fetch → publish, ``FreshnessLog.summary``);
* the query thread's searches, errors and p95 latency;
* the cost of one update batch (``--batch`` changed documents, ``IncrementalIndexer.step``)
  against rebuilding the shard from the docstore (``compact``);
* the load average.

Example: python bench/bench_freshness.py --pages 200 --rate 10 --seconds 90
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlette.requests import Request  # noqa: E402
from starlette.responses import HTMLResponse, Response  # noqa: E402

from core.crawldir import CrawlDir  # noqa: E402
from core.docstore import DocStore  # noqa: E402
from retrieval.index.freshness import FreshnessLog, percentile  # noqa: E402
from retrieval.index.incremental import IncrementalIndexer  # noqa: E402
from retrieval.index.layout import freshness_file  # noqa: E402
from retrieval.index.root import IndexRoot  # noqa: E402
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService  # noqa: E402
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose  # noqa: E402

FILLER = "river stone mountain cloud garden window letter market bridge forest".split()


class ChangingSite:
    """``/`` links to ``/p<i>``; page i shows token ``tok<i>v<version>`` in text of its own.

    Each page's words are its own (``prose(i)``): pages that shared one filler text and
    differed in two tokens were near-duplicates of each other often enough (SimHash
    within 3 bits) that the crawl's dedup removed about one changed version in a
    hundred as a copy of another page, which then never became searchable.
    """

    def __init__(self, pages: int) -> None:
        self.version = dict.fromkeys(range(pages), 0)
        self.site = Site()
        self.site.routes["/"] = self._home
        for i in range(pages):
            self.site.routes[f"/p{i}"] = self._page(i)

    async def _home(self, request: Request) -> Response:
        links = [(f"/p{i}", f"page {i}") for i in self.version]
        return HTMLResponse(html_page("Home", "The changing site.", links=links))

    def token(self, i: int) -> str:
        return f"tok{i}v{self.version[i]}"

    def title(self, i: int) -> str:
        return f"Page {i}"

    def text(self, i: int) -> str:
        """The page's token, its own 40 words, and 10 words the query thread searches for."""
        common = " ".join(FILLER[(i + k) % len(FILLER)] for k in range(10))
        return f"{self.token(i)} {prose(i, words=40)} {common} page {i}"

    def _page(self, i: int) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            return HTMLResponse(html_page(self.title(i), self.text(i)))

        return handler


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRAWL_CRAWL__RECRAWL_INITIAL_S=str(args.recrawl_max_s / 2),
        TRAWL_CRAWL__RECRAWL_MIN_S="1",
        TRAWL_CRAWL__RECRAWL_MAX_S=str(args.recrawl_max_s),
        TRAWL_CRAWL__FLUSH_INTERVAL_S="0.5",
        TRAWL_CRAWL__RESPONSE_TIME_FACTOR="0",
        TRAWL_CRAWL__PARSE_WORKERS="1",
        TRAWL_CRAWL__MAX_PAGES="1000000",
        TRAWL_SEARCH__USE_VECTORS="false",
    )
    return env


def _published(db: sqlite3.Connection, url: str) -> tuple[float, float] | None:
    row = db.execute("SELECT fetched_at, published_at FROM urls WHERE url = ?", (url,)).fetchone()
    return (row[0] or 0.0, row[1]) if row else None


def _outcomes(data: Path, urls: list[str]) -> str:
    """The crawl's last outcome for each URL whose change never became searchable."""
    if not urls:
        return ""
    db = sqlite3.connect(CrawlDir(data).db)
    try:
        found = Counter(
            str(db.execute("SELECT outcome FROM urls WHERE url = ?", (url,)).fetchone()[0]) for url in urls
        )
    finally:
        db.close()
    return " (last crawl outcome: " + ", ".join(f"{k} {n}" for k, n in found.most_common()) + ")"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0, help="changed pages per second")
    parser.add_argument("--seconds", type=float, default=90.0, help="length of the steady phase")
    parser.add_argument("--recrawl-max-s", type=float, default=4.0)
    parser.add_argument("--batch", type=int, default=100, help="documents in the timed update batch")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-freshness-"))
    data, index = work / "crawl", work / "index"
    changing = ChangingSite(args.pages)
    server = HostServer(changing.site, "127.0.0.31").start()
    run = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "run", server.url("/"), "--data", str(data), "--index", str(index),
         "--allow-loopback", "--delay", "0", "--poll-s", "1", "--compact-every-s", "0"],
        env=_env(args), stdout=subprocess.DEVNULL, stderr=open(work / "run.log", "wb"),
    )  # fmt: skip
    stop = threading.Event()
    searches: list[float] = []
    errors: list[str] = []
    try:
        started = time.monotonic()
        while True:  # the first crawl of every page, indexed
            if time.monotonic() - started > 120 or run.poll() is not None:
                raise SystemExit(f"warm-up did not finish; see {work / 'run.log'}")
            if freshness_file(index).exists() and IndexRoot(index).current():
                db = sqlite3.connect(freshness_file(index))
                (n,) = db.execute("SELECT count(*) FROM urls WHERE url LIKE '%/p%'").fetchone()
                db.close()
                if n >= args.pages:
                    break
            time.sleep(0.5)
        warmup_s = time.monotonic() - started
        service = SearchService.open(index)

        def query_loop() -> None:
            rng = random.Random(7)
            while not stop.is_set():
                q = " ".join(rng.sample(FILLER, 2))
                t = time.perf_counter()
                try:
                    service.search(SearchRequest(q, size=10, snippets=False))
                    searches.append(time.perf_counter() - t)
                except Exception as exc:  # a failed search is a result of the benchmark
                    errors.append(repr(exc))
                time.sleep(0.02)

        queries = threading.Thread(target=query_loop, daemon=True)
        queries.start()
        db = sqlite3.connect(freshness_file(index))
        pending: list[tuple[int, str, str, float]] = []  # page, url, token, changed at
        lags: list[float] = []
        sampled = found = 0
        rng = random.Random(11)
        begin = time.time()
        changes = 0
        steady_end = begin + args.seconds
        while time.time() < steady_end + 30 and (time.time() < steady_end or pending):
            now = time.time()
            if now < steady_end:
                due = int((now - begin) * args.rate) - changes
                for _ in range(max(0, due)):
                    i = rng.randrange(args.pages)
                    changing.version[i] += 1
                    pending.append((i, server.url(f"/p{i}"), changing.token(i), time.time()))
                    changes += 1
            still = []
            for i, url, token, at in pending:
                seen = _published(db, url)
                if seen is not None and seen[0] >= at:
                    lags.append(seen[1] - at)
                    if len(lags) % 10 == 0:
                        sampled += 1
                        hits = service.search(SearchRequest(token, size=5, snippets=False)).hits
                        found += any(h.url == url for h in hits) or changing.token(i) != token
                else:
                    still.append((i, url, token, at))
            pending = still
            time.sleep(0.25)
        load = os.getloadavg()
        stop.set()
        queries.join()
        summary = FreshnessLog(index).summary(window_s=args.seconds + 60)
    finally:
        run.terminate()
        run.wait(timeout=60)
        server.stop()

    # One update batch against a rebuild of the shard, on the same docstore.
    indexer = IncrementalIndexer(data, index, shards=1)
    indexer.step()
    store = DocStore(CrawlDir(data).docs)
    latest = {d.url: d for d in store.iter_documents()}
    batch = [
        dataclasses.replace(d, body=f"{d.body} batchword{k}", fetched_at=time.time())
        for k, d in enumerate(list(latest.values())[: args.batch])
    ]
    store.append(batch)
    t = time.perf_counter()
    indexer.step()
    step_s = time.perf_counter() - t
    t = time.perf_counter()
    indexer.compact()
    rebuild_s = time.perf_counter() - t

    lat = sorted(searches)
    p50, p95 = percentile(lags, 0.5) or 0.0, percentile(lags, 0.95) or 0.0
    q95_ms = lat[int(0.95 * (len(lat) - 1))] * 1000 if lat else 0.0
    rate = changes / args.seconds
    lines = [
        f"pages {args.pages}, {changes} changes over {args.seconds:.0f} s ({rate:.1f}/s), "
        f"warm-up {warmup_s:.1f} s, {len(pending)} changes not searchable 30 s after the stream ended"
        f"{_outcomes(data, [url for _, url, _, _ in pending])}",
        f"change-to-searchable lag: p50 {p50:.2f} s, p95 {p95:.2f} s, max {max(lags, default=0):.2f} s "
        f"over {len(lags)} changes; new token found by search {found}/{sampled}",
        f"crawl-to-searchable lag (fetch -> publish): p50 {summary.lag_p50_s or 0:.2f} s, "
        f"p95 {summary.lag_p95_s or 0:.2f} s",
        f"queries during the run: {len(lat)}, errors {len(errors)}, p95 {q95_ms:.1f} ms",
        f"update batch of {len(batch)} documents {step_s:.2f} s; "
        f"rebuild of the shard ({len(latest)} documents) {rebuild_s:.2f} s",
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; work dir {work}",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
