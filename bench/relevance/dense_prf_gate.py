"""Gate for candidate LTR features from the dense vectors, before any schema change.

Would features built from the candidates' MiniLM vectors lift LTR where the term-based
``prf_top*`` features did not (cisi)? This answers it cheaply, on the cached training
frames of ``trawl train ltr`` (own collection only, k-fold CV by query, the inner CV and
parameters of :func:`training.train_ltr.cross_validate`), with extra columns computed
here from the evaluation index's vectors:

- ``dprf5/10/20``: cosine of a candidate's vector (mean of its passages, normalised) to
  the sum of the top-k candidates' by the ``rrf`` feature, leaving the candidate itself
  out (the dense counterpart of ``prf_top*``);
- ``nbr_bm25``, ``nbr_cos``: the mean ``bm25_ratio`` / ``cosine`` of the candidate's five
  nearest other candidates (score regularisation: relevant documents resemble each
  other);
- ``rocchio``: cosine to the query vector moved half-way towards the top-10 centroid.

Run after ``trawl train ltr --dataset ../shared/data/eval/NAME --out /tmp/m`` has cached
the frame::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/relevance/dense_prf_gate.py cisi base,dprf,nbr,roc,all

Result, 2026-12-04 on the 2-core machine (members 1, five folds, fold seeds 0/1/2, mean
held-out nDCG@10): cranfield base .4627, dprf .4649, nbr .4659, roc .4621, all .4639;
cisi base .4547, dprf .4521, nbr .4537, roc .4485, all .4563. Every difference is inside
the spread of the fold seeds (cisi ±.01), so no feature was added: a dense feature
would also need the candidates' vectors to cross shards.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import training.train_ltr as train_ltr  # noqa: E402
from core.settings import Settings  # noqa: E402
from rerank.features import SCHEMA  # noqa: E402
from retrieval.vectors.embed import Embedder  # noqa: E402
from retrieval.vectors.hnsw import VectorShard  # noqa: E402
from training.datasets import BeirDataset  # noqa: E402
from training.frames import beir_labels  # noqa: E402

EXTRA = ("dprf5", "dprf10", "dprf20", "nbr_bm25", "nbr_cos", "rocchio")
VARIANTS = {
    "base": (),
    "dprf": ("dprf5", "dprf10", "dprf20"),
    "nbr": ("nbr_bm25", "nbr_cos"),
    "roc": ("rocchio",),
    "all": EXTRA,
}


def document_vectors(index: Path) -> tuple[NDArray[np.float64], dict[int, int]]:
    """Each document's mean passage vector, normalised, and its row by doc id."""
    vector_dir = index / "shard-0000" / "vector"
    shard = VectorShard.load(vector_dir / (vector_dir / "CURRENT").read_text().strip() / "index")
    matrix, order, docs, starts = shard._rows_by_doc()
    vectors = np.zeros((len(docs), matrix.shape[1]))
    for i in range(len(docs)):
        mean = matrix[order[starts[i] : starts[i + 1]]].mean(axis=0)
        vectors[i] = mean / np.linalg.norm(mean)
    return vectors, {int(d): i for i, d in enumerate(docs)}


def extra_columns(
    frame: pl.DataFrame,
    vectors: NDArray[np.float64],
    row_of: dict[int, int],
    queries: dict[str, NDArray[np.float64]],
) -> pl.DataFrame:
    columns: dict[str, list[float]] = {name: [] for name in EXTRA}
    for (qid,), part in frame.group_by("qid", maintain_order=True):
        rows = [row_of.get(int(d), -1) for d in part["doc_id"].to_list()]
        have = np.array([r >= 0 for r in rows])
        v = np.zeros((len(rows), vectors.shape[1]))
        v[have] = vectors[[r for r in rows if r >= 0]]
        ranked = [
            int(i)
            for i in np.argsort(-np.nan_to_num(part["rrf"].to_numpy(), nan=-1.0), kind="stable")
            if have[i]
        ]
        for k in (5, 10, 20):
            top = ranked[:k]
            total = v[top].sum(axis=0)
            out = np.full(len(rows), np.nan)
            for i in np.flatnonzero(have):
                centroid = total - v[i] if i in top else total
                norm = np.linalg.norm(centroid)
                out[i] = float(v[i] @ centroid / norm) if norm > 0 else np.nan
            columns[f"dprf{k}"].extend(out.tolist())
        centroid = v[ranked[:10]].mean(axis=0)
        moved = queries[str(qid)] + 0.5 * centroid / max(float(np.linalg.norm(centroid)), 1e-9)
        moved /= np.linalg.norm(moved)
        columns["rocchio"].extend(np.where(have, v @ moved, np.nan).tolist())
        similar = v @ v.T
        np.fill_diagonal(similar, -np.inf)
        similar[~have, :] = -np.inf
        similar[:, ~have] = -np.inf
        nearest = np.argsort(-similar, axis=1)[:, :5]
        for name, source in (("nbr_bm25", "bm25_ratio"), ("nbr_cos", "cosine")):
            values = np.nan_to_num(part[source].to_numpy(), nan=0.0)
            columns[name].extend(np.where(have, values[nearest].mean(axis=1), np.nan).tolist())
    return frame.with_columns([pl.Series(name, values) for name, values in columns.items()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("collection", help="cranfield or cisi (under ../shared/data/eval)")
    parser.add_argument("variants", help="comma-separated: " + ",".join(VARIANTS))
    parser.add_argument("--seeds", default="0,1,2", help="fold assignment seeds")
    parser.add_argument("--members", type=int, default=1)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    cached = sorted((root / "data" / "cache" / "eval").glob(f"{args.collection}-*/ltr-features-*.parquet"))
    if not cached:
        raise SystemExit(f"no cached frame of {args.collection}: run `trawl train ltr` on it first")
    frame = pl.read_parquet(cached[-1])
    vectors, row_of = document_vectors(cached[-1].parent / "index")
    source = root.parent / "shared" / "data" / "eval" / args.collection
    dataset = BeirDataset.open(source)
    texts = {}
    with (source / "queries.jsonl").open() as handle:
        for line in handle:
            record = json.loads(line)
            texts[record["_id"]] = record["text"]
    qids = list(dict.fromkeys(frame["qid"].to_list()))
    encoded = Embedder.from_settings(Settings().embed).encode_queries([texts[q] for q in qids])
    frame = extra_columns(
        frame, vectors, row_of, {q: encoded[i].astype(np.float64) for i, q in enumerate(qids)}
    )
    qrels = {
        q: {str(int(d)): g for d, g in judged.items()}
        for q, judged in beir_labels(dataset, dataset.qrels()).items()
    }
    for variant in args.variants.split(","):
        # cross_validate reads the module's SCHEMA for its columns: widen it for this run.
        train_ltr.SCHEMA = (*SCHEMA, *VARIANTS[variant])  # type: ignore[attr-defined]
        figures = [
            train_ltr.cross_validate(
                frame, qrels, train_ltr.LtrParams(members=args.members), seed=int(seed)
            ).means()["ndcg@10"]
            for seed in args.seeds.split(",")
        ]
        print(
            args.collection,
            variant,
            " ".join(f"{f:.4f}" for f in figures),
            f"mean {np.mean(figures):.4f}",
            flush=True,
        )
    train_ltr.SCHEMA = SCHEMA  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
