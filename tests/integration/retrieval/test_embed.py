"""The packaged MiniLM on torch, loaded for real and offline: determinism, passages, cache, precision.

The ONNX int8 backend has its own tests (``test_onnx_encoder.py``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from core.errors import ModelLoadError
from core.settings import Settings
from core.types import DocId, Document
from retrieval.index.root import IndexRoot
from retrieval.vectors.embed import Embedder, passages, resolve_device
from retrieval.vectors.hnsw import VectorShard


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(query_cache_size=2, backend="torch")


def test_loads_offline_with_a_versioned_model_id(embedder: Embedder) -> None:
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert embedder.dim == 384
    assert re.fullmatch(r"all-MiniLM-L6-v2@[0-9a-f]{12}", embedder.model_id)
    assert embedder.precision in {"fp32", "bf16"}


def test_same_text_gives_the_same_vector(embedder: Embedder) -> None:
    texts = ["boundary layer transition on a flat plate", "information retrieval evaluation"]
    first = embedder.encode(texts)
    second = embedder.encode(texts)
    assert first.dtype == np.float32 and first.shape == (2, 384)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    # Batch company must not change a vector beyond rounding.
    alone = embedder.encode(texts[:1])
    assert float(alone[0] @ first[0]) > 0.9999


def test_vectors_carry_meaning(embedder: Embedder) -> None:
    q, near, far = embedder.encode(
        [
            "heat transfer in a hypersonic boundary layer",
            "measurements of wall heating rates behind a shock at Mach 8",
            "a recipe for sourdough bread with a long proof",
        ]
    )
    assert float(q @ near) > float(q @ far) + 0.2


def test_precision_agrees_with_fp32(embedder: Embedder) -> None:
    reference = Embedder(precision="fp32", backend="torch")
    texts = ["slip flow at low Reynolds number " * 20, "what is a descriptive title?"]
    cosines = np.sum(reference.encode(texts) * embedder.encode(texts), axis=1)
    assert cosines.min() >= 0.999
    assert reference.model_id == embedder.model_id


def test_query_cache_is_a_small_lru(embedder: Embedder) -> None:
    a = embedder.encode_query("supersonic   flow")
    assert embedder.encode_query("supersonic flow") is a  # whitespace-normalized key
    embedder.encode_query("subsonic flow")
    embedder.encode_query("transonic flow")  # evicts "supersonic flow" (size 2)
    again = embedder.encode_query("supersonic flow")
    assert again is not a
    np.testing.assert_array_equal(again, a)
    with pytest.raises(ValueError):
        a[0] = 1.0  # cached vectors are read-only


def test_long_documents_are_split_into_title_prefixed_passages() -> None:
    body = " ".join(f"w{i}" for i in range(400))
    parts = passages("Title", body, words=160, stride=120)
    assert [p.split()[:2] for p in parts] == [["Title.", "w0"], ["Title.", "w120"], ["Title.", "w240"]]
    assert parts[-1].endswith("w399")
    assert passages("Only title", "", words=160, stride=120) == ["Only title."]
    assert passages("", "short body", words=160, stride=120) == ["short body"]


def test_a_match_at_the_end_of_a_long_document_is_found(embedder: Embedder) -> None:
    filler = " ".join(["The committee discussed the annual budget and the schedule of meetings."] * 40)
    docs = [
        (1, "Minutes", filler + " Appendix: the laminar boundary layer separates near the trailing edge."),
        (2, "Minutes", filler),
        (3, "Bread", "Knead the dough and let it rise overnight before baking."),
    ]
    vectors = embedder.embed_documents(docs)
    assert vectors.rows.tolist().count(1) >= 3  # several passages for the long document
    shard = VectorShard(dim=embedder.dim, model_id=embedder.model_id)
    shard.add(vectors.rows, vectors.vectors)
    hits = shard.search(embedder.encode_query("boundary layer separation at the trailing edge"), 3)
    assert hits[0].doc_id == DocId(1)
    assert shard.search_exact(embedder.encode_query("boundary layer separation"), 1)[0].doc_id == 1


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def test_device_auto_takes_a_gpu_only_where_torch_sees_one() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if _has_cuda() else "cpu")


def test_device_cuda_without_a_gpu_is_a_load_error_that_says_what_to_set() -> None:
    if _has_cuda():
        assert resolve_device("cuda") == "cuda"
        return
    with pytest.raises(ModelLoadError, match="TRAWL_EMBED__DEVICE=auto or cpu"):
        resolve_device("cuda")
    with pytest.raises(ModelLoadError, match="no CUDA device"):
        Embedder(backend="torch", device="cuda")


def test_auto_backend_on_the_cpu_keeps_its_backend_choice(embedder: Embedder) -> None:
    # A GPU makes backend auto mean torch there; without one the CPU rules stand.
    assert embedder.device == ("cuda" if _has_cuda() else "cpu")
    onnx_only = Embedder(backend="onnx-int8", device="cuda" if _has_cuda() else "auto")
    assert onnx_only.backend == "onnx-int8" and onnx_only.device == "cpu"


def test_embed_device_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAWL_EMBED__DEVICE", "cpu")
    monkeypatch.setenv("TRAWL_RANK__RERANKER_DEVICE", "cuda")
    settings = Settings()
    assert settings.embed.device == "cpu" and settings.rank.reranker_device == "cuda"
    monkeypatch.setenv("TRAWL_EMBED__DEVICE", "gpu")
    with pytest.raises(ValidationError, match="device"):
        Settings()


def test_tokenizer_threads_are_turned_on_only_for_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    on_cpu = Embedder(backend="torch", device="cpu", query_cache_size=0)
    assert on_cpu.device == "cpu" and os.environ["TOKENIZERS_PARALLELISM"] == "false"
    if _has_cuda():
        Embedder(backend="torch", device="cuda", query_cache_size=0)
        assert os.environ["TOKENIZERS_PARALLELISM"] == "true"


def _trawl_embed(index: Path, env: dict[str, str]) -> tuple[int, str]:
    """``trawl embed --index`` in a fresh process: its exit status and its output, whitespace-folded."""
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "embed", "--index", str(index)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def test_trawl_embed_names_the_device_setting_when_it_cannot_be_met(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "index")
    docs = [Document(DocId(i), f"beir://t/{i}", f"Title {i}", f"body text {i} about wings") for i in range(3)]
    root.publish(root.build(docs, shards=1))
    env = {**os.environ, "TRAWL_EMBED__DEVICE": "cuda", "HF_HUB_OFFLINE": "1"}
    env["TRAWL_EMBED__ONNX_CACHE_DIR"] = str(tmp_path / "onnx")
    returncode, output = _trawl_embed(root.root, env)
    if _has_cuda():
        assert returncode == 0, output
        assert "(torch bf16 on cuda)" in output or "(torch fp32 on cuda)" in output
        return
    assert returncode == 2, output
    assert "TRAWL_EMBED__DEVICE=auto or cpu" in output and "Traceback" not in output
    # The same command on the CPU embeds the three documents and says where it ran.
    env["TRAWL_EMBED__DEVICE"] = "cpu"
    returncode, output = _trawl_embed(root.root, env)
    assert returncode == 0, output
    assert "(onnx-int8 int8 on cpu)" in output and "3 documents" in output
