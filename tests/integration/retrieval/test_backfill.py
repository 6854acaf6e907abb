"""The embeddings backfill on a real index: SIGKILL and resume, idempotence, model versions."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from core.settings import EmbedSettings
from core.types import Document, doc_id_for
from retrieval.index.build import build_index
from retrieval.index.layout import checkpoint_file, vector_store_dir, version_name
from retrieval.vectors.backfill import backfill_index, open_vector_shard
from retrieval.vectors.embed import Embedder, default_model_path
from retrieval.vectors.hnsw import current_version
from retrieval.vectors.store import VectorStore, passage_hashes

REPO = Path(__file__).resolve().parents[3]
TOPICS = ("wing", "shock", "nozzle", "plate", "jet", "flutter", "heat", "cone", "slot", "panel")


def make_docs(n: int) -> list[Document]:
    docs = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        body = f"Report {i} on the {topic}: " + " ".join(
            f"{topic} measurement {j} of series {i} at station {i % 7}" for j in range(6)
        )
        url = f"https://example.org/r/{i}"
        docs.append(Document(doc_id=doc_id_for(url), url=url, title=f"Report {i}", body=body))
    return docs


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def stored_hashes(index: Path, model_id: str) -> list[int]:
    """Every committed hash of the index's vector store (a bare index is its own root)."""
    return VectorStore(vector_store_dir(index, model_id), model_id).hashes().tolist()


def own_passage_hashes(docs: list[Document], embedder: Embedder) -> list[int]:
    texts = [p for d in docs for p in embedder.passages(d.title, d.body)]
    return passage_hashes(texts, embedder.max_seq_length).tolist()


KILLED_JOB = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from core.settings import EmbedSettings
    from retrieval.vectors.backfill import backfill_index
    from retrieval.vectors.embed import Embedder

    backfill_index(Path(sys.argv[1]), Embedder(), EmbedSettings(), chunk_docs=2)
    """
)


@pytest.mark.slow  # a subprocess loads the model: ~12 s idle, ~25 s on a busy 2-core machine
def test_killed_backfill_resumes_without_recomputing(tmp_path: Path, embedder: Embedder) -> None:
    n = 120
    docs = make_docs(n)
    index = tmp_path / "index"
    build_index(docs, index)
    checkpoint = checkpoint_file(vector_store_dir(index, embedder.model_id))
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    job = subprocess.Popen([sys.executable, "-c", KILLED_JOB, str(index)], cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and job.poll() is None:
            if checkpoint.exists() and len(json.loads(checkpoint.read_text())["segments"]) >= 3:
                break
            time.sleep(0.005)
        assert job.poll() is None, "the job ended before it could be killed"
        os.kill(job.pid, signal.SIGKILL)
    finally:
        job.wait(timeout=30)
    assert job.returncode == -signal.SIGKILL
    done_before = len(json.loads(checkpoint.read_text())["segments"]) * 2
    assert 6 <= done_before < n
    # A torn write of the next chunk, as a kill between two files would leave it.
    (checkpoint.parent / "segment-999999.vectors.npy.tmp").write_bytes(b"\x93NUMPY torn")

    report = backfill_index(index, embedder, EmbedSettings(), chunk_docs=50)

    assert report.embedded == n - done_before  # nothing committed was embedded again
    assert report.encoded == n - done_before  # short docs: one passage each
    hashes = stored_hashes(index, embedder.model_id)
    assert sorted(hashes) == sorted(own_passage_hashes(docs, embedder))  # exactly one vector per passage
    assert not (checkpoint.parent / "segment-999999.vectors.npy.tmp").exists()
    shard = open_vector_shard(index, 0, model_id=embedder.model_id)
    assert shard.num_docs == n and shard.num_rows == n  # short docs: one passage each
    assert shard.doc_ids() == {d.doc_id for d in docs}
    assert current_version(index, 0) == version_name(embedder.model_id)
    # The vectors are the model's: a document's own text finds it first. Encoded alone
    # here but in a batch of two by the killed job: an int8 vector moves with its batch
    # company (activation scales are per batch) by cosine >= .98, torch's by < 1e-3.
    probe = docs[77]
    hit = shard.search(embedder.encode([f"{probe.title}. {probe.body}"])[0], 1)[0]
    assert hit.doc_id == probe.doc_id and hit.score > (0.98 if embedder.precision == "int8" else 0.999)

    again = backfill_index(index, embedder, EmbedSettings())
    assert (again.embedded, again.docs, again.rows) == (0, n, n)


def test_a_new_model_version_backfills_beside_the_old_one(tmp_path: Path, embedder: Embedder) -> None:
    index = tmp_path / "index"
    docs = make_docs(12)
    build_index(docs, index)
    backfill_index(index, embedder, EmbedSettings())
    old = open_vector_shard(index, 0, model_id=embedder.model_id)

    # "Retrained" weights: a copy of the model with one weight nudged gets a new model id.
    model = tmp_path / "model-v2"
    shutil.copytree(default_model_path(), model)
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01
    weights.write_bytes(bytes(data))
    newer = Embedder(model)
    assert newer.model_id != embedder.model_id

    report = backfill_index(index, newer, EmbedSettings())
    assert report.embedded == 12
    assert current_version(index, 0) == version_name(newer.model_id)
    still = open_vector_shard(index, 0, model_id=embedder.model_id)  # the old one is intact
    assert still.doc_ids() == old.doc_ids() == {d.doc_id for d in docs}
    vector = embedder.encode_query("flutter")
    assert still.search(vector, 5) == old.search(vector, 5)
    assert open_vector_shard(index, 0, model_id=newer.model_id).num_docs == 12


def test_documents_removed_from_the_index_lose_their_vectors(tmp_path: Path, embedder: Embedder) -> None:
    index = tmp_path / "index"
    docs = make_docs(10)
    build_index(docs, index)
    backfill_index(index, embedder, EmbedSettings())
    # Rebuild the lexical index without two documents and with one edited; keep the vectors.
    vectors = index / "shard-0000" / "vector"
    shutil.move(vectors, tmp_path / "saved-vectors")
    shutil.move(index / "vectors", tmp_path / "saved-store")
    edited = Document(
        doc_id=docs[0].doc_id, url=docs[0].url, title="Report 0", body="An edited page on cones."
    )
    build_index([edited, *docs[1:8]], index)
    shutil.move(tmp_path / "saved-vectors", vectors)
    shutil.move(tmp_path / "saved-store", index / "vectors")

    report = backfill_index(index, embedder, EmbedSettings())

    assert (report.docs, report.embedded) == (8, 1)  # only the edited page is embedded again
    shard = open_vector_shard(index, 0, model_id=embedder.model_id)
    assert shard.doc_ids() == {d.doc_id for d in docs[:8]}
    own = embedder.encode(["Report 0. An edited page on cones."])[0]
    assert shard.search(own, 1)[0].doc_id == docs[0].doc_id
    assert np.isclose(shard.search(own, 1)[0].score, 1.0, atol=1e-3)
