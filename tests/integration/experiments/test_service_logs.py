"""The served experiment: clicks validated over HTTP; logs survive a real restart, nothing lost or doubled."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.settings import ExperimentSettings, Settings
from online.logs import CLICK_SCHEMA, IMPRESSION_SCHEMA, part_files, read_log
from retrieval.index.build import build_index
from tests.conftest import ServerThread
from tests.fixtures.docs import SMALL_WEB
from tests.integration.experiments.service_app import create_experiment_app

REPO = Path(__file__).resolve().parents[3]
EXPERIMENTS = """
[experiments.title]
mode = "interleave"
salt = "title-1"
start = 2020-01-01T00:00:00Z
# Serving rankers of an index without vectors: only bm25, so both teams run it here.
variants = [{ name = "a", ranker = "bm25" }, { name = "b", ranker = "bm25" }]
"""
QUERIES = ["list comprehension", "python functions", "generators", "bread"]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    index = tmp_path_factory.mktemp("exp-index") / "index"
    build_index(SMALL_WEB, index)
    return index


@pytest.fixture
def client(index_dir: Path, tmp_path: Path) -> Iterator[httpx.Client]:
    (tmp_path / "experiments.toml").write_text(EXPERIMENTS)
    settings = Settings(
        experiments=ExperimentSettings(
            experiments_file=tmp_path / "experiments.toml", log_dir=tmp_path / "logs"
        )
    )
    with ServerThread(create_experiment_app(settings, index_dir=index_dir)) as server:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            yield c


def test_click_endpoint_accepts_shown_results_and_refuses_the_rest(client: httpx.Client) -> None:
    r = client.get("/v1/search", params={"q": "list comprehension"}, headers={"X-Trawl-User": "alice"})
    assert r.status_code == 200
    imp = r.headers["X-Trawl-Impression"]
    first = r.json()["results"][0]["doc_id"]  # a string: 63-bit ids are not safe JSON numbers
    ok = client.post("/v1/click", json={"impression_id": imp, "doc_id": first, "position": 1})
    assert (ok.status_code, set(ok.json())) == (202, {"click_id"})
    bad = [
        ({"impression_id": imp, "doc_id": first, "position": 0}, 400, "bad_parameter"),
        ({"impression_id": imp, "doc_id": first}, 400, "bad_parameter"),
        ({"impression_id": imp, "doc_id": first, "position": 1, "x": 1}, 400, "bad_parameter"),
        ({"impression_id": "not-hex", "doc_id": first, "position": 1}, 400, "bad_parameter"),
        ({"impression_id": "0" * 32, "doc_id": first, "position": 1}, 404, "unknown_impression"),
        ({"impression_id": imp, "doc_id": str(int(first) + 1), "position": 1}, 400, "bad_click"),
    ]
    for body, status, code in bad:
        resp = client.post("/v1/click", json=body)
        assert (resp.status_code, resp.json()["error"]) == (status, code), body


def test_new_visitor_gets_a_sticky_cookie(client: httpx.Client) -> None:
    r = client.get("/v1/search", params={"q": "generators"})
    uid = r.cookies.get("trawl_uid")
    assert uid is not None and len(uid) == 32
    again = client.get("/v1/search", params={"q": "generators"})  # the client sends the cookie back
    assert "trawl_uid" not in again.cookies or again.cookies.get("trawl_uid") == uid
    assert "set-cookie" not in again.headers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """The service as a separate OS process, stopped with SIGTERM like a deploy would."""

    def __init__(self, index_dir: Path, work: Path) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "TRAWL_EXPERIMENTS__EXPERIMENTS_FILE": str(work / "experiments.toml"),
            "TRAWL_EXPERIMENTS__LOG_DIR": str(work / "logs"),
            # Nothing reaches disk before shutdown: the test proves the shutdown flush.
            "TRAWL_EXPERIMENTS__BUFFER_ROWS": "100000",
            "TRAWL_EXPERIMENTS__FLUSH_INTERVAL_S": "3600",
        }
        cmd = [sys.executable, "-m", "tests.integration.experiments.service_app"]
        self.proc = subprocess.Popen(
            [*cmd, "--index", str(index_dir), "--port", str(self.port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.get("/v1/search", params={"q": "warmup"}, headers={"X-Trawl-User": "warmup"})
                break
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"service did not start: {self.proc.stdout.read()!r}") from None  # type: ignore[union-attr]
                time.sleep(0.1)

    def stop(self) -> None:
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        # uvicorn shuts down gracefully, then re-raises the signal so the exit status says SIGTERM.
        assert self.proc.returncode in (0, -signal.SIGTERM), out


def traffic(service: Service, n: int, *, click_every: int) -> tuple[list[str], int]:
    """n searches by 5 users; a click on the first result of every ``click_every``-th one."""
    impressions, clicks = [], 0
    for i in range(n):
        r = service.client.get(
            "/v1/search", params={"q": QUERIES[i % len(QUERIES)]}, headers={"X-Trawl-User": f"u{i % 5}"}
        )
        assert r.status_code == 200
        impressions.append(r.headers["X-Trawl-Impression"])
        hits = r.json()["results"]
        if i % click_every == 0 and hits:
            c = service.client.post(
                "/v1/click",
                json={"impression_id": impressions[-1], "doc_id": hits[0]["doc_id"], "position": 1},
            )
            assert c.status_code == 202
            clicks += 1
    return impressions, clicks


def test_logs_survive_a_restart_with_nothing_lost_or_duplicated(index_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "experiments.toml").write_text(EXPERIMENTS)
    logs = tmp_path / "logs"

    first = Service(index_dir, tmp_path)
    imps1, clicks1 = traffic(first, 40, click_every=3)
    assert part_files(logs / "impressions") == []  # all of it is still buffered in the process
    first.stop()

    second = Service(index_dir, tmp_path)
    late = second.client.post("/v1/click", json={"impression_id": imps1[-1], "doc_id": 0, "position": 1})
    assert late.status_code == 400  # known impression (warmed from the log), wrong document
    imps2, clicks2 = traffic(second, 25, click_every=2)
    second.stop()

    impressions = read_log(logs / "impressions", IMPRESSION_SCHEMA)
    clicks = read_log(logs / "clicks", CLICK_SCHEMA)
    logged = [
        i
        for i, q in zip(
            impressions.column("impression_id").to_pylist(),
            impressions.column("query").to_pylist(),
            strict=True,
        )
        if q != "warmup"
    ]
    assert logged == imps1 + imps2  # every impression, once, in order
    click_imps = clicks.column("impression_id").to_pylist()
    assert len(click_imps) == clicks1 + clicks2 and len(set(clicks.column("click_id").to_pylist())) == len(
        click_imps
    )
    assert set(click_imps) <= set(imps1 + imps2)
    assert set(impressions.column("experiment").to_pylist()) == {"title"}
    assert all(
        len(t) == len(d)
        for t, d in zip(
            impressions.column("teams").to_pylist(), impressions.column("doc_ids").to_pylist(), strict=True
        )
    )


AB_EXPERIMENTS = """
[experiments.split]
salt = "split-1"
start = 2020-01-01T00:00:00Z
variants = [
  { name = "control", ranker = "bm25", weight = 1 },
  { name = "treat", ranker = "bm25", weight = 1 },
]
"""


def test_ab_users_stay_in_their_bucket_across_requests(index_dir: Path, tmp_path: Path) -> None:
    from online.book import ExperimentBook

    (tmp_path / "experiments.toml").write_text(AB_EXPERIMENTS)
    settings = Settings(
        experiments=ExperimentSettings(
            experiments_file=tmp_path / "experiments.toml", log_dir=tmp_path / "logs"
        )
    )
    users = [f"user-{i}" for i in range(12)]
    with ServerThread(create_experiment_app(settings, index_dir=index_dir)) as server:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            for _ in range(3):
                for u in users:
                    r = c.get("/v1/search", params={"q": "python"}, headers={"X-Trawl-User": u})
                    assert r.status_code == 200
    impressions = read_log(tmp_path / "logs" / "impressions", IMPRESSION_SCHEMA).to_pylist()
    expected = ExperimentBook.load(tmp_path / "experiments.toml").get("split")
    seen: dict[str, set[str]] = {}
    for row in impressions:
        assert row["experiment"] == "split"
        seen.setdefault(row["unit_id"], set()).add(row["variant"])
    assert seen == {u: {expected.bucket(u).name} for u in users}  # type: ignore[union-attr]
    assert len({v for vs in seen.values() for v in vs}) == 2
