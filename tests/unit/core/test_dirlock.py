"""core.dirlock: one writer per directory, between real processes and between threads."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.dirlock import DirLock
from core.errors import DirectoryBusy

REPO = Path(__file__).resolve().parents[3]
HOLDER = """
import sys
from pathlib import Path
from core.dirlock import DirLock
lock = DirLock(Path(sys.argv[1]), what="test directory")
lock.acquire()
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin (or kills this process)
lock.release()
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    """A process holding the lock in ``path`` (it said so before this returns)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_holder_is_refused_by_name_and_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    holder = _holder(path)
    try:
        with pytest.raises(DirectoryBusy) as refused:
            DirLock(path, what="test directory").acquire(wait_s=0)
        message = str(refused.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message
        assert str(path) in message and "one writer at a time" in message
        # A waiter gets it once the holder lets go.
        assert holder.stdin is not None
        holder.stdin.close()
        lock = DirLock(path, what="test directory")
        lock.acquire(wait_s=120)
        assert json.loads(path.read_text())["pid"] == os.getpid()
        lock.release()
        assert path.read_text() == ""  # released cleanly: nothing left to take over
    finally:
        holder.kill()
        holder.wait()


def test_a_dead_holders_lock_is_taken_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "lock"
    holder = _holder(path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads(path.read_text())["pid"] == holder.pid  # the dead one's name is still there
    with caplog.at_level(logging.WARNING, logger="core.dirlock"):
        with DirLock(path, what="test directory").held(wait_s=0):
            assert json.loads(path.read_text())["pid"] == os.getpid()
    assert f"pid {holder.pid}" in caplog.text and "taking over" in caplog.text


def test_reentrant_in_a_thread_and_exclusive_between_threads(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    lock = DirLock(path, what="test directory")
    outcome: list[str] = []

    def other(wait_s: float) -> None:
        try:
            with DirLock(path, what="test directory").held(wait_s=wait_s):
                outcome.append("got it")
        except DirectoryBusy:
            outcome.append("refused")

    with lock.held():
        with lock.held():  # a build that publishes takes it twice
            thread = threading.Thread(target=other, args=(0,))
            thread.start()
            thread.join()
        assert outcome == ["refused"]
    thread = threading.Thread(target=other, args=(0,))
    thread.start()
    thread.join()
    assert outcome == ["refused", "got it"]
