"""Training frames for learning to rank: candidates × judgments, grouped by query, as Parquet.

A frame has one row per (query, candidate): ``dataset``, ``qid``, ``doc_id``, ``label``
(the judged grade, 0 when unjudged) and one column per :data:`rerank.features.SCHEMA` name,
a query's rows contiguous and in candidate order. Features come from
:func:`rerank.features.compute_features`, the function the serving stage calls, over the
candidates the serving path would produce, so offline and online rows agree.

Frames are cached as Parquet under the collection's evaluation cache, keyed by what they
depend on (schema, feature code, embedding model, depth, query set), so a run can be
reproduced from the file and a changed feature never reuses a stale frame. Two more
sources: :func:`frame_from_logs` (the serving stage's feature log plus judgments) and
:func:`document_frame` (per-document static values).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from numpy.typing import NDArray

import rerank.features as features_module
from core.settings import Settings
from core.types import DocId, Query
from rerank.feature_log import read_feature_log
from rerank.features import SCHEMA, FeatureContext, compute_features
from retrieval.index.layout import lexical_dir
from retrieval.index.lexical import LexicalShard, StoredDoc
from retrieval.query import hybrid as hybrid_module
from retrieval.query.hybrid import Candidate, shard_candidates
from retrieval.vectors.backfill import backfill_index, open_vector_shard
from retrieval.vectors.embed import Embedder
from retrieval.vectors.hnsw import VectorShard
from training.datasets import BeirDataset, Qrels
from training.eval_index import cached_index, parse_queries
from training.pagerank import beir_pagerank

logger = logging.getLogger(__name__)

KEY_COLUMNS: tuple[str, ...] = ("dataset", "qid", "doc_id", "label")
ProgressFn = Callable[[int, int], None]
"""(queries done, queries in all)."""


def frame_schema() -> dict[str, pl.DataType]:
    return {
        "dataset": pl.String(),
        "qid": pl.String(),
        "doc_id": pl.UInt64(),
        "label": pl.Int32(),
        **{name: pl.Float64() for name in SCHEMA},
    }


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=frame_schema())


def feature_code_version() -> str:
    """Hash of the feature code, the candidate code and the schema: part of every cached frame's key."""
    source = Path(features_module.__file__).read_bytes() + Path(hybrid_module.__file__).read_bytes()
    return hashlib.blake2b(source + "\n".join(SCHEMA).encode(), digest_size=6).hexdigest()


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What produces a collection's candidates: its lexical shard and (optionally) vectors."""

    lexical: LexicalShard
    vectors: VectorShard | None
    query_vectors: Mapping[str, NDArray[np.float32]]
    """Query id → query vector (absent: lexical candidates only)."""
    model_id: str = ""

    def candidates(self, qid: str, query: Query, depth: int) -> list[Candidate]:
        """The serving path's tier-0 candidates: lexical ∪ vector top-``depth``, per-field BM25."""
        return shard_candidates(
            self.lexical,
            self.vectors,
            query,
            self.query_vectors.get(qid),
            k_lexical=depth,
            k_vector=depth,
            with_fields=True,
            with_doc_vectors=True,
        )


def query_text(query: Query) -> str:
    """What the embedder sees: the positive words (operators stripped), else the raw text."""
    return query.positive_text or query.raw


def open_retrieval(index_dir: Path, settings: Settings, queries: Mapping[str, Query]) -> Retrieval:
    """Lexical shard, backfilled vectors and encoded queries of a one-shard evaluation index.

    Uses the embeddings engineer's public pieces (backfill, open, encode) so vectors and
    query encodings are exactly those the ``dense`` and ``hybrid`` rankers use.
    """
    embedder = Embedder.from_settings(settings.embed)
    backfill_index(index_dir, embedder, settings.embed)
    vectors = open_vector_shard(index_dir, 0, model_id=embedder.model_id, ef=settings.embed.hnsw_ef)
    qids = [q for q in queries if query_text(queries[q]).strip()]
    matrix = embedder.encode_queries([query_text(queries[q]) for q in qids]) if qids else None
    query_vectors = {qid: matrix[i] for i, qid in enumerate(qids)} if matrix is not None else {}
    lexical = LexicalShard(lexical_dir(index_dir, 0))
    return Retrieval(lexical, vectors, query_vectors, embedder.model_id)


