"""A SIGKILLed crawl leaves no process behind: its parse workers (and with them the
resource tracker) die with it.

Before, every killed ``trawl crawl`` or ``trawl run`` left its parse workers and
multiprocessing's resource tracker running under init (24 processes, 1.1 GB after 11
kills): a worker blocked on its task queue never learns that its parent is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawl.extraction.parsing import INLINE_MAX_TAGS
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

_TRAWL = str(Path(sys.executable).parent / "trawl")


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of a live process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), fields[0], int(fields[19])


def _children(parent: int) -> dict[int, int]:
    """pid → start time of every live process whose parent is ``parent``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            ppid, state, started = stat
            if ppid == parent and state != "Z":
                found[int(entry.name)] = started
    return found


def _alive(pid: int, started: int) -> bool:
    """The same process (not a reused pid) still runs (a zombie waiting for init to reap it is dead)."""
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z" and stat[2] == started


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.fixture
def web() -> Iterator[HostServer]:
    """Pages with more tags than are parsed inline, so they go to the parse pool."""
    site = Site()
    site.raw("/robots.txt", b"User-agent: *\n", content_type="text/plain")
    site.page("/", html_page("Home", "start", links=[(f"/p{i}", f"page {i}") for i in range(200)]))
    tags = "<span>x</span>" * (INLINE_MAX_TAGS + 100)
    for i in range(200):
        site.page(f"/p{i}", html_page(f"Page {i}", prose(i) + tags))
    server = HostServer(site, "127.0.0.61").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(300)
def test_a_killed_crawl_leaves_no_children(web: HostServer, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TRAWL_CRAWL__ALLOWED_NETWORKS": '["127.0.0.0/24"]',
        "TRAWL_CRAWL__MIN_DELAY_S": "0.2",
    }
    argv = [_TRAWL, "crawl", web.url("/"), "--data", str(tmp_path / "crawl"), "--no-progress"]
    crawl = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            children = _children(crawl.pid)
            if any("spawn_main" in _command(pid) for pid in children):
                break  # a parse worker runs (the resource tracker started before it)
            assert crawl.poll() is None, "the crawl ended before its parse pool started"
            assert time.monotonic() < deadline, f"no parse worker appeared: {children}"
            time.sleep(0.05)
        children = _children(crawl.pid)
        crawl.send_signal(signal.SIGKILL)
        crawl.wait(timeout=60)
    finally:
        if crawl.poll() is None:
            crawl.kill()
    deadline = time.monotonic() + 60
    while left := {pid: _command(pid) for pid, started in children.items() if _alive(pid, started)}:
        if time.monotonic() > deadline:
            for pid in left:  # clean up after a failure: these are the orphans the test found
                os.kill(pid, signal.SIGKILL)
            pytest.fail(f"children outlived the killed crawl: {left}")
        time.sleep(0.1)
