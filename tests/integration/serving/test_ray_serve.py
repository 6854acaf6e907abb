"""``trawl serve --engine ray`` on a two-node Ray cluster started here (a head and a worker on
loopback, each with its own data folder): the same answers as one process, a killed replica
under load, a publish under load, a shard shipped to a node that never had it, scaling.

One real ``trawl serve`` process (the API and broker) reaches the shards' Ray Serve
replicas through deployment handles; the index root exists only on the test's disk, and
every replica opens the copy shipped to its own node's folder.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import EmbedSettings, Settings
from retrieval.index.root import IndexRoot
from retrieval.query.request import SearchRequest
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from tests.fixtures.ray_cluster import RAY_ENV, NodeSpec, ray_cluster
from tests.fixtures.waiting import wait_for
from training.datasets import BeirDataset

pytest.importorskip("ray.serve")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.ray,
]  # a cluster, Serve and an API process: ~1 min

REPO = Path(__file__).resolve().parents[3]
QUERIES = ("boundary layer transition", "heat transfer", "supersonic flow wing")
RANKERS = ("bm25", "hybrid", "ltr")
ENV = {
    **RAY_ENV,
    "TRAWL_SEARCH__CACHE_ENTRIES": "0",
    "TRAWL_SEARCH__MAX_PAGE_SIZE": "100",
    "TRAWL_SEARCH__DEADLINE_S": "20",
    "TRAWL_API__RATE_LIMIT_PER_S": "0",
    "TRAWL_API__SUGGEST_AT_START": "false",
}


def search_settings() -> Settings:
    base = Settings()
    search = base.search.model_copy(update={"cache_entries": 0, "max_page_size": 100, "deadline_s": 20.0})
    return base.model_copy(update={"search": search})


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, eval_dir: Path, embedder: Embedder) -> Path:
    docs = list(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 200))
    index = IndexRoot(tmp_path_factory.mktemp("ray-serve") / "index")
    generation = index.build(docs, shards=2)
    backfill_index(index.path_of(generation), embedder, EmbedSettings())
    index.publish(generation)
    return index.root


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("nodes")
    return base / "head", base / "second"


@pytest.fixture(scope="module")
def cluster(nodes: tuple[Path, Path]) -> Iterator[str]:
    head, second = nodes
    specs = (
        NodeSpec(env={"TRAWL_NODE_DATA": str(head)}, cpus=2),
        NodeSpec(env={"TRAWL_NODE_DATA": str(second)}, resources={"second_node": 1}, cpus=1),
    )
    with ray_cluster(specs, name="trawl-serve") as address:
        yield address


class Api:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], config: Path, address: str) -> None:
        self.url, self.proc, self.config, self.address = url, proc, config, address
        self.client = httpx.Client(base_url=url, timeout=60)

    def search(self, q: str, ranker: str, size: int = 100) -> dict[str, Any]:
        response = self.client.get("/v1/search", params={"q": q, "ranker": ranker, "size": size})
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def health(self) -> dict[str, Any]:
        body: dict[str, Any] = self.client.get("/healthz").json()
        return body


@pytest.fixture(scope="module")
def api(root: Path, cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """Shard 0: two replicas anywhere; shard 1: two replicas on the second node only."""
    config = tmp_path_factory.mktemp("config") / "cluster.toml"
    config.write_text(
        f'index = "{root}"\n[replicas]\ncount = 2\nnum_cpus = 0.1\n'
        "[[shard]]\nid = 1\nresources = { second_node = 0.1 }\n",
        encoding="utf-8",
    )
    from cli.ports import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "cli.main", "serve", "--index", str(root), "--port", str(port)]
    cmd += ["--engine", "ray", "--ray-address", cluster, "--ray-config", str(config)]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **ENV}, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode()[-3000:] if proc.stderr else "exited")
        try:
            return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(ready, "trawl serve --engine ray to be ready", timeout=300)
    yield Api(url, proc, config, cluster)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_answers_through_ray_serve_equal_in_process_answers(api: Api, root: Path) -> None:
    from rerank.pipeline import open_search_service

    local = open_search_service(search_settings(), root)
    try:
        for ranker in RANKERS:
            for q in QUERIES:
                want = [
                    str(int(h.doc_id)) for h in local.search(SearchRequest(q, ranker=ranker, size=100)).hits
                ]
                got = api.search(q, ranker)
                assert got["ranker"] == ranker and not got["partial"]
                assert [h["doc_id"] for h in got["results"]] == want, (ranker, q)
                assert len(want) >= 50
    finally:
        local.close()


def test_a_node_receives_the_shard_it_never_had(api: Api, nodes: tuple[Path, Path]) -> None:
    head, second = nodes

    def views(folder: Path) -> set[str]:
        return {p.parent.name for p in folder.glob("views/*/manifest.json")}

    # Shard 1 may only run on the second node (its resource), which started with an empty folder.
    assert any(v.endswith("-s1") for v in views(second)), views(second)
    assert not any(v.endswith("-s1") for v in views(head)), views(head)
    assert any(second.rglob("hnsw.bin")) and any(second.rglob("*.store"))  # vectors and Tantivy
    health = api.health()
    assert [n["alive"] for n in health["nodes"]] == [True, True]
    assert [s["replicas"] for s in health["shards"]] == [{"RUNNING": 2}, {"RUNNING": 2}]


def pids_where(holds: Callable[[Path], bool]) -> list[int]:
    """Processes whose /proc entry ``holds`` (one that ends meanwhile is skipped)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if holds(entry):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def replica_pids(shard: int) -> list[int]:
    marker = f"ServeReplica:trawl-shard-{shard}:".encode()
    return pids_where(lambda proc: marker in (proc / "cmdline").read_bytes())


