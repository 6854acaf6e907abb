"""The embeddings backfill on Ray Data: the local path's vectors, and a killed worker resumed."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from core.settings import EmbedSettings
from retrieval.batch.ray_jobs import ENCODER_NAME, ray_encoder
from retrieval.index.build import build_index
from retrieval.index.layout import vector_store_dir
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from retrieval.vectors.store import VectorStore
from tests.integration.retrieval.test_backfill import make_docs, own_passage_hashes

# Encoder actors load the model: seconds each on a busy machine, minutes under `make test-stress`.
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.from_settings(EmbedSettings())


def store_of(index: Path, embedder: Embedder) -> VectorStore:
    return VectorStore(vector_store_dir(index, embedder.model_id), embedder.model_id)


def test_ray_vectors_equal_local_vectors(tmp_path: Path, embedder: Embedder, ray_local: ModuleType) -> None:
    docs = make_docs(80)
    build_index(docs, tmp_path / "local")
    build_index(docs, tmp_path / "ray", shards=2)
    settings = EmbedSettings()
    backfill_index(tmp_path / "local", embedder, settings)
    report = backfill_index(tmp_path / "ray", embedder, settings, chunk_docs=16, encode=ray_encoder(settings))
    assert report.encoded == report.rows == 80
    local, ray = store_of(tmp_path / "local", embedder), store_of(tmp_path / "ray", embedder)
    hashes = local.hashes()
    assert sorted(ray.hashes().tolist()) == sorted(hashes.tolist())
    assert np.array_equal(ray.vectors(hashes), local.vectors(hashes))
    again = backfill_index(tmp_path / "ray", embedder, settings, encode=ray_encoder(settings))
    assert again.encoded == 0 and again.linked == 80


def encoder_pids() -> list[int]:
    """Worker processes of the encoder actors (Ray names them after the class)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if ENCODER_NAME.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_killed_worker_resumes_to_one_vector_per_passage(
    tmp_path: Path, embedder: Embedder, ray_local: ModuleType
) -> None:
    docs = make_docs(400)
    index = tmp_path / "index"
    build_index(docs, index)
    settings = EmbedSettings()
    store = store_of(index, embedder)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["report"] = backfill_index(
                index, embedder, settings, chunk_docs=4, encode=ray_encoder(settings)
            )
        except Exception as exc:  # noqa: BLE001 - the killed run may fail; the rerun must recover
            outcome["error"] = exc

    job = threading.Thread(target=run)
    job.start()
    killed = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and job.is_alive():
        committed = store.path.joinpath("checkpoint.json").exists()
        pids = encoder_pids()
        if committed and pids:
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
            break
        time.sleep(0.05)
    job.join(timeout=240)
    assert killed is not None, "the backfill finished before a worker could be killed"
    assert not job.is_alive()
    first = store_of(index, embedder)
    assert 0 < len(first) <= len(docs)
    report = backfill_index(index, embedder, settings, chunk_docs=16, encode=ray_encoder(settings))
    final = store_of(index, embedder)
    hashes = final.hashes()
    assert len(np.unique(hashes)) == len(hashes) == len(docs)
    assert sorted(hashes.tolist()) == sorted(own_passage_hashes(docs, embedder))
    assert report.encoded == len(docs) - len(first)
    sample = hashes[:: max(1, len(hashes) // 20)]
    texts = {
        h: t
        for d in docs
        for t, h in zip(embedder.passages(d.title, d.body), own_passage_hashes([d], embedder), strict=True)
    }
    expected = embedder.encode([texts[int(h)] for h in sample])
    assert np.array_equal(final.vectors(sample), expected)
