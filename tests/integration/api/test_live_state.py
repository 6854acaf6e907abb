"""``/healthz`` and the home page tell one story while the engine builds: the ranker actually
serving, the backfill's state with its percentage, and no advice to start a second backfill."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings
from retrieval.index import layout
from retrieval.vectors.backfill_progress import BackfillProgress, write_progress
from tests.fixtures.docs import numbered_index


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Path]]:
    root = tmp_path_factory.mktemp("live")
    index_dir = numbered_index(root / "index", ["alpha beta", "beta gamma", "gamma alpha"])
    settings = Settings.model_validate({"api": {"rate_limit_per_s": 0}})
    with TestClient(create_app(settings, index_dir=index_dir)) as client:
        yield client, index_dir


def _home(client: TestClient) -> dict[str, str]:
    page = client.get("/").text
    return {k: v for k, v in re.findall(r'<span id="live-(\w+)">([^<]*)</span>', page)}


def test_during_a_backfill_both_say_embedding_and_the_ranker_serving(served: tuple[TestClient, Path]) -> None:
    client, index_dir = served
    write_progress(index_dir, BackfillProgress("embedding", 4_500, 10_000, 59.0, 93.0, generation="g2"))
    health = client.get("/healthz").json()
    assert health["state"] == "embedding, 45%"
    assert health["ranker"] == "bm25" and "run `trawl embed`" not in health["ranker_reason"]
    assert "backfill running now (embedding, 45%)" in health["ranker_reason"]
    home = _home(client)
    assert (home["state"], home["ranker"], home["generation"]) == (
        health["state"],
        health["ranker"],
        health["generation"],
    )
    assert (
        "4,500 of 10,000 passages, 59/s, about 2 min left; the learned ranker follows" in client.get("/").text
    )


def test_a_backfill_that_stopped_writing_is_stalled_not_embedding(served: tuple[TestClient, Path]) -> None:
    client, index_dir = served
    old = asdict(BackfillProgress("embedding", 100, 10_000, 5.0, 2_000.0, updated_at=time.time() - 3_600))
    layout.backfill_progress_file(index_dir).write_text(json.dumps(old))
    health = client.get("/healthz").json()
    assert health["state"].startswith("embedding stalled: no progress for 60 min")
    assert "run `trawl embed`" in health["ranker_reason"]  # nothing is making vectors: the advice is right
    assert _home(client)["state"] == health["state"]


def test_failed_and_never_run(served: tuple[TestClient, Path]) -> None:
    client, index_dir = served
    write_progress(index_dir, BackfillProgress("failed", detail="disk full"))
    assert client.get("/healthz").json()["state"] == "embedding failed: disk full"
    layout.backfill_progress_file(index_dir).unlink()
    health = client.get("/healthz").json()
    assert health["state"] == "serving" and health["backfill"] is None
    assert _home(client)["state"] == "serving"
