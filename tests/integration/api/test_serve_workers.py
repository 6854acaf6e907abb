"""``trawl serve`` runs a worker per usable CPU by default, and its metrics count every worker's requests.

A real ``trawl serve`` process started with two CPUs in its affinity mask and no
``--workers``: two worker processes answer, each with the index open; ``/metrics`` (read
from whichever worker answers) counts the searches of both; a click reaching the worker
that did not show its impression is logged, not refused.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from prometheus_client.mmap_dict import MmapedDict

from core.types import Document, doc_id_for
from retrieval.index.root import IndexRoot
from tests.fixtures.cli import REPO
from tests.fixtures.waiting import wait_for
from tests.integration.api.test_edge import _free_port

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two CPUs to give the server",
)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = IndexRoot(tmp_path_factory.mktemp("workers") / "index")
    docs = [
        Document(
            doc_id=doc_id_for(f"http://w.test/{i}"),
            url=f"http://w.test/{i}",
            title=f"Page {i}",
            body=f"worker page number {i} about herons",
        )  # fmt: skip
        for i in range(20)
    ]
    root.publish(root.build(docs, shards=1))
    return root.root


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.extend(int(x) for x in (task / "children").read_text().split())
    return found


def _workers(pid: int) -> list[int]:
    """The server's worker processes: its children that have the API loaded (the index mapped)."""
    workers = []
    for child in _children(pid):
        try:
            maps = Path(f"/proc/{child}/maps").read_text()
        except OSError:
            continue
        if "/index/" in maps:
            workers.append(child)
    return workers


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("experiment-logs")


@pytest.fixture(scope="module")
def served(index: Path, logs: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    two = sorted(os.sched_getaffinity(0))[:2]
    server = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", "--index", str(index), "--port", str(port)],
        cwd=REPO,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRAWL_API__RATE_LIMIT_PER_S": "0",
            "TRAWL_EXPERIMENTS__LOG_DIR": str(logs),
            "TRAWL_EXPERIMENTS__FLUSH_INTERVAL_S": "0.5",
        },
        preexec_fn=lambda: os.sched_setaffinity(0, two),
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert server.poll() is None, "trawl serve exited"
        try:
            return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, "trawl serve ready")
        wait_for(lambda: len(_workers(server.pid)) == 2, "two workers with the index open")
        yield url, server
    finally:
        server.terminate()
        server.wait(timeout=60)


def _metrics_dir(worker: int) -> Path:
    environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    (value,) = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"PROMETHEUS_MULTIPROC_DIR=")]
    return Path(value.decode())


def _searches_counted(folder: Path, worker: int) -> float:
    """``trawl_queries_total`` as one worker wrote it to the shared files."""
    path = folder / f"counter_{worker}.db"
    if not path.exists():
        return 0.0
    return sum(
        value
        for key, value, *_ in MmapedDict.read_all_values_from_file(str(path))
        if '"trawl_queries_total"' in key
    )


def _queries_total(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(
        float(v) for v in re.findall(r'^trawl_queries_total\{[^}]*entry="api"[^}]*\} (\S+)$', text, re.M)
    )


def test_two_cpus_get_two_workers_and_metrics_count_both(served: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, server = served
    workers = _workers(server.pid)
    assert len(workers) == 2
    folder = _metrics_dir(workers[0])
    before = _queries_total(url)
    sent = 0

    def search(i: int) -> None:
        # A new connection each time: the kernel hands connections, not requests, to workers.
        with httpx.Client(timeout=60) as client:
            answer = client.get(f"{url}/v1/search", params={"q": f"herons {i}", "ranker": "bm25"})
            assert answer.status_code == 200, answer.text

    def both_served() -> bool:
        nonlocal sent
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(search, range(sent, sent + 16)))
        sent += 16
        return all(_searches_counted(folder, w) > 0 for w in workers)

    wait_for(both_served, "searches answered by both workers", timeout=120)
    per_worker = [_searches_counted(folder, w) for w in workers]
    assert sum(per_worker) - before == sent
    # Whichever worker answers /metrics, it reports the searches of both.
    for _ in range(6):
        assert _queries_total(url) - before == sent


def _pid_of_part(part: Path) -> int:
    return int(part.name.split("-")[2])  # part-<ns>-<pid>-<token>-<seq>.parquet


def _rows(folder: Path, column: str) -> dict[str, int]:
    """``column`` value → pid of the worker whose part holds it."""
    found = {}
    for part in sorted(folder.glob("part-*.parquet")):
        for value in pq.read_table(part, columns=[column]).column(column).to_pylist():
            found[value] = _pid_of_part(part)
    return found


def test_a_click_on_another_workers_impression_is_logged(
    served: tuple[str, subprocess.Popen[bytes]], logs: Path
) -> None:
    url, _ = served
    clicked: list[str] = []

    def search_then_click(i: int) -> None:
        with httpx.Client(timeout=60) as client:
            answer = client.get(f"{url}/v1/search", params={"q": f"heron page {i}", "ranker": "bm25"})
            assert answer.status_code == 200, answer.text
            impression = answer.headers["x-trawl-impression"]
            first = int(answer.json()["results"][0]["doc_id"])
        with httpx.Client(timeout=60) as client:  # another connection: maybe another worker
            click = client.post(
                f"{url}/v1/click", json={"impression_id": impression, "doc_id": first, "position": 1}
            )
            assert click.status_code == 202, click.text
        clicked.append(impression)

    def crossed() -> bool:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(search_then_click, range(len(clicked), len(clicked) + 8)))
        wait_for(lambda: len(_rows(logs / "clicks", "impression_id")) == len(clicked), "clicks flushed")
        # A click answered by the worker that showed it needs no flushed impression: wait for them.
        wait_for(
            lambda: set(clicked) <= set(_rows(logs / "impressions", "impression_id")), "impressions flushed"
        )
        shown = _rows(logs / "impressions", "impression_id")
        clicks = _rows(logs / "clicks", "impression_id")
        return any(shown[imp] != pid for imp, pid in clicks.items())

    wait_for(crossed, "a click answered by the worker that did not show its impression", timeout=120)


