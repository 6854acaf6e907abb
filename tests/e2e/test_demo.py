"""``trawl demo`` end to end on a tiny local site: BM25 first, then the whole engine without a restart."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TOPICS = ("lists", "dictionaries", "generators", "decorators", "exceptions", "asyncio", "typing", "sockets")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_site(root: Path, paragraphs: int = 12) -> None:
    root.mkdir()
    links = "".join(f'<li><a href="{t}.html">{t}</a></li>' for t in TOPICS)
    (root / "index.html").write_text(
        f"<html><head><title>Tiny docs</title></head><body><ul>{links}</ul></body></html>"
    )
    for i, topic in enumerate(TOPICS):
        body = " ".join(
            f"<p>How {topic} work in Python, part {j}: example {i}-{j} of {topic}.</p>"
            for j in range(paragraphs)
        )
        (root / f"{topic}.html").write_text(
            f"<html><head><title>About {topic}</title></head><body><h1>{topic}</h1>{body}"
            f'<a href="index.html">home</a></body></html>'
        )


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except OSError:
        return 0, ""


def wait_for(predicate: Any, timeout: float, what: str, job: subprocess.Popen[bytes]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert job.poll() is None, f"the demo exited ({job.returncode}) before {what}"
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def demo(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "demo", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def demo_on_site(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """The demo over ``tmp_path/site`` into ``tmp_path/d`` on free ports; (process, port, site port)."""
    port, site_port = free_port(), free_port()
    site = str(tmp_path / "site")
    args = ("--site", site, "--data", "d", "--port", str(port), "--site-port", str(site_port))
    return demo(tmp_path, *args), port, site_port


def test_a_busy_port_is_reported_in_one_line_before_any_work(tmp_path: Path) -> None:
    make_site(tmp_path / "site")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        job = demo(tmp_path, "--site", str(tmp_path / "site"), "--port", str(busy), "--data", "d")
        out, _ = job.communicate(timeout=60)
    text = out.decode()
    assert job.returncode == 2
    assert f"port {busy} is in use" in text and "--port N" in text
    assert len(text.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()  # nothing was crawled


@pytest.mark.slow  # crawls, indexes, loads the model in a child process and switches generation
def test_the_demo_serves_bm25_then_switches_to_vectors_without_a_restart(tmp_path: Path) -> None:
    make_site(tmp_path / "site")
    job, port, site_port = demo_on_site(tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        first = wait_for(lambda: json.loads(get(f"{base}/healthz")[1] or "null"), 90, "search answers", job)
        status, page = get(f"{base}/?q=generators")
        assert status == 200 and "About generators" in page
        bm25_generation = first["generation"]
        if first["ranker"] == "bm25":  # the backfill may already be done on a fast machine
            assert "hybrid-rrf" not in first["rankers"]

        def switched() -> dict[str, Any] | None:
            health = json.loads(get(f"{base}/healthz")[1] or "null")
            return health if health and health["ranker"] != "bm25" else None

        live = wait_for(switched, 240, "the switch to vectors", job)
        assert live["generation"] != bm25_generation
        # With vectors and the packaged LTR model, the measured default is LTR (DECISIONS 30).
        assert live["ranker"] == "ltr" and "hybrid-rrf" in live["rankers"]
        assert "held-out nDCG@10" in live["ranker_reason"]
        assert live["backfill"]["state"] == "done" and live["backfill"]["generation"] == live["generation"]
        status, body = get(f"{base}/v1/search?q=generators&ranker=hybrid-rrf")
        answer = json.loads(body)
        assert status == 200 and answer["ranker"] == "hybrid-rrf" and answer["missing_vector_shards"] == []
        assert "generators" in answer["results"][0]["url"]
        status, home = get(f"{base}/")
        assert (
            f'generation <span id="live-generation">{live["generation"]}</span>' in home
            and "embeddings done" in home
        )
        status, hosts = get(f"{base}/hosts")
        assert status == 200 and f"127.0.0.1:{site_port}" in hosts  # the demo told the service its crawl
    finally:
        job.terminate()
        out, _ = job.communicate(timeout=30)
    text = out.decode()
    assert "crawled 9 pages" in text and "search answers (BM25)" in text and "full engine serving" in text
    assert "CrawlSummary(" not in text


def children_of(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def cmdline(pid: int) -> str:
    """A process's command line, or "" once it has exited (it can between listing and reading)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_demo_takes_its_background_backfill_with_it(tmp_path: Path) -> None:
    make_site(tmp_path / "site", paragraphs=600)  # a backfill of minutes, not seconds
    job, _, _ = demo_on_site(tmp_path)
    progress = tmp_path / "d" / "index" / "backfill.json"

    def embedding() -> list[int]:
        children = [c for c in children_of(job.pid) if "spawn_main" in cmdline(c)]
        state = json.loads(progress.read_text()).get("state") if progress.exists() else None
        return children if state == "embedding" else []

    try:
        backfill = wait_for(embedding, 180, "the backfill encoding", job)
        job.kill()  # SIGKILL: no exit handler of the demo runs
        job.wait(timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(c) for c in backfill):
            time.sleep(0.1)
        assert not any(alive(c) for c in backfill), "the backfill outlived the demo"
    finally:
        if job.poll() is None:
            job.kill()
        job.communicate(timeout=30)
        for c in children_of(1):
            if alive(c) and "spawn_main" in cmdline(c):
                cwd = Path(f"/proc/{c}/cwd")
                if cwd.exists() and cwd.resolve() == tmp_path.resolve():
                    os.kill(c, 9)  # never leave an orphan behind when the assertion fails
