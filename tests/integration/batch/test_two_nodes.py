"""A two-node Ray cluster on this machine (`ray start --head` plus a second `ray start --address`):
shard tasks and PageRank blocks run on both nodes, and the cluster is stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.ray_cluster import RAY_ENV, ray_cluster

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.ray]  # two raylets start: ~20 s on a busy 2-core machine

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def cluster() -> Iterator[str]:
    with ray_cluster() as address:
        yield address


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
