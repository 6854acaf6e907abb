"""How many workers ``trawl serve`` starts by default, in a process of a given CPU affinity."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from api.deps import default_search_threads, search_limiter
from api.workers import MAX_DEFAULT_WORKERS, WORKERS_ENV, default_workers, worker_memory
from core.settings import Settings
from tests.fixtures.cli import REPO

_PRINT_DEFAULTS = (
    "from api.workers import default_workers as d; "
    "print(d(push=False, shard_processes=False), d(push=True, shard_processes=False), "
    "d(push=False, shard_processes=True))"
)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
@pytest.mark.parametrize("cpus", [1, 2])
def test_a_worker_per_usable_cpu_and_one_for_push_or_shard_processes(cpus: int) -> None:
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < cpus:
        pytest.skip(f"this machine lets the tests use {len(usable)} CPU(s)")
    done = subprocess.run(
        [sys.executable, "-c", _PRINT_DEFAULTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, usable[:cpus]),
    )
    assert done.stdout.split() == [str(cpus), "1", "1"]


def test_no_more_workers_than_half_the_available_memory_holds() -> None:
    index = 3 * 2**30
    assert (
        default_workers(push=False, shard_processes=False, index_bytes=index, available_bytes=8 * 2**30) == 1
    )
    two = 2 * 2 * worker_memory(index)  # half of it holds two workers
    expected = min(2, len(os.sched_getaffinity(0)), MAX_DEFAULT_WORKERS)
    assert (
        default_workers(push=False, shard_processes=False, index_bytes=index, available_bytes=two) == expected
    )


def test_a_worker_of_several_runs_one_search_at_a_time_unless_its_shards_are_remote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(WORKERS_ENV, "2")
    assert default_search_threads(remote_shards=False) == 1
    assert default_search_threads(remote_shards=True) == 2 * (os.cpu_count() or 1)
    assert search_limiter(Settings()).total_tokens == 1
    monkeypatch.setenv("TRAWL_API__SEARCH_THREADS", "3")
    assert search_limiter(Settings()).total_tokens == 3  # the setting wins
    monkeypatch.delenv("TRAWL_API__SEARCH_THREADS")
    monkeypatch.delenv(WORKERS_ENV)
    assert default_search_threads(remote_shards=False) == 2 * (os.cpu_count() or 1)  # one process
