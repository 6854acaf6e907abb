"""A damaged index file is never served and never silent (issue 51, items 1 and 2).

A real index root on disk (Tantivy shards, HNSW vectors of the packaged MiniLM), two
generations: A published, B built. Each case garbles (same size) or truncates one file of
shard 0, of B for publish and ``trawl index verify``, of A under a running service (a
uvicorn server on 127.0.0.1) for serving: publish is refused naming the file, verify names
it and exits 1, and the service answers 200 without that shard (or its vectors) while
``/healthz`` says "degraded" and why.
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from cli.main import app as trawl_app
from core.errors import IndexDamaged
from core.settings import EmbedSettings, SearchSettings, Settings
from retrieval.index.root import IndexRoot
from retrieval.remote.shard_http import create_shard_app, query_to_wire
from retrieval.text.analyzer import parse_query
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from tests.conftest import ServerThread
from tests.fixtures.cli import run_trawl
from tests.fixtures.shards import http_broker
from training.datasets import BeirDataset

FILES = {
    "hnsw": "shard-0000/vector/*/index/hnsw.bin",
    "fieldnorm": "shard-0000/lexical/*.fieldnorm",
    "term": "shard-0000/lexical/*.term",
    "store": "shard-0000/lexical/*.store",
    "forward": "shard-0000/lexical/trawl-forward/pagerank.npy",
}
CASES = [(kind, mode) for kind in FILES for mode in ("garbled", "truncated")]
QUERIES = ("boundary layer", "heat transfer", "supersonic flow over a wing", "pressure distribution")
DEADLINE_S = 180.0


@pytest.fixture(scope="module")
def pristine(eval_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(index root, published generation A, built generation B): both with vectors."""
    root = IndexRoot(tmp_path_factory.mktemp("damage") / "index")
    docs = list(itertools.islice(BeirDataset.open(eval_dir / "cranfield").iter_documents(), 120))
    embedder = Embedder()
    a = root.build(docs, shards=2)
    backfill_index(root.path_of(a), embedder, EmbedSettings())
    root.publish(a)
    b = root.build(docs, shards=2)
    backfill_index(root.path_of(b), embedder, EmbedSettings())  # the store's vectors, linked
    return root.root, a, b


@pytest.fixture
def index(pristine: tuple[Path, str, str], tmp_path: Path) -> tuple[IndexRoot, str, str]:
    root, a, b = pristine
    shutil.copytree(root, tmp_path / "index")
    return IndexRoot(tmp_path / "index"), a, b


