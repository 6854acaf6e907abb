"""Index drills: damaged files under publish and under a running ``trawl serve``, two builds on
one root, ``trawl index gc`` after several builds, a publish killed between its two writes.

Every try works on its own copy of one pristine index root, built once per run with the
real commands: 120 Cranfield documents in two shards, generation A published and embedded
(the packaged MiniLM), generation B built and embedded but not published.
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from bench.faults.harness import (
    EVAL,
    REPO,
    Drill,
    Outcome,
    last_line,
    one_line_error,
    served,
    stop,
    trawl,
    trawl_started,
    wait_for,
)
from retrieval.index import layout
from retrieval.index.root import IndexRoot

FILES = {
    "hnsw.bin": "shard-0000/vector/*/index/hnsw.bin",
    ".fieldnorm": "shard-0000/lexical/*.fieldnorm",
    ".term": "shard-0000/lexical/*.term",
    ".store": "shard-0000/lexical/*.store",
    "forward/pagerank.npy": "shard-0000/lexical/trawl-forward/pagerank.npy",
}
QUERIES = ("boundary layer", "heat transfer", "supersonic flow over a wing", "pressure distribution")
NO_VECTORS = {"TRAWL_SEARCH__USE_VECTORS": "false"}


def damage(gen_dir: Path, kind: str, mode: str) -> Path:
    """Garble the middle of one file of shard 0 in place (64 KB of HNSW, 4 KB of others, at
    most half the file; its size stays), or cut it to half; returns the file."""
    path = max(gen_dir.glob(FILES[kind]), key=lambda p: p.stat().st_size)
    data = path.read_bytes()
    with path.open("r+b") as handle:
        if mode == "truncated":
            handle.truncate(len(data) // 2)
        else:
            start = len(data) // 2
            stop_at = min(len(data), start + (65536 if kind == "hnsw.bin" else 4096))
            handle.seek(start)
            handle.write(bytes(b ^ 0x5A for b in data[start:stop_at]))
    return path


def _corpus(dest: Path, lines: list[str]) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "corpus.jsonl").write_text("".join(lines))
    return dest


def _built(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {last_line(done.stderr)}")


def _build(beir: Path, index: Path, what: str, *extra: str) -> None:
    """``trawl index --beir BEIR --index INDEX`` (published unless ``--no-publish``), no vectors."""
    _built(trawl("index", "--beir", str(beir), "--index", str(index), *extra, settings=NO_VECTORS), what)


@dataclass
class Corpora:
    """What the index drills build from, made once per run under ``work``."""

    work: Path

    @cached_property
    def small(self) -> Path:
        """The first 120 Cranfield documents (a build takes about a second)."""
        with (EVAL / "cranfield" / "corpus.jsonl").open() as src:
            return _corpus(self.work / "small-beir", list(itertools.islice(src, 120)))

    @cached_property
    def large(self) -> Path:
        """Cranfield and CISI three times over (8,580 documents, distinct ids): a build long
        enough that a second one surely starts while the first holds the root."""
        lines = []
        for copy, name in itertools.product(range(3), ("cranfield", "cisi")):
            for line in (EVAL / name / "corpus.jsonl").read_text().splitlines():
                doc = json.loads(line)
                doc["_id"] = f"{name}-{copy}-{doc['_id']}"
                lines.append(json.dumps(doc) + "\n")
        return _corpus(self.work / "large-beir", lines)

    @cached_property
    def pristine(self) -> tuple[Path, str, str]:
        """(index root, A published with vectors, B built with vectors), by the real commands."""
        root = self.work / "pristine-index"
        beir = str(self.small)
        _built(trawl("index", "--beir", beir, "--index", str(root), "--shards", "2"), "building A")
        _built(trawl("embed", "--index", str(root)), "embedding A")
        _built(trawl("index", "--beir", beir, "--index", str(root), "--shards", "2", "--no-publish"), "B")
        index = IndexRoot(root)
        a = index.current()
        b = next(g.generation for g in index.list() if g.generation != a)
        _built(trawl("embed", "--index", str(index.path_of(b))), "embedding B")
        assert a is not None
        return root, a, b

    def copy(self, folder: Path) -> tuple[IndexRoot, str, str]:
        root, a, b = self.pristine
        shutil.copytree(root, folder / "index")
        return IndexRoot(folder / "index"), a, b


def _damaged_drill(corpora: Corpora, kind: str, mode: str) -> Drill:
    part = "vectors" if kind == "hnsw.bin" else "lexical"
    ranker = "hybrid" if kind == "hnsw.bin" else "bm25"
    missing = "missing_vector_shards" if kind == "hnsw.bin" else "missing_shards"

    def run(folder: Path) -> Outcome:
        root, a, b = corpora.copy(folder)
        with served(root.root, folder / "serve.log", TRAWL_SEARCH__VERIFY_INTERVAL_S="0.2") as svc:
            before = [svc.answered(q, ranker=ranker) for q in QUERIES]
            if any(body is None or body["partial"] for body in before):
                return Outcome(False, "the intact index did not answer in full")
            in_b = damage(root.path_of(b), kind, mode)
            published = trawl("index", "publish", b, "--index", str(root.root))
            refused = (
                published.returncode == 2
                and str(in_b) in published.stderr
                and one_line_error(published)
                and root.current() == a
            )
            verified = trawl("index", "verify", b, "--index", str(root.root))
            named = verified.returncode == 1 and str(in_b) in verified.stdout
            in_a = damage(root.path_of(a), kind, mode)
            try:  # checked every 0.2 s: two minutes is room for a loaded machine, not for a miss
                wait_for(lambda: svc.healthz()["status"] != "ok", "/healthz to notice", timeout=120)
            except TimeoutError:
                pass  # the table says what it kept saying
            health = svc.healthz()
            problems = health.get("problems", [])
            says = len(problems) == 1 and problems[0].startswith(f"shard 0 {part}: {in_a}")
            answers = [svc.answered(q, ranker=ranker) for q in QUERIES * 3]
            fine = [body for body in answers if body is not None]
            dropped = [body for body in fine if body[missing] == [0] and body["generation"] == a]
            alive = svc.proc.poll() is None
        said = (
            f"publish {'refused, one line naming the file' if refused else f'exit {published.returncode}'}; "
            f"verify exit {verified.returncode}{' naming it' if named else ''}; "
            f"{len(fine)}/{len(answers)} searches 200, {len(dropped)} without shard 0's {part}; "
            f"/healthz {health['status']}{' naming the file' if says else ''}"
            f"{'' if alive else '; SERVER DIED'}"
        )
        ok = refused and named and says and alive and len(dropped) == len(answers)
        return Outcome(ok, said)

    return Drill(
        f"{mode} {kind} (shard 0)",
        "publish refused naming the file; verify exits 1; every search 200 "
        f"({'lexical only for shard 0' if part == 'vectors' else 'shard 0 left out'}); "
        "/healthz degraded naming the file",
        run,
    )


def _started_damaged(corpora: Corpora) -> Drill:
    """Issue 51's first finding as it was met: `trawl serve` on a generation whose HNSW file was
    garbled before it started (it failed at start, "Label not found")."""

    def run(folder: Path) -> Outcome:
        root, a, _ = corpora.copy(folder)
        path = damage(root.path_of(a), "hnsw.bin", "garbled")
        with served(root.root, folder / "serve.log") as svc:
            health = svc.healthz()
            answers = [svc.answered(q, ranker="hybrid") for q in QUERIES * 3]
            fine = [body for body in answers if body is not None and body["results"]]
            lexical = [body for body in fine if body["missing_vector_shards"] == [0]]
        says = health["status"] == "degraded" and any(str(path) in p for p in health.get("problems", []))
        said = (
            f"serve started; {len(fine)}/{len(answers)} hybrid searches 200 with results, "
            f"{len(lexical)} lexical-only for shard 0; /healthz {health['status']}"
            f"{' naming the file' if says else ''}"
        )
        return Outcome(says and len(lexical) == len(answers), said)

    return Drill(
        "garbled hnsw.bin before `trawl serve` starts",
        "serve starts; hybrid searches 200, shard 0 lexical only; /healthz degraded naming the file",
        run,
    )


def _two_builds(corpora: Corpora) -> Drill:
    def run(folder: Path) -> Outcome:
        index = folder / "index"
        beir = str(corpora.large)
        log = folder / "first-build.log"
        first = trawl_started("index", "--beir", beir, "--index", str(index), log=log, **NO_VECTORS)
        try:
            lock, holds = layout.lock_file(index), f'"pid": {first.pid}'

            def building() -> bool:  # holding the root's lock, or (without one) staging its files
                held = lock.exists() and holds in lock.read_text()
                return held or any((index / "generations").glob(".*"))

            wait_for(lambda: first.poll() is not None or building(), "the first build to start")
            second = trawl("index", "--beir", beir, "--index", str(index), settings=NO_VECTORS)
            overlapped = first.poll() is None
            first.wait(timeout=900)
        finally:
            stop(first)
        first_err = log.read_text()
        refused = (
            second.returncode == 2
            and f"in use by pid {first.pid}" in second.stderr
            and one_line_error(second)
        )
        root = IndexRoot(index)
        gens = [g.generation for g in root.list()]
        verify = trawl("index", "verify", "--index", str(index))
        intact = (
            first.returncode == 0
            and "FileDoesNotExist" not in first_err
            and len(gens) == 1
            and root.current() == gens[0]
            and verify.returncode == 0
            and not list(root.generations_dir.glob(".*"))
        )
        said = (
            f"{'second refused naming the first' if refused else f'second exit {second.returncode}'}"
            f"{'' if overlapped else ' (the first had finished)'}; "
            f"first {'built, published, verify ok, no staging left' if intact else 'NOT INTACT'}"
            f" (exit {first.returncode}"
            f", {len(gens)} generation{'s' if len(gens) != 1 else ''})"
        )
        return Outcome(refused and intact and overlapped, said)

    return Drill(
        "two `trawl index` builds on one root",
        "the second refused at once naming the first's pid (exit 2); the first builds and publishes, intact",
        run,
    )


def _gc(corpora: Corpora) -> Drill:
    def run(folder: Path) -> Outcome:
        index = folder / "index"
        _build(corpora.small, index, "the first build")
        root = IndexRoot(index)
        first = root.current()
        with served(index, folder / "serve.log", **NO_VECTORS) as svc:
            page = svc.search("boundary layer flow", size=3).json()
            for n in range(4):
                _build(corpora.small, index, f"build {n + 2}")
            serving = svc.search("heat transfer").json()["generation"]
            built = len(root.list())
            gc = trawl("index", "gc", "--index", str(index), "--keep", "1")
            left = {g.generation for g in root.list()}
            chain = root.served()
            pages, cursor = 1, page.get("next_cursor")
            same = page["generation"] == first
            while cursor:
                answer = svc.client.get("/v1/search", params={"cursor": cursor})
                same = same and answer.status_code == 200 and answer.json()["generation"] == first
                if answer.status_code != 200:
                    break
                pages, cursor = pages + 1, answer.json().get("next_cursor")
        rolled = trawl("index", "rollback", "--index", str(index))
        expected_left = {first, chain[0], chain[1]}
        ok = (
            gc.returncode == 0
            and serving == chain[0]
            and left == expected_left
            and same
            and rolled.returncode == 0
            and root.current() == chain[1]
        )
        said = (
            f"{built} generations, gc --keep 1 left {len(left)} "
            f"({'serving, one to roll back to, the cursor’s' if left == expected_left else 'OTHERS'}); "
            f"cursor {'paged to the end on its generation' if same else 'BROKE'}; "
            f"rollback {'works' if rolled.returncode == 0 and root.current() == chain[1] else 'FAILED'}"
        )
        return Outcome(ok, said)

    return Drill(
        "`trawl index gc` after five builds, a cursor open",
        "3 generations left: serving, one to roll back to (--keep 1), the one a live cursor names; "
        "the cursor pages to the end; rollback works",
        run,
    )


CRASH = """
import os, signal, sys
from pathlib import Path
import retrieval.index.root as r
r.write_text = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # dies at the pointer write
r.IndexRoot(Path(sys.argv[1])).publish(sys.argv[2])
"""


def _crash(corpora: Corpora) -> Drill:
    def run(folder: Path) -> Outcome:
        index = folder / "index"
        for n in range(2):
            _build(corpora.small, index, f"build {n + 1}")
        _build(corpora.small, index, "the third build", "--no-publish")
        root = IndexRoot(index)
        first, second = root.served()[::-1]
        third = next(g.generation for g in root.list() if g.generation not in (first, second))
        died = subprocess.run([sys.executable, "-c", CRASH, str(index), third], cwd=REPO, check=False)
        killed = died.returncode == -signal.SIGKILL
        still = root.current() == second
        rolled = trawl("index", "rollback", "--index", str(index))
        back = rolled.returncode == 0 and root.current() == first
        again = trawl("index", "publish", third, "--index", str(index))
        said = (
            f"publish {'SIGKILLed between history and pointer' if killed else f'exit {died.returncode}'}; "
            f"{'the previous one still serves' if still else 'POINTER MOVED'}; "
            f"rollback {'returns to the one before' if back else f'FAILED: {last_line(rolled.stderr)}'}"
            f"; publishing again {'works' if again.returncode == 0 else 'FAILED'}"
        )
        return Outcome(killed and still and back and again.returncode == 0, said)

    return Drill(
        "publish killed between history and pointer",
        "the previous generation still serves; `trawl index rollback` returns to the one before it",
        run,
    )


def drills(work: Path) -> list[Drill]:
    corpora = Corpora(work)
    damaged = [_damaged_drill(corpora, kind, mode) for kind in FILES for mode in ("garbled", "truncated")]
    return [*damaged, _started_damaged(corpora), _two_builds(corpora), _gc(corpora), _crash(corpora)]
