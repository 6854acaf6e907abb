"""Fine-tuning the cross-encoder reranker on judged query–document pairs.

Starting point: the packaged MiniLM (``retrieval.vectors.embed.default_model_path``) with a
fresh one-logit head. Pairs: each training query's judged positives (grade > 0) and hard
negatives, the unjudged-or-zero candidates ranked highest by the first stage's reciprocal-rank
fusion (the LTR order would need a model trained on these very queries). At most
``positives_per_query`` and ``negatives_per_query`` per query, negatives drawn from the top
``negative_pool``, and a uniform subset when over ``max_pairs``, so an epoch stays short.

Loss: binary cross-entropy on the logit; AdamW with linear warm-up and decay; one epoch;
everything seeded. A trained model is a directory, the ``CrossEncoder`` files plus
``card.json`` (data, parameters, pair counts, date, code version, training time), written
to a temporary directory and renamed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from core.atomic import staging_dir
from core.settings import Settings
from core.types import DocId
from rerank.cross_encoder import CARD, CrossEncoderReranker, document_text
from rerank.model_card import write_card
from retrieval.index.layout import lexical_dir
from retrieval.index.lexical import LexicalShard
from retrieval.vectors.embed import default_model_path
from training.eval_index import cached_index

if TYPE_CHECKING:
    from training.train_ltr import ProgressFn as PooledProgressFn

logger = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]
"""(batches done, batches in all)."""
Pair = tuple[str, str, float]
"""(query text, document text, label 0/1)."""


@dataclass(frozen=True, slots=True)
class RerankerParams:
    max_length: int = 128
    batch_size: int = 16
    learning_rate: float = 5e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    epochs: int = 1
    positives_per_query: int = 4
    negatives_per_query: int = 8
    negative_pool: int = 30
    max_pairs: int = 1024
    threads: int = 1
    seed: int = 0


def hard_negatives(frame: pl.DataFrame, qid: str, judged_positive: set[DocId], pool: int) -> list[DocId]:
    """The query's candidates not judged relevant, best first by reciprocal-rank fusion."""
    rows = frame.filter(pl.col("qid") == qid).sort("rrf", descending=True, nulls_last=True)
    out = [DocId(int(d)) for d in rows["doc_id"].to_list() if DocId(int(d)) not in judged_positive]
    return out[:pool]


def sample_pairs(
    frame: pl.DataFrame,
    qrels: Mapping[str, Mapping[DocId, int]],
    qids: Sequence[str],
    query_texts: Mapping[str, str],
    params: RerankerParams,
) -> list[tuple[str, DocId, float]]:
    """(qid, doc id, label) training pairs of ``qids`` only: judged positives and hard negatives."""
    rng = random.Random(params.seed)
    pairs: list[tuple[str, DocId, float]] = []
    for qid in sorted(qids):
        if qid not in query_texts:
            continue
        positives = sorted(d for d, g in qrels.get(qid, {}).items() if g > 0)
        if not positives:
            continue
        negatives = hard_negatives(frame, qid, set(positives), params.negative_pool)
        pos = rng.sample(positives, min(len(positives), params.positives_per_query))
        neg = rng.sample(negatives, min(len(negatives), params.negatives_per_query))
        pairs.extend((qid, d, 1.0) for d in pos)
        pairs.extend((qid, d, 0.0) for d in neg)
    if len(pairs) > params.max_pairs:
        pairs = rng.sample(pairs, params.max_pairs)
    return pairs


