"""Generations expire: ``trawl index gc`` and ``trawl run`` keep the serving one, the rollback
history and what a serving process has open, and remove the rest; rollback survives a crash
between the history append and the pointer write. Real index roots, real processes."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from api.app import create_app
from core.atomic import write_text
from core.settings import Settings
from core.types import Document
from retrieval.index import layout
from retrieval.index.retention import PINNED, collect
from retrieval.index.root import IndexRoot, disk_bytes
from tests.conftest import ServerThread
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose
from tests.fixtures.docs import SMALL_WEB
from tests.fixtures.waiting import wait_for
from training.datasets import BeirDataset

REPO = Path(__file__).resolve().parents[3]
OPENER = """
import sys
from pathlib import Path
from core.settings import SearchSettings
from retrieval.index.generation import Generation
generation = Generation.open(Path(sys.argv[1]), SearchSettings(use_vectors=False))
print("open", flush=True)
sys.stdin.read()  # until the test closes stdin (or kills this process)
generation.close()
"""


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "250",
        "TRAWL_SEARCH__USE_VECTORS": "false",
        **extra,
    }


def _published(root: IndexRoot, count: int, docs: tuple[Document, ...] = SMALL_WEB) -> list[str]:
    out = []
    for _ in range(count):
        generation = root.build(docs)
        root.publish(generation)
        out.append(generation)
    return out


def _on_disk(root: IndexRoot) -> set[str]:
    return {g.generation for g in root.list()}


def test_gc_keeps_serving_history_and_an_unpublished_build_and_removes_the_rest(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    never = root.build(SMALL_WEB)  # built, never published, older than what serves: goes
    gens = _published(root, 6)
    waiting = root.build(SMALL_WEB)  # built after the serving one (--no-publish): stays
    sizes = {g: disk_bytes(root.path_of(g)) for g in [never, *gens[:3]]}
    report = collect(root, keep=2)
    assert _on_disk(root) == {*gens[3:], waiting}
    assert report.kept == {
        gens[5]: "serving",
        gens[4]: "rollback history",
        gens[3]: "rollback history",
        waiting: "built after the serving one, not yet published",
    }
    assert {r.name: r.bytes for r in report.removed} == sizes and all(sizes.values())
    assert report.freed == sum(sizes.values())
    assert root.rollback() == gens[4] and root.rollback() == gens[5]  # rollback still works


def test_a_generation_another_process_has_open_stays_until_it_dies(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    gens = _published(root, 3)
    reader = subprocess.Popen(
        [sys.executable, "-c", OPENER, str(root.path_of(gens[0]))],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "open"
        report = collect(root, keep=0)
        assert report.kept == {gens[2]: "serving", gens[0]: PINNED}
        assert [r.name for r in report.removed] == [gens[1]]
        assert _on_disk(root) == {gens[0], gens[2]}
    finally:
        reader.send_signal(signal.SIGKILL)  # no clean close: the kernel drops its pin
        reader.wait()
    assert [r.name for r in collect(root, keep=0).removed] == [gens[0]]
    assert _on_disk(root) == {gens[2]}
    assert not [p for p in layout.pin_file(root.root, "x").parent.iterdir() if p.name != gens[2]]


def test_a_cursor_made_before_publishes_and_a_gc_still_pages_to_the_end(
    eval_dir: Path, tmp_path: Path
) -> None:
    root = IndexRoot(tmp_path / "index")
    docs = tuple(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 200))
    first = _published(root, 1, docs)[0]
    settings = Settings.model_validate({"search": {"use_vectors": False}, "api": {"rate_limit_per_s": 0}})
    with ServerThread(create_app(settings, index_dir=root.root)) as running:
        client = httpx.Client(base_url=running.url, timeout=30)
        page = client.get("/v1/search", params={"q": "boundary layer flow", "size": 5}).json()
        assert page["generation"] == first and page["next_cursor"]
        later = _published(root, 2, SMALL_WEB)
        assert client.get("/v1/search", params={"q": "lists"}).json()["generation"] == later[-1]
        report = collect(root, keep=0)
        assert report.kept[first] == PINNED and [r.name for r in report.removed] == [later[0]]
        seen = [r["doc_id"] for r in page["results"]]
        cursor = page["next_cursor"]
        while cursor:
            page = client.get("/v1/search", params={"cursor": cursor}).json()
            assert page["generation"] == first, page
            seen += [r["doc_id"] for r in page["results"]]
            cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == page["total"]


def test_gc_command_prints_what_it_removed_and_the_bytes_freed(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    gens = _published(root, 4)
    dead = root.generations_dir / ".g-dead.999999999-0000abcd.tmp"  # a pid no process has
    dead.mkdir()
    (dead / "part").write_bytes(b"x" * 4096)
    sizes = {g: disk_bytes(root.path_of(g)) for g in gens[:2]}
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "index", "gc", "--index", str(root.root), "--keep", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    removed = [line.split()[1] for line in lines if line.startswith("removed ")]
    assert sorted(removed) == sorted([dead.name, *gens[:2]])
    assert any(line.startswith(f"kept    {gens[3]}") and "(serving)" in line for line in lines)
    assert any(line.startswith(f"kept    {gens[2]}") and "(rollback history)" in line for line in lines)
    freed = re.search(r"^freed .* \(([\d,]+) bytes\)$", done.stdout, re.M)
    assert freed and int(freed[1].replace(",", "")) == sum(sizes.values()) + 4096
    assert _on_disk(root) == set(gens[2:]) and not dead.exists()


def test_trawl_run_collects_old_generations_on_its_own(tmp_path: Path) -> None:
    site = Site()
    site.page("/", html_page("Home", prose(1), links=[(f"/p{i}", f"page {i}") for i in range(4)]))
    for i in range(4):
        site.page(f"/p{i}", html_page(f"Page {i}", prose(10 + i)))
    server = HostServer(site, "127.0.0.41").start()
    data, index = tmp_path / "crawl", tmp_path / "index"
    run = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "run", server.url("/"), "--data", str(data), "--index", str(index)]
        + ["--allow-loopback", "--compact-every-s", "0.3", "--poll-s", "0.1"],
        cwd=REPO,
        env=_env(TRAWL_INDEX__KEEP_GENERATIONS="1", TRAWL_CRAWL__PARSE_WORKERS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    history = layout.history_file(index)
    try:
        wait_for(
            lambda: history.exists() and len(history.read_text().splitlines()) >= 6, "six compactions", 600
        )
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err.decode()[-3000:]
    finally:
        run.kill()
        server.stop()
    root = IndexRoot(index)
    served = root.served()
    assert len(served) >= 6
    assert _on_disk(root) == {served[0], served[1]}  # the serving one and one to roll back to


def test_a_crash_between_history_and_pointer_leaves_rollback_working(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    first, second = _published(root, 2)
    third = root.build(SMALL_WEB)
    # The publishing process dies between its two writes (SIGKILL at the pointer write).
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "import retrieval.index.root as r\n"
        "r.write_text = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
        "r.IndexRoot(Path(sys.argv[1])).publish(sys.argv[2])\n"
    )
    died = subprocess.run([sys.executable, "-c", script, str(root.root), third], cwd=REPO, check=False)
    assert died.returncode == -signal.SIGKILL
    fresh = IndexRoot(root.root)
    assert fresh.current() == second
    assert fresh.history()[-1]["published"] == third  # the entry of a publish that never happened…
    assert fresh.served() == [second, first]  # …is on no chain
    assert fresh.rollback() == first


def test_a_root_whose_history_lost_the_serving_entry_still_rolls_back(tmp_path: Path) -> None:
    """What the old order left after a crash between its pointer write and its history append
    (13 generations on disk, "Nothing to roll back to")."""
    root = IndexRoot(tmp_path / "index")
    first, second = _published(root, 2)
    third = root.build(SMALL_WEB)
    write_text(layout.current_pointer(root.root), third + "\n")
    assert IndexRoot(root.root).rollback() == second
    assert IndexRoot(root.root).rollback() == third and first in _on_disk(root)


def test_a_torn_history_line_does_not_swallow_the_next_entry(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    first, second = _published(root, 2)
    with layout.history_file(root.root).open("a") as handle:
        handle.write('{"at": 1.0, "published": "g-to')  # a crash mid-append
    third = _published(root, 1)[0]
    assert [e["published"] for e in root.history()] == [first, second, third]
    assert root.rollback() == second
