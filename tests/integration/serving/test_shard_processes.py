"""The broker against real `trawl shard serve` processes on loopback."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import SearchSettings
from retrieval.index.root import IndexRoot
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.remote.shard_http import connect_shards
from training.datasets import BeirDataset

REPO = Path(__file__).resolve().parents[3]
QUERIES = ["boundary layer", "heat transfer", "supersonic wing", "shock wave", "buckling shells", "jet noise"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ShardProcess:
    def __init__(self, index: Path, shard: int, *, faults: bool = False) -> None:
        self.port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "cli.main",
            "shard",
            "serve",
            "--index",
            str(index),
            "--shard",
            str(shard),
            "--port",
            str(self.port),
        ]
        if faults:
            cmd.append("--allow-fault-injection")
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "TRAWL_SEARCH__USE_VECTORS": "false"},
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"shard {shard} did not start: {self.proc.stderr.read() if self.proc.stderr else ''}"
                )
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def index_root(eval_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serving") / "index"
    docs = list(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 800))
    index = IndexRoot(root)
    index.publish(index.build(docs, shards=2))
    return root


@pytest.fixture(scope="module")
def shard_procs(index_root: Path) -> Iterator[list[ShardProcess]]:
    """Shard 0, shard 1 (fault injection on) and a replica of shard 1. Tests run in file
    order; the one that kills a process is last, and fault delays are reset after use."""
    procs = [
        ShardProcess(index_root, 0),
        ShardProcess(index_root, 1, faults=True),
        ShardProcess(index_root, 1),
    ]
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture
def fault(shard_procs: list[ShardProcess]) -> Iterator[object]:
    def set_delay(ms: float) -> None:
        httpx.post(f"{shard_procs[1].url}/shard/fault", json={"delay_ms": ms}).raise_for_status()

    yield set_delay
    set_delay(0)


def remote_service(index_root: Path, spec: str, **settings: object) -> SearchService:
    """A broker over shard processes, warmed as the API warms it before serving: a first query
    would otherwise build the speller inside the deadline the tests time."""
    config = SearchSettings(cache_entries=0, use_vectors=False, **settings)  # type: ignore[arg-type]
    service = SearchService.open(index_root, config, remote=connect_shards(spec))
    service.warm(service.generation)
    return service


def test_remote_shards_equal_in_process_search(index_root: Path, shard_procs: list[ShardProcess]) -> None:
    local = SearchService.open(index_root, SearchSettings(cache_entries=0, use_vectors=False))
    remote = remote_service(index_root, f"{shard_procs[0].url},{shard_procs[1].url}")
    for q in QUERIES:
        a, b = local.search(SearchRequest(q, size=20)), remote.search(SearchRequest(q, size=20))
        assert [h.doc_id for h in b.hits] == [h.doc_id for h in a.hits]
        assert [h.snippet for h in b.hits] == [h.snippet for h in a.hits]
        assert b.total == a.total and not b.partial


def test_slow_shard_is_hedged_to_its_replica(
    index_root: Path, shard_procs: list[ShardProcess], fault: Any
) -> None:
    spec = f"{shard_procs[0].url},{shard_procs[1].url}|{shard_procs[2].url}"
    remote = remote_service(index_root, spec, deadline_s=3.0)
    for q in QUERIES * 5:  # history for the p95
        assert not remote.search(SearchRequest(q)).partial
    fault(2000)
    started = time.perf_counter()
    responses = [remote.search(SearchRequest(q)) for q in QUERIES]
    elapsed = time.perf_counter() - started
    assert all(not r.partial and r.hedged_shards == (1,) for r in responses)
    assert elapsed < 2.0 * len(QUERIES) / 2  # far below one slow answer per query


def test_slow_shard_without_replica_is_cut_at_the_deadline(
    index_root: Path, shard_procs: list[ShardProcess], fault: Any
) -> None:
    remote = remote_service(index_root, f"{shard_procs[0].url},{shard_procs[1].url}", deadline_s=0.5)
    fault(3000)
    started = time.perf_counter()
    response = remote.search(SearchRequest("boundary layer"))
    assert time.perf_counter() - started < 2.5  # cut at the deadline, not after the 3 s answer
    assert response.partial and response.missing_shards == (1,) and response.hits


def test_hung_shard_leaves_partial_answers_on_time(index_root: Path, shard_procs: list[ShardProcess]) -> None:
    """A SIGSTOPped shard (a hang, not a refusal) holds its own call threads only: a burst
    of concurrent queries gets the healthy shard's results, each within a few deadlines (a
    hang that held them would last until the shard is resumed)."""
    deadline_s = 2.5  # the healthy shard answers within it even beside a busy load (0.8 s did not)
    remote = remote_service(index_root, f"{shard_procs[0].url},{shard_procs[1].url}", deadline_s=deadline_s)

    def timed(q: str) -> tuple[float, Any]:
        started = time.perf_counter()
        response = remote.search(SearchRequest(q, spell=False))
        return time.perf_counter() - started, response

    shard_procs[1].proc.send_signal(signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(timed, QUERIES * 8))
    finally:
        shard_procs[1].proc.send_signal(signal.SIGCONT)
    latencies = sorted(seconds for seconds, _ in answers)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(f"hung shard: {len(answers)} queries, p50 {latencies[len(latencies) // 2]:.3f} s, p99 {p99:.3f} s")
    assert all(r.partial and r.missing_shards == (1,) and r.hits for _, r in answers)
    assert all(int(h.doc_id) % 2 == 0 for _, r in answers for h in r.hits)  # shard 0's documents
    assert p99 <= 4 * deadline_s
    resumed = time.monotonic() + 10  # once resumed, it works off its backlog and answers again
    while remote.search(SearchRequest(QUERIES[0])).partial:
        assert time.monotonic() < resumed
        time.sleep(0.2)


def test_a_hung_shard_is_skipped_after_a_few_misses_and_rejoins_when_a_probe_answers(
    index_root: Path, shard_procs: list[ShardProcess]
) -> None:
    """The circuit of a SIGSTOPped shard opens after ``circuit_trip_after`` misses: answers are
    then partial at once, naming it, and /healthz and /metrics say it is skipped; resumed, a
    background probe closes the circuit and answers are whole again (no query needed)."""
    from api.app import create_app
    from core.settings import Settings
    from tests.conftest import ServerThread

    deadline_s = 2.0
    settings = Settings.model_validate(
        {
            "api": {"rate_limit_per_s": 0},
            "search": {
                "use_vectors": False,
                "cache_entries": 0,
                "deadline_s": deadline_s,
                "circuit_trip_after": 3,
                "circuit_probe_every_s": 0.2,
            },
        }
    )
    spec = f"{shard_procs[0].url},{shard_procs[1].url}"
    with ServerThread(create_app(settings, index_dir=index_root, shard_urls=spec)) as server:
        api = httpx.Client(base_url=server.url, timeout=30)

        def search(q: str) -> dict[str, Any]:
            body: dict[str, Any] = api.get("/v1/search", params={"q": q}).json()
            return body

        assert not search(QUERIES[0])["partial"]
        assert [s["answering"] for s in api.get("/healthz").json()["shards"]] == [True, True]
        shard_procs[1].proc.send_signal(signal.SIGSTOP)
        try:
            for q in QUERIES[:3]:  # each query asks the shard two or three times: three misses at most
                assert search(q)["missing_shards"] == [1]
            health = api.get("/healthz").json()
            assert health["status"] == "degraded"
            assert [s["answering"] for s in health["shards"]] == [True, False]
            assert any(p.startswith("shard 1: not answering") for p in health["problems"])
            assert 'trawl_shard_circuit_open{shard="1"} 1.0' in api.get("/metrics").text
            misses = health["shards"][1]["misses"]
            skipped = [search(q) for q in QUERIES]
            assert all(b["partial"] and b["missing_shards"] == [1] and b["results"] for b in skipped)
            # Not asked at all (no query waits for it): a call to it would have counted a miss.
            assert api.get("/healthz").json()["shards"][1]["misses"] == misses
        finally:
            shard_procs[1].proc.send_signal(signal.SIGCONT)
        rejoined = time.monotonic() + 30
        while not all(s["answering"] for s in api.get("/healthz").json()["shards"]):
            assert time.monotonic() < rejoined, "the probe never closed the circuit"
            time.sleep(0.1)
        assert not search(QUERIES[1])["partial"]
        assert 'trawl_shard_circuit_open{shard="1"} 0.0' in api.get("/metrics").text
        api.close()


def test_killed_shard_gives_partial_results_naming_it(
    index_root: Path, shard_procs: list[ShardProcess]
) -> None:
    remote = remote_service(index_root, f"{shard_procs[0].url},{shard_procs[2].url}", deadline_s=2.0)
    before = [remote.search(SearchRequest(q)) for q in QUERIES]
    assert all(not r.partial for r in before)
    shard_procs[2].kill()
    after = [remote.search(SearchRequest(q)) for q in QUERIES]
    assert all(r.partial and r.missing_shards == (1,) for r in after)
    assert all(r.hits for r in after)  # shard 0 still answers
    for full, partial in zip(before, after, strict=True):
        kept = {h.doc_id for h in full.hits if int(h.doc_id) % 2 == 0}
        assert kept <= {h.doc_id for h in partial.hits}
