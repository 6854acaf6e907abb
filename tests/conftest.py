"""Shared fixtures: paths to the evaluation collections, small real indexes, a server thread."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Ray starts its workers at nice 15 so its drivers stay responsive; beside other busy
# processes (`make test-stress`, a second pytest worker) that starved the Ray tests for
# minutes (a backfill test past its 300 s). Tests run Ray's workers at the suite's priority.
os.environ.setdefault("RAY_worker_niceness", "0")
import atexit
import shutil
import tempfile

# Everything a test writes under Settings().data_dir (evaluation caches, experiment logs)
# goes to a scratch directory (one per pytest worker), never into the checkout, and is
# removed when the worker exits.
if "TRAWL_DATA_DIR" not in os.environ:
    os.environ["TRAWL_DATA_DIR"] = tempfile.mkdtemp(prefix="trawl-test-data-")
    atexit.register(shutil.rmtree, os.environ["TRAWL_DATA_DIR"], ignore_errors=True)

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from hypothesis import settings as hypothesis_settings

# A throwaway PostgreSQL cluster and the crawl database on both backends.
from tests.fixtures.postgres import crawl_store, pg_cluster, pg_dsn  # noqa: F401

# CI explores the same examples every run (a red build must be reproducible); run with
# HYPOTHESIS_PROFILE=explore locally to search new ones.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
EVAL_DIR = SHARED / "data" / "eval"


@pytest.fixture(scope="session")
def eval_dir() -> Path:
    if not (EVAL_DIR / "cranfield" / "corpus.jsonl").exists():
        pytest.fail(
            f"the evaluation collections are missing: expected {EVAL_DIR} (../shared beside the repo)"
        )
    return EVAL_DIR


class ServerThread:
    """A uvicorn server on 127.0.0.1, port 0, in a thread, configured as `trawl serve` runs it."""

    def __init__(self, app: object) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._sock = sock
        self.port = sock.getsockname()[1]
        from api.edge import server_options  # the uvicorn settings of `trawl serve`

        config = uvicorn.Config(app, lifespan="on", **server_options())
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)


@pytest.fixture
def serve_in_thread() -> Iterator[type[ServerThread]]:
    yield ServerThread