class Load:
    """Eight clients searching until stopped; every answer kept."""

    def __init__(self, api: Api, rankers: tuple[str, ...] = ("bm25", "hybrid")) -> None:
        self.api, self.rankers = api, rankers
        self.answers: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(8)]

    def _run(self, i: int) -> None:
        client = httpx.Client(base_url=self.api.url, timeout=60)
        for n in itertools.count(i):
            if self.stop.is_set():
                return
            params = {
                "q": QUERIES[n % len(QUERIES)],
                "ranker": self.rankers[n % len(self.rankers)],
                "size": 20,
            }
            try:
                response = client.get("/v1/search", params=params)
                if response.status_code != 200:
                    self.errors.append(f"{response.status_code}: {response.text[:200]}")
                else:
                    self.answers.append(response.json())
            except httpx.HTTPError as exc:
                self.errors.append(repr(exc))

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)


def test_a_killed_replica_under_load_costs_no_failed_request(api: Api) -> None:
    before = replica_pids(0)
    assert len(before) == 2
    with Load(api) as load:
        wait_for(lambda: len(load.answers) >= 20, "answers before the kill", timeout=120)
        os.kill(before[0], signal.SIGKILL)
        killed_at = len(load.answers)

        def restarted() -> bool:
            pids = replica_pids(0)
            return (
                before[0] not in pids
                and len(pids) == 2
                and api.health()["shards"][0]["replicas"] == {"RUNNING": 2}
            )

        wait_for(restarted, "Ray Serve to restart the killed replica", timeout=180)
        wait_for(lambda: len(load.answers) >= killed_at + 20, "answers after the restart", timeout=120)
    assert load.errors == []
    assert [a for a in load.answers if a["partial"]] == []


def test_a_publish_under_load_never_mixes_generations(
    api: Api, root: Path, embedder: Embedder, eval_dir: Path
) -> None:
    index = IndexRoot(root)
    old = index.current()
    docs = itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 200)
    docs = [replace(d, title=f"Revised {d.title}") for d in docs]
    generation = index.build(docs, shards=2)
    backfill_index(index.path_of(generation), embedder, EmbedSettings())
    with Load(api) as load:
        wait_for(lambda: len(load.answers) >= 10, "answers before the publish", timeout=120)
        index.publish(generation)
        wait_for(
            lambda: any(a["generation"] == generation for a in load.answers[-8:]),
            timeout=300,
            what="answers from the new generation",
        )
        seen = len(load.answers)
        wait_for(lambda: len(load.answers) >= seen + 10, "answers after the switch", timeout=120)
    assert load.errors == []
    generations = {a["generation"] for a in load.answers}
    assert generations == {old, generation}
    for answer in load.answers:
        revised = {h["title"].startswith("Revised ") for h in answer["results"]}
        assert revised == {answer["generation"] == generation}, answer["generation"]


def test_scaling_a_shard_needs_no_restart(api: Api) -> None:
    before = set(replica_pids(0))
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "shard", "scale", "--shard", "0", "--replicas", "3"]
        + ["--ray-address", api.address],
        cwd=REPO, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    wait_for(lambda: api.health()["shards"][0]["replicas"] == {"RUNNING": 3}, "3 replicas", timeout=60)
    after = set(replica_pids(0))
    assert before <= after and len(after) == 3  # the running replicas kept serving
    assert not api.search("heat transfer", "bm25")["partial"]


def node_pids(folder: Path) -> list[int]:
    """Processes of the node whose environment names ``folder`` (its raylet, agents, replicas)."""
    marker = f"TRAWL_NODE_DATA={folder}".encode()
    return pids_where(lambda proc: marker in (proc / "environ").read_bytes().split(b"\0"))


def test_a_lost_node_is_reported_and_its_shard_named_missing(api: Api, nodes: tuple[Path, Path]) -> None:
    """Last: the second node (both replicas of shard 1) goes away entirely."""
    _, second = nodes
    pids = node_pids(second)
    assert pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def reported() -> bool:
        health = api.health()
        return [n["alive"] for n in health["nodes"]].count(False) == 1 and any(
            "is lost" in p for p in health["problems"]
        )

    wait_for(reported, "/healthz to report the lost node", timeout=180)
    assert api.health()["status"] == "degraded"
    metrics = api.client.get("/metrics").text
    assert 'trawl_cluster_nodes{state="lost"} 1.0' in metrics
    answer = api.search("heat transfer", "bm25", size=10)
    assert answer["partial"] and answer["missing_shards"] == [1] and answer["results"]
