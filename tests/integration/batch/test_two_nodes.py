"""A two-node Ray cluster on this machine (`ray start --head` plus a second `ray start --address`):
shard tasks and PageRank blocks run on both nodes, and the cluster is stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # two raylets start: ~20 s on a busy 2-core machine

REPO = Path(__file__).resolve().parents[3]
RAY = str(Path(sys.executable).with_name("ray"))


_WORKER_PORTS = 40
RAY_ENV = {"HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
"""Token authentication off, said outright: a local ``ray.init`` earlier in the suite saves
``~/.ray/auth_token``, after which ``ray start`` turns tokens on by itself and the second
node (and the driver) failed to connect with ``InvalidAuthToken`` (seen in CI)."""


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [int(s.getsockname()[1]) for s in sockets]
    for s in sockets:
        s.close()
    return ports


def cluster_ports() -> list[int]:
    """A head port and eight ports for each node, none inside either node's worker range:
    ``ray start`` refuses a node port that its own worker range covers (a CI run drew
    a node-manager port 38 above the minimum worker port)."""
    for _ in range(100):
        ports = free_ports(17)
        ranges = [range(p, p + _WORKER_PORTS + 1) for p in (ports[3], ports[11])]
        others = [p for i, p in enumerate(ports) if i not in (3, 11)]
        if not any(p in r for r in ranges for p in others) and not set(ranges[0]) & set(ranges[1]):
            return ports
    raise AssertionError("no 17 free ports apart from two worker ranges")


def node_args(ports: list[int]) -> list[str]:
    manager, store, minw, maxw, metrics, agent_grpc, agent_http, runtime_env = ports
    return [
        "--num-cpus", "1", "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats",
        "--node-manager-port", str(manager), "--object-manager-port", str(store),
        "--min-worker-port", str(minw), "--max-worker-port", str(minw + _WORKER_PORTS),
        "--metrics-export-port", str(metrics), "--dashboard-agent-grpc-port", str(agent_grpc),
        "--dashboard-agent-listen-port", str(agent_http), "--runtime-env-agent-port", str(runtime_env),
    ]  # fmt: skip


def ray_start(args: list[str], env: dict[str, str]) -> None:
    run = subprocess.run([RAY, "start", *args], env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, f"ray start {' '.join(args)}:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"


def ray_pids(temp_dir: Path) -> set[int]:
    """Processes of this cluster: every one whose command line names its temp dir, or that
    holds a file open under it (Ray's agents rename themselves, ``ray::DashboardAgent``, and
    were left running when only command lines were read; they keep their logs open)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(temp_dir).encode() in (entry / "cmdline").read_bytes() or _holds_file_under(
                    entry, temp_dir
                ):
                    pids.add(int(entry.name))
            except OSError:
                continue
    return pids


def _holds_file_under(proc: Path, folder: Path) -> bool:
    for fd in (proc / "fd").iterdir():
        try:
            if os.readlink(fd).startswith(f"{folder}/"):
                return True
        except OSError:
            continue
    return False


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    temp_dir = Path("/tmp") / f"trawl-ray-{os.getpid()}"
    head_port, *ports = cluster_ports()
    env = {**os.environ, **RAY_ENV}
    address = f"127.0.0.1:{head_port}"
    try:
        head = [
            "--head",
            "--port",
            str(head_port),
            "--temp-dir",
            str(temp_dir),
            "--include-dashboard",
            "false",
        ]
        ray_start([*head, "--node-ip-address", "127.0.0.1", *node_args(ports[:8])], env)
        ray_start(["--address", address, "--node-ip-address", "127.0.0.1", *node_args(ports[8:16])], env)
        yield address
    finally:
        for pid in ray_pids(temp_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30  # killed processes are reaped when the machine gets to it
        while (left := ray_pids(temp_dir)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"ray processes left: {left}"


DRIVER = textwrap.dedent(
    """
    import json, sys
    from functools import partial
    from pathlib import Path
    import numpy as np
    import ray
    from cli.engine import beir_documents
    from core.jobs import JobEngine
    from retrieval.batch.ray_jobs import ray_build_index
    from training.pagerank import pagerank
    from training.ray_training import ray_pagerank

    with JobEngine(engine="ray", address=sys.argv[1]).session():
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        manifest, shard_nodes = ray_build_index(
            partial(beir_documents, Path(sys.argv[2])), Path(sys.argv[3]), shards=2
        )
        rng = np.random.default_rng(0)
        src, dst = rng.integers(0, 500, 4000), rng.integers(0, 500, 4000)
        on_ray = ray_pagerank(500, src, dst, blocks=2).scores
        diff = float(np.abs(on_ray - pagerank(500, src, dst).scores).max())
        print(json.dumps({"nodes": nodes, "shard_nodes": shard_nodes, "docs": manifest.docs, "diff": diff}))
    """
)


def test_tasks_run_on_both_nodes(cluster: str, tmp_path: Path, eval_dir: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster, str(eval_dir / "cranfield"), str(tmp_path / "index")],
        cwd=REPO, env={**os.environ, **RAY_ENV}, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(result["nodes"]) == 2
    assert sorted(result["shard_nodes"]) == sorted(result["nodes"])
    assert result["docs"] == 1400 and result["diff"] < 1e-9