def build_frame(
    dataset: str,
    queries: Mapping[str, Query],
    retrieval: Retrieval,
    labels: Mapping[str, Mapping[DocId, int]],
    *,
    depth: int,
    context: FeatureContext | None = None,
    static: Mapping[DocId, Mapping[str, float]] | None = None,
    on_progress: ProgressFn | None = None,
) -> pl.DataFrame:
    """Features of every query's candidates, with labels; rows grouped by query.

    ``static`` overrides stored per-document values (e.g. ``{"pagerank": …}`` computed
    by :mod:`training.pagerank` for an index built before the job ran), exactly as if
    the index held them.
    """
    parts: list[pl.DataFrame] = []
    total = len(queries)
    for done, (qid, query) in enumerate(queries.items(), 1):
        candidates = retrieval.candidates(qid, query, depth)
        docs = retrieval.lexical.stored_many([c.doc_id for c in candidates])
        if static:
            docs = {d: _with_static(doc, static.get(d)) for d, doc in docs.items()}
        parts.append(query_frame(dataset, qid, query, candidates, docs, labels.get(qid, {}), context))
        if on_progress is not None:
            on_progress(done, total)
    return pl.concat(parts, how="vertical") if parts else empty_frame()


def _with_static(doc: StoredDoc, values: Mapping[str, float] | None) -> StoredDoc:
    # Static values (PageRank, …) are float fields of StoredDoc; mypy cannot see that
    # through a mapping of names.
    return dataclasses.replace(doc, **values) if values else doc  # type: ignore[arg-type]


def query_frame(
    dataset: str,
    qid: str,
    query: Query,
    candidates: Sequence[Candidate],
    docs: Mapping[DocId, StoredDoc],
    labels: Mapping[DocId, int],
    context: FeatureContext | None = None,
) -> pl.DataFrame:
    matrix = compute_features(query, candidates, docs, context=context)
    columns: dict[str, object] = {
        "dataset": [dataset] * len(matrix.doc_ids),
        "qid": [qid] * len(matrix.doc_ids),
        "doc_id": [int(d) for d in matrix.doc_ids],
        "label": [int(labels.get(d, 0)) for d in matrix.doc_ids],
    }
    for j, name in enumerate(SCHEMA):
        columns[name] = matrix.values[:, j]
    return pl.DataFrame(columns, schema=frame_schema())


def beir_labels(dataset: BeirDataset, qrels: Qrels) -> dict[str, dict[DocId, int]]:
    """Qrels keyed by the index's doc ids (negative grades count as 0)."""
    return {
        qid: {DocId(dataset.doc_id(doc)): max(0, grade) for doc, grade in judged.items()}
        for qid, judged in qrels.items()
    }


@dataclass(frozen=True, slots=True)
class CollectionFrame:
    """A collection's training frame and the Parquet file it was read from or written to."""

    dataset: str
    frame: pl.DataFrame
    path: Path
    depth: int


def frame_cache_path(cache_dir: Path, settings: Settings, queries: Mapping[str, Query], depth: int) -> Path:
    """Where a collection's training frame is cached: keyed by the feature code, the candidate
    depth, the embedding settings and the queries, so any change to them builds a new frame.
    The Ray frame job writes to the same path (``training.ray_training``)."""
    key = hashlib.blake2b(
        "|".join(
            [
                feature_code_version(),
                str(depth),
                settings.embed.model_dump_json(),
                *(f"{q}\t{queries[q].raw}" for q in sorted(queries)),
            ]
        ).encode(),
        digest_size=8,
    ).hexdigest()
    return cache_dir / f"ltr-features-{key}.parquet"