def damage(gen_dir: Path, kind: str, mode: str) -> Path:
    """Garble bytes in the middle of one file of shard 0 (64 KB of HNSW, 4 KB of others, at
    most half the file: its size stays), or cut it to half; returns the file."""
    found = sorted(gen_dir.glob(FILES[kind]), key=lambda p: p.stat().st_size)
    assert found, f"no {FILES[kind]} in {gen_dir}"
    path = found[-1]
    data = path.read_bytes()
    if mode == "truncated":
        with path.open("r+b") as handle:
            handle.truncate(len(data) // 2)
        return path
    start = len(data) // 2
    stop = min(len(data), start + (65536 if kind == "hnsw" else 4096))
    with path.open("r+b") as handle:
        handle.seek(start)
        handle.write(bytes(b ^ 0x5A for b in data[start:stop]))
    assert path.stat().st_size == len(data)
    return path


@pytest.mark.parametrize(("kind", "mode"), CASES)
def test_publish_refuses_a_damaged_generation_and_verify_names_the_file(
    index: tuple[IndexRoot, str, str], kind: str, mode: str
) -> None:
    root, a, b = index
    path = damage(root.path_of(b), kind, mode)
    with pytest.raises(IndexDamaged) as refused:
        root.publish(b)
    assert str(path) in str(refused.value) and "not published" in str(refused.value)
    assert root.current() == a  # still serving the intact one
    verified = CliRunner().invoke(trawl_app, ["index", "verify", b, "--index", str(root.root)])
    assert verified.exit_code == 1, verified.output
    assert f"shard 0 {'vectors' if kind == 'hnsw' else 'lexical'}: {path}" in verified.output
    intact = CliRunner().invoke(trawl_app, ["index", "verify", a, "--index", str(root.root)])
    assert intact.exit_code == 0 and f"{a} (serving): ok" in intact.output


def test_the_commands_refuse_and_report_in_one_line(index: tuple[IndexRoot, str, str]) -> None:
    """The real ``trawl`` processes: publish refused (exit 2, one line naming the file),
    verify of the whole root exits 1 and names it, the serving pointer unchanged."""
    root, a, b = index
    path = damage(root.path_of(b), "term", "garbled")
    published = run_trawl("index", "publish", b, "--index", str(root.root))
    assert published.returncode == 2, published.stderr
    assert str(path) in published.stderr and "Traceback" not in published.stderr
    assert root.current() == a
    verified = run_trawl("index", "verify", "--index", str(root.root))
    assert verified.returncode == 1
    assert str(path) in verified.stdout and f"{a} (serving): ok" in verified.stderr


def _settings() -> Settings:
    return Settings.model_validate(
        # A deadline no loaded machine misses: only the damaged shard may be missing.
        {
            "api": {"rate_limit_per_s": 0},
            "search": {"verify_interval_s": 0.05, "spelling": False, "deadline_s": 60.0},
        }
    )


def _degraded(client: httpx.Client) -> dict[str, object]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        health = client.get("/healthz").json()
        if health["status"] == "degraded":
            return dict(health)
        time.sleep(0.05)
    raise AssertionError(f"/healthz never said degraded: {health}")


@pytest.fixture
def served(index: tuple[IndexRoot, str, str]) -> Iterator[tuple[IndexRoot, str, httpx.Client]]:
    root, a, _ = index
    with (
        ServerThread(create_app(_settings(), index_dir=root.root)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        yield root, a, client


@pytest.mark.parametrize(("kind", "mode"), CASES)
def test_a_file_damaged_under_a_running_service_takes_its_shard_out(
    served: tuple[IndexRoot, str, httpx.Client], kind: str, mode: str
) -> None:
    root, a, client = served
    ranker = "hybrid" if kind == "hnsw" else "bm25"
    for q in QUERIES:  # answered in full first (and cached)
        first = client.get("/v1/search", params={"q": q, "ranker": ranker})
        assert first.status_code == 200 and not first.json()["partial"]
    healthy = client.get("/healthz").json()
    assert (healthy["status"], healthy.get("problems", [])) == ("ok", [])

    path = damage(root.path_of(a), kind, mode)
    health = _degraded(client)  # the background check found it
    problems = health["problems"]
    assert isinstance(problems, list) and len(problems) == 1, problems
    part = "vectors" if kind == "hnsw" else "lexical"
    assert problems[0].startswith(f"shard 0 {part}: {path}")  # generation (in the path), shard, file

    for q in QUERIES * 3:
        r = client.get("/v1/search", params={"q": q, "ranker": ranker})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["partial"] and body["generation"] == a
        if kind == "hnsw":  # lexical only for shard 0, everything else as before
            assert body["missing_vector_shards"] == [0] and body["missing_shards"] == []
            assert body["results"]
        else:
            assert body["missing_shards"] == [0]
    page = client.get("/", params={"q": QUERIES[0]})
    assert page.status_code == 200


def test_a_damaged_vector_file_at_start_serves_lexical_with_a_warning(
    index: tuple[IndexRoot, str, str],
) -> None:
    """``trawl search`` on a published generation whose HNSW file was garbled afterwards
    (it used to end in "Label not found" or a segfault): shard 0 serves lexical only, and
    the command says which file."""
    root, a, _ = index
    path = damage(root.path_of(a), "hnsw", "garbled")
    searched = run_trawl("search", "boundary layer", "--index", str(root.root), "--ranker", "hybrid")
    assert searched.returncode == 0, searched.stderr
    assert "results" in searched.stdout
    assert f"warning: shard 0 vectors: {path}" in searched.stderr


def test_a_published_generation_that_cannot_open_leaves_the_previous_serving(
    index: tuple[IndexRoot, str, str],
) -> None:
    """Publish refuses a damaged generation (409 naming the file); one published past the
    check (``CURRENT`` written by hand) with an unreadable manifest is not switched to:
    searches go on from the one serving, and ``/healthz`` says why."""
    root, a, b = index
    settings = Settings.model_validate(
        {"api": {"rate_limit_per_s": 0, "admin_api_key": "k"}, "search": {"spelling": False}}
    )
    with (
        ServerThread(create_app(settings, index_dir=root.root)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        path = damage(root.path_of(b), "fieldnorm", "garbled")
        refused = client.post("/v1/index/publish", json={"generation": b}, headers={"X-API-Key": "k"})
        assert refused.status_code == 409 and refused.json()["error"] == "index_damaged"
        assert str(path) in refused.json()["detail"]

        (root.path_of(b) / "manifest.json").write_text("{garbage")
        (root.root / "CURRENT").write_text(b + "\n")
        for q in QUERIES * 2:
            r = client.get("/v1/search", params={"q": q})
            assert r.status_code == 200 and r.json()["generation"] == a
        health = client.get("/healthz").json()
        assert health["status"] == "degraded" and health["generation"] == a
        assert any(p.startswith(f"generation {b} could not be opened") for p in health["problems"])
        (root.root / "CURRENT").write_text(a + "\n")  # the operator points back: healthy again
        assert client.get("/v1/search", params={"q": QUERIES[0]}).status_code == 200
        health = client.get("/healthz").json()
        assert (health["status"], health["problems"]) == ("ok", [])


def test_a_shard_process_with_a_damaged_file_starts_and_answers_503(
    index: tuple[IndexRoot, str, str],
) -> None:
    """``trawl shard serve`` over a shard with a truncated file starts (it used to fail to),
    answers 503 for it and says why on ``/healthz``; a broker over it answers partially."""
    root, a, _ = index
    path = damage(root.path_of(a), "term", "truncated")
    settings = SearchSettings(spelling=False)
    with TestClient(create_shard_app(root.root, 0, settings)) as shard:
        health = shard.get("/healthz").json()
        assert health["status"] == "degraded" and health["problems"][0].startswith(f"shard 0 lexical: {path}")
        asked = shard.post("/shard/doc_freqs", json={"query": query_to_wire(parse_query("boundary layer"))})
        assert asked.status_code == 503 and str(path) in asked.json()["detail"]
    with http_broker(root.root, 2, settings) as broker:
        gathered = broker.gather(parse_query("boundary layer"), vector=None, k_lexical=10, k_vector=0)
        assert gathered.missing_shards == (0,) and gathered.candidates
