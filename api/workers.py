"""How many worker processes ``trawl serve`` runs, and the metrics they share.

Python's ranking work holds the GIL, so one process serves one core. Workers (uvicorn's,
each with the memory-mapped shards opened on its own) used both cores of a 2-core machine
where threads could not: 2.37× bm25 and 1.80× LTR queries/s at 8 clients (DECISIONS 73).
So the default is a worker per usable CPU, up to :data:`MAX_DEFAULT_WORKERS` and to what
half the available memory holds: each worker holds its own encoder, caches and vectors.
One worker where a second cannot help or is not allowed: ``--push-data`` (one writer),
``--shard-processes`` (shards in processes of their own) and Ray Serve (one ingress).

Workers count requests into one set of metrics (prometheus_client's multiprocess mode) and
share a second-level response cache, both in a folder made before they start, removed after.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent dies."""
MAX_DEFAULT_WORKERS = 4
"""More than four rarely pays: each worker holds its own encoder, caches and vectors."""
WORKER_FIXED_BYTES = 600 * 2**20
"""A worker's memory apart from its index (Python, FastAPI, the query encoder, the LTR model)."""

PARENT_ENV = "TRAWL_SERVE_PARENT"
"""The pid of the ``trawl serve`` whose workers these are (:func:`die_with_parent`)."""
WORKERS_ENV = "TRAWL_SERVE_WORKERS"
"""How many workers ``trawl serve`` started, for each of them to read."""
SHARED_CACHE_ENV = "TRAWL_SEARCH__SHARED_CACHE_PATH"
"""``search.shared_cache_path`` of every worker: the responses they share."""
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client reads this when imported: each worker then writes its values to files there."""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of memory the kernel says it can give without swapping (None: unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def worker_memory(index_bytes: int) -> int:
    """What one worker is expected to hold: a fixed part (Python, the query encoder, caches)
    and twice the index files (vectors and forward arrays are read into each worker's memory).
    Measured on the 100K bench index (320 MB of files): 1.15-1.37 GB PSS a worker."""
    return WORKER_FIXED_BYTES + 2 * index_bytes


def default_workers(
    *, push: bool, shard_processes: bool, index_bytes: int = 0, available_bytes: int | None = None
) -> int:
    """The worker count ``trawl serve`` runs when ``--workers`` is not given.

    A worker per usable CPU, at most :data:`MAX_DEFAULT_WORKERS`, and no more than fit in
    half the available memory (``available_bytes``, read from the kernel when None).
    """
    if push or shard_processes:
        return 1
    workers = min(usable_cpus(), MAX_DEFAULT_WORKERS)
    available = available_memory() if available_bytes is None else available_bytes
    if available is not None:
        workers = min(workers, available // 2 // worker_memory(index_bytes))
    return max(1, workers)


def index_size(generation: Path) -> int:
    """Bytes of the files of one generation (what each worker opens)."""
    return sum(f.stat().st_size for f in generation.rglob("*") if f.is_file())


@contextmanager
def shared_by_workers() -> Iterator[Path]:
    """A fresh folder for what the workers share, named in the environment they inherit:
    the multiprocess metrics (``metrics/``) and the response cache (``responses.sqlite``)."""
    folder = Path(tempfile.mkdtemp(prefix="trawl-workers-"))
    (folder / "metrics").mkdir()
    names = {METRICS_DIR_ENV: str(folder / "metrics"), SHARED_CACHE_ENV: str(folder / "responses.sqlite")}
    previous = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield folder
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)


def die_with_parent() -> None:
    """Make this worker end (SIGTERM: it still flushes its logs) when its ``trawl serve`` dies.

    uvicorn stops its workers when it is told to stop, not when it is killed: a SIGKILLed
    ``trawl serve`` left both workers serving on its port, seen as stray processes after the
    tests that kill it. Linux's parent-death signal covers that; a parent already gone
    before the signal was armed is caught by the pid check.
    """
    parent = os.environ.get(PARENT_ENV)
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGTERM)


def serving_workers() -> int:
    """How many workers serve beside this one, itself included (1 outside ``trawl serve``)."""
    try:
        return max(1, int(os.environ.get(WORKERS_ENV, "1")))
    except ValueError:
        return 1


def metrics_shared() -> bool:
    """True in a worker of several: metrics are read from every worker's files."""
    return bool(os.environ.get(METRICS_DIR_ENV))
