"""The optional cross-encoder stage: reorder the LTR stage's top N by a MiniLM cross-encoder.

A cross-encoder reads the query and the document together (one transformer pass per
pair), so it can see evidence no feature captures; it costs a forward pass per candidate,
which is why it only reorders the head of the LightGBM ranking (default top 20).

A model is a directory: the sentence-transformers ``CrossEncoder`` files (a BERT
checkpoint with a one-logit head) plus ``card.json`` (what it was fine-tuned on, how, and
its metrics; :mod:`training.train_reranker`). The packaged MiniLM weights load too (a
fresh, untrained head): what training starts from and what the unit tests use.

The head's final order is by ``weight * z(ce) + (1 - weight) * z(ltr)`` (z-scores within
the head); ``weight = 1`` orders by the cross-encoder alone. Explain records each head
document's cross-encoder score and its position before and after (1-based).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from core.errors import ModelLoadError
from core.types import DocId, Query, ScoredDoc
from rerank.model_card import CARD_FILE, CardFormat, read_card
from retrieval.index.lexical import StoredDoc
from retrieval.query.hybrid import Candidate
from retrieval.query.ranking import RankContext, RankOutput, RankStage
from retrieval.vectors.embed import Device, resolve_device

logger = logging.getLogger(__name__)

CARD = CardFormat("trawl-cross-encoder", 1)
DEFAULT_MAX_LENGTH = 128
BODY_CHARS = 1200
"""Body prefix given to the model: 128 tokens hold far less, so more text is wasted tokenizing."""


def document_text(title: str, body: str, *, body_chars: int = BODY_CHARS) -> str:
    """What the cross-encoder reads of a document: the title, then a prefix of the body."""
    title = title.strip()
    body = body[:body_chars].strip()
    return f"{title}. {body}" if title else body


class CrossEncoderReranker:
    """A one-logit cross-encoder: ``score(query, texts)`` → one float per text (higher = better)."""

    def __init__(
        self,
        model: Any,
        *,
        max_length: int = DEFAULT_MAX_LENGTH,
        batch_size: int = 32,
        card: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.max_length = max_length
        self.batch_size = batch_size
        self.card: Mapping[str, Any] = dict(card or {})

    @classmethod
    def load(
        cls,
        directory: Path,
        *,
        max_length: int | None = None,
        threads: int | None = 1,
        seed: int = 0,
        device: Device = "auto",
    ) -> Self:
        """Load a fine-tuned reranker, or a bare BERT checkpoint (its new head seeded by ``seed``).

        ``threads`` sets torch's intra-op threads (1 at serving: one query's 20 pairs
        are too small to gain from more, and the server runs queries in parallel).
        ``device``: as the embedder's (:func:`retrieval.vectors.embed.resolve_device`).
        """
        import torch
        from sentence_transformers import CrossEncoder

        directory = Path(directory)
        if not (directory / "config.json").exists():
            raise ModelLoadError(
                str(directory),
                "no config.json: expected a `trawl train reranker` output or a BERT checkpoint",
            )
        card = read_card(directory, CARD) if (directory / CARD_FILE).exists() else {}
        if threads is not None:
            torch.set_num_threads(threads)
        length = max_length or int(card.get("max_length", DEFAULT_MAX_LENGTH))
        where = resolve_device(device)
        torch.manual_seed(seed)
        try:
            model = CrossEncoder(
                str(directory), num_labels=1, max_length=length, device=where, local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise ModelLoadError(str(directory), f"not a loadable checkpoint: {exc}") from exc
        model.model.eval()
        return cls(model, max_length=length, card=card)

    @property
    def model_id(self) -> str:
        return str(self.card.get("model_id", "cross-encoder-untrained"))

    def logits(self, queries: Sequence[str], texts: Sequence[str]) -> Any:
        """Raw logits (a torch tensor, with gradients when called in training mode)."""
        tokens = self.model.tokenizer(
            list(queries),
            list(texts),
            padding=True,
            truncation="longest_first",
            max_length=self.max_length,
            return_tensors="pt",
        ).to(self.model.model.device)
        return self.model.model(**tokens).logits.view(-1)

    def score(self, query_text: str, texts: Sequence[str]) -> NDArray[np.float32]:
        """One score per text for ``query_text``, in batches of ``batch_size``."""
        import torch

        if not texts:
            return np.zeros(0, dtype=np.float32)
        self.model.model.eval()
        out: list[NDArray[np.float32]] = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = texts[start : start + self.batch_size]
                out.append(self.logits([query_text] * len(batch), batch).float().cpu().numpy())
        return np.concatenate(out).astype(np.float32)


def _z(values: NDArray[np.float64]) -> NDArray[np.float64]:
    std = float(values.std())
    return (values - values.mean()) / std if std > 0 else np.zeros_like(values)


def rerank_head(
    ltr_scores: NDArray[np.float64], ce_scores: NDArray[np.float64], *, weight: float
) -> list[int]:
    """New order (indices into the head) by ``weight·z(ce) + (1 − weight)·z(ltr)``; ties keep LTR order."""
    blended = weight * _z(np.asarray(ce_scores, dtype=np.float64)) + (1 - weight) * _z(
        np.asarray(ltr_scores, dtype=np.float64)
    )
    return sorted(range(len(blended)), key=lambda i: (-blended[i], i))


class CrossEncoderStage:
    """Serving stage ``ltr+ce``: the LTR stage's ranking with its top ``top_n`` reordered.

    Scores of the reordered head are rewritten so that they stay above the tail and
    decrease down the list (head position ``i`` of ``n``: best tail score + ``n − i``);
    the tail keeps its LTR scores and order.
    """

    with_fields = True
    reads_query_text = True
    """The cross-encoder reads the query as typed (order, case), not just its analysed terms:
    the search cache keys its answers by that text too."""

    def __init__(
        self,
        ltr: RankStage,
        reranker: CrossEncoderReranker,
        *,
        top_n: int = 20,
        weight: float = 0.2,
        name: str = "ltr+ce",
    ) -> None:
        self.ltr = ltr
        self.reranker = reranker
        self.top_n = top_n
        self.weight = weight
        self.name = name
        self.needs_vector = ltr.needs_vector
        self.with_doc_vectors = ltr.with_doc_vectors
        self.last_ce_ms = 0.0
        """Wall time of the last query's cross-encoder pass (what the stage adds to LTR)."""

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput:
        fetched: dict[DocId, StoredDoc] = {}

        def fetch(wanted: Sequence[Candidate]) -> Mapping[DocId, StoredDoc]:
            docs = context.fetch(wanted)
            fetched.update(docs)
            return docs

        out = self.ltr.rank(
            query,
            candidates,
            explain=explain,
            context=RankContext(fetch=fetch, generation=context.generation),
        )
        head, tail = out.ranked[: self.top_n], out.ranked[self.top_n :]
        if len(head) < 2:
            return out
        head_ids = {h.doc_id for h in head}
        missing = [c for c in candidates if c.doc_id in head_ids and c.doc_id not in fetched]
        if missing:
            fetch(missing)
        started = time.perf_counter()
        texts = [
            document_text(fetched[h.doc_id].title, fetched[h.doc_id].body) if h.doc_id in fetched else ""
            for h in head
        ]
        ce = self.reranker.score(query.raw, texts).astype(np.float64)
        order = rerank_head(np.array([h.score for h in head]), ce, weight=self.weight)
        self.last_ce_ms = (time.perf_counter() - started) * 1000
        floor = tail[0].score if tail else 0.0
        ranked = [ScoredDoc(head[i].doc_id, floor + len(head) - pos) for pos, i in enumerate(order)]
        info = {d: dict(v) for d, v in out.explain.items()}
        if explain:
            for pos, i in enumerate(order):
                info.setdefault(head[i].doc_id, {})["ce"] = {
                    "score": float(ce[i]),
                    "position_before": i + 1,
                    "position_after": pos + 1,
                }
        logger.debug("ce reranked %d of %d in %.1f ms", len(head), len(out.ranked), self.last_ce_ms)
        return RankOutput(ranked + list(tail), info)
