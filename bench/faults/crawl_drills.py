"""Crawl drills: two ``trawl crawl`` on one data directory, a SIGKILLed crawl's children, a
PostgreSQL restart under two fleet workers, a full disk under a crawl and a build.

The sites are the crawler tests' recording uvicorn servers (``tests/fixtures/crawl/web.py``)
on 127.0.0.x; the PostgreSQL cluster is the tests' throwaway one (``tests/fixtures/pg_server``).
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from bench.faults.harness import Drill, Outcome, env, last_line, stop, trawl_argv, wait_for
from core.crawldir import CrawlDir
from core.docstore import DocStore
from crawl.extraction.parsing import INLINE_MAX_TAGS
from crawl.state.sqlite import CrawlDb
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose, sleep_then

CRAWL_ENV = {
    "TRAWL_CRAWL__ALLOWED_NETWORKS": '["127.0.0.0/24"]',
    "TRAWL_CRAWL__MIN_DELAY_S": "0.01",
    "TRAWL_CRAWL__RESPONSE_TIME_FACTOR": "0",
    "TRAWL_SEARCH__USE_VECTORS": "false",
}


def crawl(seeds: list[str], data: Path, *extra: str, **settings: str) -> subprocess.Popen[str]:
    argv = trawl_argv("crawl", *seeds, "--data", str(data), "--no-progress", "--json", *extra)
    return subprocess.Popen(
        argv, env=env(**{**CRAWL_ENV, **settings}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@contextmanager
def hosting(*sites: tuple[Site, str]) -> Iterator[list[HostServer]]:
    servers = [HostServer(site, address).start() for site, address in sites]
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


def pages(*servers: HostServer) -> Counter[str]:
    return Counter(s.url(p) for s in servers for p in s.recorder.paths() if p != "/robots.txt")


def _two_crawls() -> Drill:
    """A page held open by the drill until the second crawl has answered: the first surely runs."""

    def run(folder: Path) -> Outcome:
        gate, asked = threading.Event(), threading.Event()
        asks: list[str] = []

        async def gated(request: Request) -> Response:
            asks.append(request.url.path)
            asked.set()
            while not gate.is_set():
                await asyncio.sleep(0.02)
            return HTMLResponse(html_page("Page 0", prose(10)))

        site = Site()
        site.page("/", html_page("Home", prose(1), links=[(f"/p{i}", f"page {i}") for i in range(6)]))
        for i in range(1, 6):
            site.page(f"/p{i}", html_page(f"Page {i}", prose(10 + i)))
        site.handler("/p0")(gated)
        data = folder / "crawl"
        held = {"TRAWL_CRAWL__FETCH_TIMEOUT_S": "900", "TRAWL_CRAWL__PARSE_WORKERS": "1"}
        with hosting((site, "127.0.0.91")) as (server,):
            first = crawl([server.url("/")], data, **held)
            second = None
            try:
                wait_for(lambda: asked.is_set() or first.poll() is not None, "the first crawl to ask for /p0")
                second = crawl([server.url("/")], data, **held)
                # Refused, it ends; let in, it crawls too and asks for /p0 a second time.
                wait_for(lambda: second.poll() is not None or len(asks) > 1, "the second crawl to end or ask")
                gate.set()
                _, second_err = second.communicate(timeout=600)
                first.communicate(timeout=600)
            finally:
                gate.set()
                for proc in (first, second):
                    if proc is not None:
                        stop(proc)
            fetched = pages(server)
        named = f"Crawl directory {data} is in use by pid {first.pid}" in " ".join(second_err.split())
        refused = second.returncode == 2 and named and "Traceback" not in second_err
        once = len(fetched) == 7 and max(fetched.values()) == 1
        said = (
            f"{'second refused naming the first' if refused else f'second exit {second.returncode}'}; "
            f"first exit {first.returncode}; {len(fetched)} of 7 pages fetched, "
            f"{'each once' if once else f'up to {max(fetched.values(), default=0)} times'}"
        )
        return Outcome(refused and first.returncode == 0 and once, said)

    return Drill(
        "two `trawl crawl` on one data directory",
        "the second refused naming the first's pid (exit 2); the first finishes; every page fetched once",
        run,
    )


def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of a live process; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def _children(parent: int) -> dict[int, int]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _proc_stat(int(entry.name))) and stat[0] == parent:
            if stat[1] != "Z":
                found[int(entry.name)] = stat[2]
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _sigkill() -> Drill:
    def run(folder: Path) -> Outcome:
        site = Site()
        site.page("/", html_page("Home", "start", links=[(f"/p{i}", f"page {i}") for i in range(200)]))
        tags = "<span>x</span>" * (INLINE_MAX_TAGS + 100)  # parsed in the pool, not inline
        for i in range(200):
            site.page(f"/p{i}", html_page(f"Page {i}", prose(i) + tags))
        with hosting((site, "127.0.0.92")) as (server,):
            proc = crawl([server.url("/")], folder / "crawl", TRAWL_CRAWL__MIN_DELAY_S="0.2")
            try:
                wait_for(
                    lambda: (
                        proc.poll() is not None
                        or any("spawn_main" in _cmdline(pid) for pid in _children(proc.pid))
                    ),
                    "a parse worker to start",
                )
                children = _children(proc.pid)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            finally:
                stop(proc)
        workers = sum("spawn_main" in _cmdline(pid) for pid in children)

        def orphans() -> dict[int, str]:
            return {
                pid: _cmdline(pid)
                for pid, started in children.items()
                if (s := _proc_stat(pid)) is not None and s[1] != "Z" and s[2] == started
            }

        try:
            wait_for(lambda: not orphans(), "the killed crawl's children to end", timeout=60)
        except TimeoutError:
            pass
        left = orphans()
        for pid in left:  # the drill leaves nothing behind either: these are the orphans it found
            os.kill(pid, signal.SIGKILL)
        said = (
            f"SIGKILL mid-crawl with {'its parse pool running' if workers else 'NO parse worker seen'}; "
            + ("no child left" if not left else f"{len(left)} ORPHANS left: {sorted(set(left.values()))[:2]}")
        )
        return Outcome(workers > 0 and not left, said)

    return Drill(
        "SIGKILL of `trawl crawl` with its parse pool running",
        "no child left running (parse workers, resource tracker) within 60 s",
        run,
    )


def _pg_available() -> str | None:
    if shutil.which("pg_ctl") or list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")):
        return None
    return "no PostgreSQL binaries (pg_ctl, initdb) here"


def _chain_site(index: int) -> Site:
    """Home → p0 → … → p7: each next page is found only through the database."""
    site = Site()
    site.raw("/robots.txt", b"User-agent: *\nCrawl-delay: 0.2\n", content_type="text/plain")
    site.page("/", html_page(f"Home {index}", prose(index * 100), links=[("/p0", "first")]))
    for i in range(8):
        links = [(f"/p{i + 1}", "next")] if i < 7 else []
        body = html_page(f"Page {index}.{i}", prose(index * 100 + i + 1), links=links)

        async def slow(request: Request, body: str = body) -> Response:
            return await sleep_then(0.05, HTMLResponse(body))

        site.handler(f"/p{i}")(slow)
    return site


def _pg_restart() -> Drill:
    def run(folder: Path) -> Outcome:
        from tests.fixtures.pg_server import running_cluster  # here: only this drill needs PostgreSQL

        worker_env = {
            "TRAWL_CRAWL__MIN_DELAY_S": "0.05",
            "TRAWL_CRAWL__FLUSH_INTERVAL_S": "0.2",
            "TRAWL_CRAWL__LEASE_S": "5",
            "TRAWL_CRAWL__CONCURRENCY": "4",
            "TRAWL_CRAWL__FETCH_TIMEOUT_S": "5",
        }
        data = folder / "fleet"
        with (
            running_cluster(max_connections=50) as cluster,
            hosting(*((_chain_site(i), f"127.0.0.{93 + i}") for i in range(4))) as web,
        ):
            dsn = cluster.new_database()
            seeds = [s.url("/") for s in web]
            workers = [
                crawl(seeds, data, "--frontier", dsn, "--worker-id", f"w{i}", **worker_env) for i in range(2)
            ]
            try:
                wait_for(lambda: sum(pages(*web).values()) >= 8, "the fleet to get going")
                cluster.stop("fast")
                time.sleep(5)
                cluster.start()
                restarted = time.monotonic()
                errs = [w.communicate(timeout=600)[1] for w in workers]
            finally:
                for w in workers:
                    stop(w)
            fetched = pages(*web)
            after = any(
                r.start > restarted for s in web for r in s.recorder.requests if r.path != "/robots.txt"
            )
        store = DocStore(CrawlDir(data).docs)
        stored = Counter(d.url for seg in store.segments() for d in store.iter_documents(seg))
        clean = all(w.returncode == 0 for w in workers) and not any("Traceback" in e for e in errs)
        rode = any("Lost the connection to PostgreSQL" in e for e in errs)
        twice = max(fetched.values(), default=0) > 1 or max(stored.values(), default=0) > 1
        once = len(fetched) == len(stored) == 36 and not twice
        said = (
            f"workers exit {sorted(w.returncode for w in workers)}"
            f"{', said the connection was lost and back' if rode else ''}; "
            f"{len(fetched)}/36 pages fetched, {len(stored)} stored, "
            f"{'SOME TWICE' if twice else 'each once'}; "
            f"{'crawling resumed after the restart' if after else 'ALL DONE BEFORE THE RESTART'}"
        )
        return Outcome(clean and rode and once and after, said)

    return Drill(
        "PostgreSQL stopped 5 s under two fleet workers",
        "both workers wait, reconnect and finish (exit 0); every page fetched and stored once",
        run,
        unavailable=_pg_available,
        covered_by="tests/integration/crawl/test_fleet_db_restart.py",
    )


def _root_mount() -> str | None:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return "mounting a small tmpfs needs root"
    return None


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _words(rng: random.Random, n_bytes: int) -> str:
    """Text gzip cannot shrink much: base64 of random bytes, cut into words."""
    text = base64.b64encode(rng.randbytes(n_bytes)).decode()
    return " ".join(text[i : i + 8] for i in range(0, len(text), 8))


def _disk_full() -> Drill:
    def run(folder: Path) -> Outcome:
        rng = random.Random(51)
        site = Site()
        site.raw("/robots.txt", b"User-agent: *\n", content_type="text/plain")
        site.page("/", html_page("Home", "the start", links=[(f"/p{i}", f"page {i}") for i in range(100)]))
        for i in range(100):
            site.page(f"/p{i}", html_page(f"Page {i}", _words(rng, 60_000)))
        quick = {"TRAWL_CRAWL__FLUSH_INTERVAL_S": "0.5"}
        with hosting((site, "127.0.0.97")) as (server,):
            expected = {server.url("/"), *(server.url(f"/p{i}") for i in range(100))}
            data = folder / "small" / "crawl"
            with small_disk(data.parent, "8m"):
                full = crawl([server.url("/")], data, **quick)
                try:
                    _, full_err = full.communicate(timeout=600)
                finally:
                    stop(full)
                asked_before = len(server.recorder.paths())
                moved = folder / "bigger"
                shutil.copytree(data, moved)  # "free space": the same data on a disk with room
            db = CrawlDb(CrawlDir(moved).db, readonly=True)
            try:
                kept = {u for u in expected if (row := db.row(u)) is not None and row["status"] == "done"}
            finally:
                db.close()
            resumed = crawl([server.url("/")], moved, **quick)
            try:
                resumed.communicate(timeout=600)
            finally:
                stop(resumed)
            again = {server.url(p) for p in server.recorder.paths()[asked_before:]} & kept
        stored = {d.url for d in DocStore(CrawlDir(moved).docs).iter_documents()}
        with small_disk(folder / "small-index", "4m") as disk:
            built = subprocess.run(
                trawl_argv("index", "--data", str(moved), "--index", str(disk / "index"), "--no-publish"),
                env=env(TRAWL_SEARCH__USE_VECTORS="false"), capture_output=True, text=True, timeout=900,
            )  # fmt: skip
        stopped = (
            full.returncode == 1
            and "Traceback" not in full_err
            and f"disk full: {data} (" in last_line(full_err)
            and asked_before < len(expected)
        )
        finished = resumed.returncode == 0 and stored == expected and not again
        build_said = last_line(built.stderr)[:80]
        said_build = "Traceback" not in built.stderr and "disk full: " in build_said
        said = (
            f"crawl {'stopped in one line: disk full (exit 1)' if stopped else f'exit {full.returncode}'}"
            f"; resumed with room: {len(stored)}/{len(expected)} stored, "
            f"{'none acknowledged fetched again' if not again else 'SOME FETCHED AGAIN'}; "
            f"index build {'said disk full in one line' if said_build else f'said {build_said!r}'}"
            f" (exit {built.returncode})"
        )
        return Outcome(stopped and finished and said_build and built.returncode != 0, said)

    return Drill(
        "full 8 MB tmpfs under `trawl crawl`, 4 MB under `trawl index`",
        "the crawl stops with one line 'disk full: PATH (N MB free)…' (exit 1) and a resume with room "
        "finishes without refetching; the build says disk full",
        run,
        unavailable=_root_mount,
        covered_by="tests/integration/crawl/test_disk_full.py",
    )


def drills() -> list[Drill]:
    return [_two_crawls(), _sigkill(), _pg_restart(), _disk_full()]
