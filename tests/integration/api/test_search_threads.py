"""``api.search_threads`` bounds how many searches run side by side; the others wait their turn."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from core.settings import Settings
from retrieval.index.build import build_index
from tests.conftest import ServerThread
from tests.fixtures.docs import SMALL_WEB


@pytest.mark.parametrize("threads", [1, 2])
def test_no_more_searches_run_at_once_than_search_threads(tmp_path: Path, threads: int) -> None:
    build_index(SMALL_WEB, tmp_path / "index")
    settings = Settings.model_validate({"api": {"search_threads": threads}})
    app = create_app(settings, index_dir=tmp_path / "index")
    with ServerThread(app) as server:
        service = app.state.search
        original = service.search
        lock = threading.Condition()
        running = [0, 0]  # now, most

        def slow_search(*args: Any, **kwargs: Any) -> Any:
            with lock:
                running[0] += 1
                running[1] = max(running[1], running[0])
                lock.notify_all()
                # Held until as many searches run as are allowed (however slow the machine),
                # so that one too many would be seen running too.
                lock.wait_for(lambda: running[1] >= threads, timeout=10)
            try:
                time.sleep(0.05)  # room for a (wrong) extra search to start
                return original(*args, **kwargs)
            finally:
                with lock:
                    running[0] -= 1

        service.search = slow_search
        paths = ["/v1/search?q=list", "/?q=bread"] * 3

        def get(path: str) -> int:
            return httpx.get(server.url + path, timeout=30).status_code

        with ThreadPoolExecutor(len(paths)) as pool:
            statuses = list(pool.map(get, paths))
    assert statuses == [200] * len(paths)
    assert running[1] == threads