def fine_tune(
    reranker: CrossEncoderReranker,
    pairs: Sequence[Pair],
    params: RerankerParams,
    *,
    on_progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """One pass (``epochs``) of BCE fine-tuning; returns the mean loss and the wall time."""
    import torch

    torch.set_num_threads(params.threads)
    torch.manual_seed(params.seed)
    model = reranker.model.model
    model.train()
    order = list(range(len(pairs)))
    rng = random.Random(params.seed)
    batches_per_epoch = (len(pairs) + params.batch_size - 1) // params.batch_size
    total = max(1, batches_per_epoch * params.epochs)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay
    )
    warmup = max(1, int(total * params.warmup_fraction))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup)))
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    started = time.perf_counter()
    losses: list[float] = []
    step = 0
    for _ in range(params.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), params.batch_size):
            batch = [pairs[i] for i in order[start : start + params.batch_size]]
            logits = reranker.logits([p[0] for p in batch], [p[1] for p in batch])
            labels = torch.tensor([p[2] for p in batch], dtype=logits.dtype, device=logits.device)
            loss = loss_fn(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            step += 1
            if on_progress is not None:
                on_progress(step, total)
            if step % 20 == 0:
                logger.info("reranker step %d/%d, loss %.4f", step, total, float(np.mean(losses[-20:])))
    model.eval()
    return {
        "steps": step,
        "pairs": len(pairs),
        "mean_loss": round(float(np.mean(losses)), 4) if losses else None,
        "last_loss": round(float(np.mean(losses[-20:])), 4) if losses else None,
        "seconds": round(time.perf_counter() - started, 2),
    }


def train_fold(
    base_model: Path,
    frame: pl.DataFrame,
    qrels: Mapping[str, Mapping[DocId, int]],
    qids: Sequence[str],
    query_texts: Mapping[str, str],
    doc_texts: Callable[[Sequence[DocId]], Mapping[DocId, str]],
    params: RerankerParams,
    *,
    on_progress: ProgressFn | None = None,
) -> tuple[CrossEncoderReranker, dict[str, Any]]:
    """A fresh reranker from ``base_model`` fine-tuned on pairs of ``qids`` only."""
    sampled = sample_pairs(frame, qrels, qids, query_texts, params)
    texts = doc_texts(sorted({d for _, d, _ in sampled}))
    pairs = [(query_texts[q], texts.get(d, ""), label) for q, d, label in sampled]
    reranker = CrossEncoderReranker.load(
        base_model, max_length=params.max_length, threads=params.threads, seed=params.seed
    )
    stats = fine_tune(reranker, pairs, params, on_progress=on_progress)
    stats["positives"] = sum(1 for p in pairs if p[2] > 0)
    stats["queries"] = len({q for q, _, _ in sampled})
    return reranker, stats


def shard_texts(shard: Any) -> Callable[[Sequence[DocId]], dict[DocId, str]]:
    """``doc ids → document_text`` read from a lexical shard's stored documents."""

    def texts(doc_ids: Sequence[DocId]) -> dict[DocId, str]:
        out: dict[DocId, str] = {}
        for start in range(0, len(doc_ids), 512):
            stored = shard.stored_many(list(doc_ids[start : start + 512]))
            out.update({d: document_text(s.title, s.body) for d, s in stored.items()})
        return out

    return texts


def save_reranker(reranker: CrossEncoderReranker, directory: Path, card: Mapping[str, Any]) -> Path:
    """Write the model files and ``card.json`` into a staging directory, then rename it into place."""
    with staging_dir(directory) as tmp:
        reranker.model.save(str(tmp), create_model_card=False)
        digest = hashlib.blake2b(digest_size=6)
        for path in sorted(tmp.glob("*.safetensors")):
            digest.update(path.read_bytes())
        full = dict(card)
        full.update(
            max_length=reranker.max_length,
            model_id=f"{card.get('name', 'reranker')}-{digest.hexdigest()}",
        )
        write_card(tmp, full, CARD)
    return Path(directory)


def model_card(
    *,
    name: str,
    base_model: Path,
    data: Sequence[Mapping[str, Any]],
    params: RerankerParams,
    stats: Mapping[str, Any],
) -> dict[str, Any]:
    # lazy: loads LightGBM, which loading or fine-tuning a reranker never needs
    from training.train_ltr import code_version

    return {
        "name": name,
        "base_model": str(base_model),
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "code_version": code_version(),
        "data": list(data),
        "params": dataclasses.asdict(params),
        "pairs": "judged positives (grade > 0) + hard negatives (top rrf candidates not judged relevant)",
        "training": dict(stats),
    }


def train_reranker_on_collections(
    roots: Sequence[Path],
    settings: Settings,
    *,
    name: str,
    params: RerankerParams,
    depth: int | None = None,
    on_progress: PooledProgressFn | None = None,
) -> tuple[CrossEncoderReranker, dict[str, Any]]:
    """``trawl train reranker``: fine-tune the packaged MiniLM on every judged query of the collections.

    Returns the model and its card (save both with :func:`save_reranker`). Documents
    are read from each collection's cached evaluation index.
    """
    # lazy: loads LightGBM, which loading or fine-tuning a reranker never needs
    from training.train_ltr import collection_prefix, pool_collections

    started = time.perf_counter()
    pooled = pool_collections(roots, settings, depth=depth, on_progress=on_progress)
    query_texts: dict[str, str] = {}
    readers: list[Callable[[Sequence[DocId]], dict[DocId, str]]] = []
    for beir in pooled.datasets:
        index_dir, _ = cached_index(beir, settings)
        readers.append(shard_texts(LexicalShard(lexical_dir(index_dir, 0))))
        prefix = collection_prefix(beir)
        query_texts.update({prefix + q: t for q, t in beir.judged_queries().items()})

    def doc_texts(doc_ids: Sequence[DocId]) -> dict[DocId, str]:
        out: dict[DocId, str] = {}
        for reader in readers:  # doc ids are collection-scoped hashes: no clashes
            out.update(reader([d for d in doc_ids if d not in out]))
        return out

    def on_step(done: int, total: int) -> None:
        if on_progress is not None:
            on_progress("fine-tuning", done, total)

    base = default_model_path()
    reranker, stats = train_fold(
        base,
        pooled.frame,
        pooled.labels,
        sorted(query_texts),
        query_texts,
        doc_texts,
        params,
        on_progress=on_step,
    )
    data = [
        {"dataset": beir.name, "path": str(root), "fingerprint": beir.fingerprint()}
        for root, beir in zip(roots, pooled.datasets, strict=True)
    ]
    card = model_card(name=name, base_model=base, data=data, params=params, stats=stats)
    card["training_seconds"] = round(time.perf_counter() - started, 2)
    return reranker, card
