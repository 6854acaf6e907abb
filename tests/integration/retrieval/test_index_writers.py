"""One writer per index root: builds, publishes and a ``trawl run`` step never break each other.

Real ``trawl index`` processes over a real Tantivy index root. Two builds started together
used to break the first (FileDoesNotExist in its staging folder: the second build's sweep
removed every hidden folder); now the second is refused with the first's name, or runs
after it, and every generation on disk is whole.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from core.errors import DirectoryBusy
from core.settings import Settings
from retrieval.index import layout
from retrieval.index.incremental import follow
from retrieval.index.lexical import LexicalShard
from retrieval.index.manifest import IndexManifest
from retrieval.index.root import IndexRoot
from tests.conftest import ServerThread
from tests.fixtures.docs import SMALL_WEB
from tests.fixtures.waiting import wait_for
from tests.integration.freshness.crawled import crawled_index

REPO = Path(__file__).resolve().parents[3]
KEY = "admin-key"
HOLDER = """
import sys
from pathlib import Path
from core.atomic import temp_sibling
from retrieval.index import layout
from retrieval.index.root import IndexRoot
root = IndexRoot(Path(sys.argv[1]))
with root.writing():
    # What a build in progress has on disk: its staging folder, named after its pid.
    temp_sibling(layout.generation_dir(root.root, "g-staged")).mkdir(parents=True)
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin (or kills this process)
"""


def _holder(root: Path) -> subprocess.Popen[str]:
    """A process holding the root's writer lock, as a long build does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _trawl(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "250", "TRAWL_SEARCH__USE_VECTORS": "false"}
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out + err


@pytest.fixture
def small_beir(eval_dir: Path, tmp_path: Path) -> Path:
    """The first 300 Cranfield documents as a BEIR corpus."""
    corpus = tmp_path / "beir"
    corpus.mkdir()
    with (eval_dir / "cranfield" / "corpus.jsonl").open() as src:
        (corpus / "corpus.jsonl").write_text("".join(itertools.islice(src, 300)))
    return corpus


def _whole(root: IndexRoot) -> list[str]:
    """Every generation on disk, each checked readable (its manifest and its shards' documents)."""
    out = []
    for info in root.list():
        manifest = IndexManifest.load(info.path)
        for shard in range(manifest.shards):
            assert LexicalShard(layout.lexical_dir(info.path, shard)).num_docs > 0
        out.append(info.generation)
    return out


@pytest.mark.timeout(900)
def test_two_builds_at_once_never_break_each_other(eval_dir: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    corpus = str(eval_dir / "cranfield")
    builds = [_trawl("index", "--beir", corpus, "--index", str(index)) for _ in range(2)]
    results = [_finish(b) for b in builds]
    for code, output in results:
        assert "FileDoesNotExist" not in output and "Traceback" not in output, output
        assert code == 0 or (code == 2 and "is in use by pid" in output and "one writer" in output), output
    built = sum(1 for code, _ in results if code == 0)
    assert built >= 1
    root = IndexRoot(index)
    generations = _whole(root)
    assert len(generations) == built and root.current() in generations
    assert not list(root.generations_dir.glob(".*"))  # no staging folder left behind


@pytest.mark.timeout(900)
def test_a_build_is_refused_while_a_live_writer_holds_the_root_and_takes_over_a_dead_ones(
    small_beir: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    holder = _holder(index)
    try:
        code, output = _finish(_trawl("index", "--beir", str(small_beir), "--index", str(index)))
        assert code == 2, output
        assert f"is in use by pid {holder.pid} on host {socket.gethostname()}" in output, output
        assert str(layout.lock_file(index)) in output.replace("\n", "")
        staged = list(IndexRoot(index).generations_dir.glob(".*"))
        assert len(staged) == 1 and str(holder.pid) in staged[0].name  # the live build's staging is intact
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The holder died holding the lock and leaving its staging folder: the next build takes
    # the lock over and sweeps what the dead build left.
    code, output = _finish(_trawl("index", "--beir", str(small_beir), "--index", str(index)))
    assert code == 0, output
    root = IndexRoot(index)
    assert _whole(root) == [root.current()]
    assert not list(root.generations_dir.glob(".*"))


def test_a_sweep_leaves_a_live_builders_staging_and_removes_a_dead_ones(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    root.publish(root.build(SMALL_WEB))
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        live_dir = root.generations_dir / f".g-live.{alive.pid}-0000abcd.tmp"
        dead_dir = root.generations_dir / f".g-dead.{dead.pid}-0000abcd.tmp"
        for folder in (live_dir, dead_dir):
            (folder / "shard-0000").mkdir(parents=True)
            (folder / "shard-0000" / "file").write_bytes(b"x" * 1000)
        removed = root.sweep()
        assert [(p.name, size) for p, size in removed] == [(dead_dir.name, 1000)]
        assert live_dir.is_dir() and not dead_dir.exists()
    finally:
        alive.kill()
        alive.wait()


def test_publish_through_the_api_answers_409_naming_the_writer(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    first = root.build(SMALL_WEB)
    root.publish(first)
    second = root.build(SMALL_WEB[:3])
    settings = Settings.model_validate(
        {
            "api": {"admin_api_key": KEY, "rate_limit_per_s": 0},
            "search": {"use_vectors": False},
            "index": {"lock_wait_s": 0.2},
        }
    )
    with ServerThread(create_app(settings, index_dir=root.root)) as running:
        client = httpx.Client(base_url=running.url, timeout=30, headers={"X-API-Key": KEY})
        holder = _holder(root.root)
        try:
            busy = client.post("/v1/index/publish", json={"generation": second})
            rolled = client.post("/v1/index/rollback")
        finally:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait()
        assert (busy.status_code, busy.json()["error"]) == (409, "directory_busy")
        assert f"pid {holder.pid}" in busy.json()["detail"]
        assert (rolled.status_code, rolled.json()["error"]) == (409, "directory_busy")
        assert root.current() == first
        done = client.post("/v1/index/publish", json={"generation": second})
        assert done.json() == {"serving": second}


def test_in_place_steps_wait_for_another_writer_then_catch_up(
    eval_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A manual build or publish holds the root: `trawl run`'s indexer waits, says for whom,
    and applies what the crawl wrote meanwhile once the writer is done."""
    crawled = crawled_index(eval_dir, tmp_path, docs=40, shards=1)
    holder = _holder(crawled.index)
    stop = threading.Event()
    thread = threading.Thread(target=follow, args=(crawled.indexer, stop), kwargs={"poll_s": 0.05})
    try:
        changed = dataclasses.replace(crawled.docs[0], body="zanzibar", fetched_at=200.0)
        crawled.store.append([changed])
        with pytest.raises(DirectoryBusy):
            crawled.indexer.step()
        with caplog.at_level(logging.WARNING, logger="retrieval.index.incremental"):
            thread.start()
            wait_for(lambda: f"pid {holder.pid}" in caplog.text, "the indexer to say whom it waits for")
        assert crawled.indexer.backlog() == 1  # held back, not lost
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    try:
        wait_for(lambda: crawled.indexer.backlog() == 0, "the held-back step to be applied")
    finally:
        stop.set()
        thread.join()