def collection_frame(
    dataset_dir: Path,
    settings: Settings,
    *,
    queries: Mapping[str, Query] | None = None,
    depth: int | None = None,
    on_progress: ProgressFn | None = None,
) -> CollectionFrame:
    """The training frame of a BEIR collection, from its Parquet cache when up to date.

    Candidates are the hybrid union (lexical and vector top ``depth``, default the
    serving ``candidate_k``); PageRank comes from the collection's link graph
    (``metadata.links``; uniform when there is none).
    """
    dataset = BeirDataset.open(dataset_dir)
    depth = depth or settings.search.candidate_k
    index_dir, cache_dir = cached_index(dataset, settings)
    queries = dict(queries) if queries is not None else parse_queries(dataset.judged_queries())
    path = frame_cache_path(cache_dir, settings, queries, depth)
    if path.exists():
        logger.info("training frame of %s from %s", dataset.name, path)
        return CollectionFrame(dataset.name, pl.read_parquet(path), path, depth)
    retrieval = open_retrieval(index_dir, settings, queries)
    pagerank = beir_pagerank(dataset.root)
    frame = build_frame(
        dataset.name,
        queries,
        retrieval,
        beir_labels(dataset, dataset.qrels()),
        depth=depth,
        static={d: {"pagerank": v} for d, v in pagerank.items()},
        on_progress=on_progress,
    )
    tmp = path.with_suffix(".parquet.tmp")
    frame.write_parquet(tmp)
    tmp.replace(path)
    logger.info(
        "training frame of %s: %d rows, %d queries → %s", dataset.name, frame.height, len(queries), path
    )
    return CollectionFrame(dataset.name, frame, path, depth)


def frame_from_logs(
    log_dir: Path, labels: Mapping[str, Mapping[DocId, int]], *, dataset: str = "log"
) -> pl.DataFrame:
    """A training frame from logged serving rows plus judgments keyed by query text.

    ``labels`` maps a query's raw text to graded documents (judgments, or click-derived
    grades). Queries without any label are dropped: they cannot teach a ranker. When a
    query was logged several times, its latest impression is used.
    """
    log = read_feature_log(log_dir)
    if log.height == 0:
        return empty_frame()
    latest = log.group_by("query_id").agg(pl.col("logged_at").max().alias("_latest"))
    log = log.join(latest, on="query_id").filter(pl.col("logged_at") == pl.col("_latest"))
    rows = [
        {"query": text, "doc_id": int(doc_id), "label": int(grade)}
        for text, graded in labels.items()
        for doc_id, grade in graded.items()
    ]
    judged = pl.DataFrame(rows, schema={"query": pl.String, "doc_id": pl.UInt64, "label": pl.Int32})
    known = judged.select("query").unique()
    frame = (
        log.join(known, on="query", how="semi")
        .join(judged, on=["query", "doc_id"], how="left")
        .with_columns(
            pl.lit(dataset).alias("dataset"),
            pl.col("query_id").alias("qid"),
            pl.col("label").fill_null(0).cast(pl.Int32),
        )
        .sort(["qid", "position"])
    )
    return frame.select([pl.col(c).cast(t) for c, t in frame_schema().items()])


def document_frame(
    lexical: LexicalShard, static: Mapping[DocId, Mapping[str, float]] | None = None
) -> pl.DataFrame:
    """Per-document offline values (doc_id, url, pagerank, body words, duplicate cluster)."""
    rows = []
    for doc in lexical.iter_stored():
        doc = _with_static(doc, (static or {}).get(doc.doc_id))
        rows.append(
            {
                "doc_id": int(doc.doc_id),
                "url": doc.url,
                "pagerank": float(doc.pagerank),
                "doc_words": doc.body.count(" ") + 1 if doc.body else 0,
                "dup_cluster_size": int(doc.dup_cluster_size),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "doc_id": pl.UInt64,
            "url": pl.String,
            "pagerank": pl.Float64,
            "doc_words": pl.Int64,
            "dup_cluster_size": pl.Int64,
        },
    )


def split_queries(frame: pl.DataFrame) -> list[str]:
    """Query ids in frame order (each query's rows are contiguous)."""
    return list(dict.fromkeys(frame["qid"].to_list()))