def _shared_cache_file(worker: int) -> Path:
    environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    (value,) = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"TRAWL_SEARCH__SHARED_CACHE_PATH=")]
    return Path(value.decode())


def _responses_stored(database: Path) -> int:
    with sqlite3.connect(database, timeout=30) as db:
        (rows,) = db.execute("SELECT count(*) FROM responses").fetchone()
    return int(rows)


def test_an_answer_one_worker_computed_serves_the_others(served: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, server = served

    def cached(q: str) -> bool:
        with httpx.Client(timeout=60) as client:  # a new connection: either worker
            answer = client.get(f"{url}/v1/search", params={"q": q, "ranker": "bm25"})
            assert answer.status_code == 200, answer.text
            return bool(answer.json()["cached"])

    queries = [f"herons quux{i}" for i in range(16)]
    database = _shared_cache_file(_workers(server.pid)[0])
    stored_before = _responses_stored(database)
    assert [cached(q) for q in queries] == [False] * 16
    # Each worker writes its answers on a thread of its own, after answering.
    wait_for(
        lambda: _responses_stored(database) >= stored_before + 16, "the answers written to the shared file"
    )
    # Each worker answers about half of the second asks: all are hits only if they share.
    assert [cached(q) for q in queries] == [True] * 16


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _sockets_on(port: int, state: str) -> dict[str, int]:
    """TCP sockets on local ``port`` in ``state`` (``0A`` listening, ``01`` established): inode →
    receive queue (for a listening socket, the connections waiting to be accepted)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                found[fields[9]] = int(fields[4].split(":")[1], 16)
    return found


def _held(pid: int, inodes: Iterable[str]) -> set[str]:
    """Which of ``inodes`` process ``pid`` has open."""
    wanted = set(inodes)
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in wanted:
            held.add(target[8:-1])
    return held


def test_each_worker_accepts_on_a_socket_of_its_own(served: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, server = served
    listening = set(_sockets_on(_port(url), "0A"))
    held = [_held(w, listening) for w in _workers(server.pid)]
    assert len(held) == 2 and all(len(h) == 1 for h in held), held
    assert held[0] != held[1], "the workers share one listening socket"
    assert listening == held[0] | held[1]


def test_a_burst_of_connections_is_spread_over_the_workers(
    served: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, server = served
    port = _port(url)
    first, second = workers = _workers(server.pid)
    # A burst (a load generator's or a proxy's pool of connections) arrives while the second
    # worker is busy (stopped here): from one shared socket the first worker accepted it all
    # and kept it, one core serving while the other idled. Spread by the kernel's hash of the
    # addresses, a worker gets fewer than 4 of 32 about three times in a million bursts.
    for worker in workers:
        os.kill(worker, signal.SIGSTOP)
    try:
        connections = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(32)]
        os.kill(first, signal.SIGCONT)
        own = _held(first, _sockets_on(port, "0A"))
        wait_for(
            lambda: all(_sockets_on(port, "0A").get(inode, 0) == 0 for inode in own),
            "the first worker accepting what it can",
        )
        taken_by_first = len(_held(first, _sockets_on(port, "01")))
    finally:
        for worker in workers:
            os.kill(worker, signal.SIGCONT)
    try:
        for connection in connections:
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: trawl\r\n\r\n")
        for connection in connections:
            assert connection.recv(64).startswith(b"HTTP/1.1 "), "no answer on a burst connection"
        held_by_second = len(_held(second, _sockets_on(port, "01")))
    finally:
        for connection in connections:
            connection.close()
    assert 4 <= taken_by_first <= 28, taken_by_first
    assert taken_by_first + held_by_second == 32


def test_connections_to_a_dead_workers_socket_wait_for_its_replacement(
    served: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, server = served
    port = _port(url)
    dead, alive = _workers(server.pid)
    its_socket = _held(dead, _sockets_on(port, "0A"))
    os.kill(dead, signal.SIGKILL)
    wait_for(lambda: dead not in _workers(server.pid), "the killed worker gone")
    # Until the supervisor replaces it, its socket still listens (the parent holds it): the
    # connections hashed there queue, none is refused or reset.
    assert its_socket <= set(_sockets_on(port, "0A"))

    def search(i: int) -> int:
        with httpx.Client(timeout=120) as client:
            return client.get(f"{url}/v1/search", params={"q": f"heron {i}", "ranker": "bm25"}).status_code

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(search, range(24))) == [200] * 24
    wait_for(lambda: len(_workers(server.pid)) == 2, "a replacement worker with the index open")
    replacement = next(w for w in _workers(server.pid) if w != alive)
    assert _held(replacement, _sockets_on(port, "0A")) == its_socket


def test_workers_end_when_trawl_serve_is_killed(index: Path, tmp_path: Path) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "serve",
            "--index",
            str(index),
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRAWL_EXPERIMENTS__LOG_DIR": str(tmp_path)},
    )
    try:
        wait_for(lambda: len(_workers(server.pid)) == 2, "two workers with the index open")
        workers = _workers(server.pid)
    finally:
        server.kill()  # SIGKILL: uvicorn gets no chance to stop them
        server.wait(timeout=60)

    def gone(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        return state == "Z"  # exited; a zombie until init reaps it

    wait_for(lambda: all(gone(w) for w in workers), "the orphaned workers exiting", timeout=120)
