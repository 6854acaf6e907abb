"""The ONNX Runtime int8 MiniLM, exported for real from the packaged weights into a scratch cache.

One export per session (``onnx_cache``); every other test reuses it.
"""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.errors import ModelLoadError
from core.settings import EmbedSettings
from retrieval.vectors.embed import Embedder, variant_of
from retrieval.vectors.onnx_encoder import CHECK_PREFIX, EXPORT_FILE, MODEL_FILE
from training.datasets import BeirDataset

pytestmark = pytest.mark.slow  # one real export + quantization (~15 s idle), torch loaded beside it


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="session")
def int8(onnx_cache: Path) -> Embedder:
    return Embedder(backend="onnx-int8", onnx_cache_dir=onnx_cache, query_cache_size=0)


@pytest.fixture(scope="module")
def fp32() -> Embedder:
    return Embedder(backend="torch", precision="fp32")


@pytest.fixture(scope="module")
def real_texts(eval_dir: Path, fp32: Embedder) -> list[str]:
    """Cranfield passages (short and long, several cut at max_seq_length) and queries."""
    dataset = BeirDataset.open(eval_dir / "cranfield")
    texts: list[str] = []
    for doc in list(dataset.iter_documents())[:25]:
        texts.extend(fp32.passages(doc.title, doc.body))
    texts += ["what is the effect of slip on skin friction", "jet noise", "a"]
    return texts


def model_dir(cache: Path) -> Path:
    (directory,) = [p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return directory


def test_int8_vectors_agree_with_torch_fp32(int8: Embedder, fp32: Embedder, real_texts: list[str]) -> None:
    assert int8.backend == "onnx-int8" and int8.precision == "int8"
    ours = int8.encode(real_texts)
    assert ours.dtype == np.float32 and ours.shape == (len(real_texts), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(ours * fp32.encode(real_texts), axis=1)
    assert cosines.mean() >= 0.99
    assert cosines.min() >= 0.95
    assert int8.encode([]).shape == (0, 384)


def test_a_text_gets_the_same_vector_in_any_company(int8: Embedder, real_texts: list[str]) -> None:
    texts = real_texts[:24]
    shuffled = texts[:]
    random.Random(7).shuffle(shuffled)
    alone = np.stack([int8.encode([t])[0] for t in shuffled])
    np.testing.assert_allclose(int8.encode(shuffled), alone, atol=1e-6)


def test_texts_encoded_side_by_side_get_the_vectors_of_one_thread(
    onnx_cache: Path, real_texts: list[str]
) -> None:
    """A batch job runs one single-threaded ``run`` per CPU at once: rows stay in the
    caller's order and each is bit-for-bit what one thread makes, so vectors never depend
    on how many CPUs made them (Ray actors and the local backfill agree)."""
    one = Embedder(backend="onnx-int8", onnx_cache_dir=onnx_cache, torch_threads=1)
    three = Embedder(backend="onnx-int8", onnx_cache_dir=onnx_cache, torch_threads=3)
    texts = real_texts[:30]
    shuffled = texts[:]
    random.Random(11).shuffle(shuffled)
    np.testing.assert_array_equal(three.encode(shuffled), one.encode(shuffled))
    assert len(set(shuffled)) == len(shuffled)
    position = {t: i for i, t in enumerate(texts)}
    in_order = three.encode(texts)
    np.testing.assert_array_equal(three.encode(shuffled), in_order[[position[t] for t in shuffled]])


def test_a_shuffled_padded_batch_gives_each_text_its_own_vector(
    onnx_cache: Path, int8: Embedder, real_texts: list[str]
) -> None:
    batched = Embedder(backend="onnx-int8", onnx_cache_dir=onnx_cache, onnx_batch_size=8)
    texts = real_texts[:24]
    shuffled = texts[:]
    random.Random(7).shuffle(shuffled)
    batch = batched.encode(shuffled)
    alone = np.stack([int8.encode([t])[0] for t in shuffled])
    # Batch company moves an int8 vector a little (activation scales are per batch), never
    # closer to another text's vector (overlapping passages of one document included).
    assert float(np.min(np.sum(batch * alone, axis=1))) > 0.98
    np.testing.assert_array_equal(np.argmax(batch @ alone.T, axis=1), np.arange(len(shuffled)))
    in_order = batched.encode(texts)
    position = {t: i for i, t in enumerate(texts)}
    np.testing.assert_allclose(batch, in_order[[position[t] for t in shuffled]], atol=1e-3)


def test_the_export_and_the_self_check_are_reused(int8: Embedder, onnx_cache: Path) -> None:
    directory = model_dir(onnx_cache)
    names = [MODEL_FILE, EXPORT_FILE, *(p.name for p in directory.glob(f"{CHECK_PREFIX}*.json"))]
    assert len(names) >= 3
    before = {name: (directory / name).stat().st_mtime_ns for name in names}
    again = Embedder(backend="onnx-int8", onnx_cache_dir=onnx_cache)
    after = {name: (directory / name).stat().st_mtime_ns for name in before}
    assert after == before
    assert again.model_id == int8.model_id
    np.testing.assert_array_equal(again.encode(["flutter of a panel"]), int8.encode(["flutter of a panel"]))


def test_a_failing_self_check_falls_back_to_torch(
    int8: Embedder, onnx_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    strict: dict[str, Any] = {"onnx_cache_dir": onnx_cache, "onnx_min_mean_cosine": 0.9999}
    with caplog.at_level(logging.WARNING, logger="retrieval.vectors.embed"):
        fallback = Embedder(backend="auto", **strict)
    assert fallback.backend == "torch" and fallback.precision in {"fp32", "bf16"}
    assert (
        fallback.fallback_reason is not None and "self-check failed: mean cosine" in fallback.fallback_reason
    )
    assert fallback.fallback_reason in caplog.text
    assert fallback.model_id != int8.model_id
    with pytest.raises(ModelLoadError, match="self-check failed"):
        Embedder(backend="onnx-int8", **strict)


def test_a_corrupt_cached_model_falls_back_to_torch(onnx_cache: Path, int8: Embedder, tmp_path: Path) -> None:
    broken = tmp_path / "cache"
    shutil.copytree(onnx_cache, broken)
    (model_dir(broken) / MODEL_FILE).write_bytes(b"not an onnx model")
    fallback = Embedder(backend="auto", onnx_cache_dir=broken)
    assert fallback.backend == "torch"
    assert (
        fallback.fallback_reason is not None and "cannot load the exported model" in fallback.fallback_reason
    )


def test_model_ids_name_the_variant_and_queries_follow_the_index(
    int8: Embedder, fp32: Embedder, onnx_cache: Path
) -> None:
    assert int8.model_id == f"{fp32.model_id}+onnx-int8"
    assert variant_of(int8.model_id) == "onnx-int8" and variant_of(fp32.model_id) == "torch"
    settings = EmbedSettings(onnx_cache_dir=onnx_cache)
    # An index of torch vectors gets a torch query encoder even though the default is auto.
    assert (
        Embedder.from_settings(settings, serving=True, for_model_id=fp32.model_id).model_id == fp32.model_id
    )
    assert (
        Embedder.from_settings(settings, serving=True, for_model_id=int8.model_id).model_id == int8.model_id
    )
    # Where int8 cannot run, the encoder says so by its id: the index's vectors go unused.
    strict = EmbedSettings(onnx_cache_dir=onnx_cache, onnx_min_cosine=0.9999)
    assert Embedder.from_settings(strict, serving=True, for_model_id=int8.model_id).model_id != int8.model_id
