"""Relevance beside peers: Trawl's bm25 against bm25s, and (``--fusion``) Trawl's hybrid
against a plain bm25s + MiniLM fusion, on the same collections, scored by the same
evaluator (pytrec_eval via training.ir_metrics), all judged queries.

    pip install bm25s PyStemmer   # benchmark-only dependencies, not in pyproject
    python bench/bench_bm25_peers.py --fusion
    python bench/bench_bm25_peers.py --collections cranfield-title,cisi-title --fusion

bm25s is configured as in shared/RELEVANCE.md: English stopwords, Snowball stemmer
(PyStemmer), method "lucene", k1=1.5, b=0.75, documents as title + text. The fusion peer
is RELEVANCE.md's convex row: 0.5 · dense + 0.5 · bm25s, each min-max normalised over its
own top 100, a document missing from one list scoring that list's minimum; dense is the
packaged MiniLM in fp32 through sentence-transformers, one vector per document (title +
text, cut at 256 tokens), exact cosine. A collection named ``NAME-title`` is the
title-only variant of ``NAME`` (``trawl dataset title-only``, seed 0: half the documents
lose their body), written to ``data/eval/NAME-title`` when missing; ``NAME-short`` the same
with every other body cut to 30 words (``--body-words 30``): short documents with sentence
queries, about half title-only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import bm25s
import numpy as np
import Stemmer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from training.datasets import BeirDataset  # noqa: E402
from training.evaluate import evaluate  # noqa: E402
from training.ir_metrics import evaluate_run  # noqa: E402

EVAL = REPO.parent / "shared" / "data" / "eval"
VARIANTS = REPO / "data" / "eval"
FUSION_DEPTH = 100
Run = dict[str, dict[str, float]]


SHORT_BODY_WORDS = 30
"""A ``NAME-short`` variant's bodies: half dropped, the rest cut to this many words."""


def collection_dir(name: str) -> Path:
    """A shared collection, or its title-only or short variant (built once, seed 0)."""
    base, _, variant = name.rpartition("-")
    if variant not in ("title", "short"):
        return EVAL / name
    out = VARIANTS / name
    if not (out / "corpus.jsonl").exists():
        from training.title_only import title_only_variant

        words = SHORT_BODY_WORDS if variant == "short" else None
        title_only_variant(EVAL / base, out, seed=0, body_words=words)
    return out


def bm25s_run(dataset: BeirDataset, k: int = 1000) -> Run:
    docs = list(dataset.iter_documents())
    stemmer = Stemmer.Stemmer("english")
    corpus = bm25s.tokenize(
        [f"{d.title} {d.body}" for d in docs], stopwords="en", stemmer=stemmer, show_progress=False
    )
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index(corpus, show_progress=False)
    queries = dataset.judged_queries()
    ids = list(queries)
    tokens = bm25s.tokenize([queries[q] for q in ids], stopwords="en", stemmer=stemmer, show_progress=False)
    k = min(k, len(docs))
    results, scores = retriever.retrieve(tokens, k=k, show_progress=False)
    return {
        qid: {docs[int(i)].external_id: float(s) for i, s in zip(results[n], scores[n], strict=True) if s > 0}
        for n, qid in enumerate(ids)
    }


def dense_run(dataset: BeirDataset, k: int = FUSION_DEPTH) -> Run:
    """Exact MiniLM (fp32) cosine top ``k``: one vector per document."""
    import torch
    from sentence_transformers import SentenceTransformer

    from retrieval.vectors.embed import default_model_path

    torch.set_num_threads(os.cpu_count() or 1)
    model = SentenceTransformer(str(default_model_path()), device="cpu")
    model.max_seq_length = 256
    docs = list(dataset.iter_documents())
    texts = [f"{d.title}. {d.body}" if d.body else d.title for d in docs]
    matrix = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    queries = dataset.judged_queries()
    ids = list(queries)
    vectors = model.encode([queries[q] for q in ids], batch_size=64, normalize_embeddings=True)
    sims = vectors @ matrix.T
    out: Run = {}
    for n, qid in enumerate(ids):
        top = np.argsort(-sims[n])[:k]
        out[qid] = {docs[int(i)].external_id: float(sims[n, i]) for i in top}
    return out


def min_max(scores: dict[str, float]) -> dict[str, float]:
    """Scores scaled to [0, 1] over the list (a document missing from it counts as 0)."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = (high - low) or 1.0
    return {d: (s - low) / span for d, s in scores.items()}


def convex_fusion(lexical: Run, dense: Run, weight: float = 0.5, depth: int = FUSION_DEPTH) -> Run:
    out: Run = {}
    for qid in set(lexical) | set(dense):
        lex = min_max(dict(sorted(lexical.get(qid, {}).items(), key=lambda t: -t[1])[:depth]))
        den = min_max(dense.get(qid, {}))
        out[qid] = {d: weight * den.get(d, 0.0) + (1 - weight) * lex.get(d, 0.0) for d in set(lex) | set(den)}
    return out


def rounded(means: dict[str, float]) -> dict[str, float]:
    return {m: round(v, 4) for m, v in means.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--collections", default="cranfield,cisi,cranfield-title,cisi-title,cranfield-short,cisi-short"
    )
    parser.add_argument("--fusion", action="store_true", help="Also Trawl's hybrid against bm25s + MiniLM.")
    args = parser.parse_args()
    out: dict[str, dict[str, object]] = {}
    for name in args.collections.split(","):
        root = collection_dir(name)
        dataset = BeirDataset.open(root)
        qrels = dataset.qrels()
        lexical = bm25s_run(dataset)
        row: dict[str, object] = {
            "trawl_bm25": rounded(evaluate(root, "bm25").means),
            "bm25s": rounded(evaluate_run(lexical, qrels).means),
        }
        if args.fusion:
            dense = dense_run(dataset)
            row["minilm_dense"] = rounded(evaluate_run(dense, qrels).means)
            row["bm25s_minilm_convex"] = rounded(evaluate_run(convex_fusion(lexical, dense), qrels).means)
            row["trawl_hybrid"] = rounded(evaluate(root, "hybrid").means)
        out[name] = row
        ratios = {
            "bm25 / bm25s": row["trawl_bm25"]["ndcg@10"] / row["bm25s"]["ndcg@10"],  # type: ignore[index]
        }
        if args.fusion:
            ratios["hybrid / convex peer"] = (
                row["trawl_hybrid"]["ndcg@10"] / row["bm25s_minilm_convex"]["ndcg@10"]  # type: ignore[index]
            )
        row["ndcg@10 ratios"] = {k: round(v, 3) for k, v in ratios.items()}
        print(name, json.dumps(row["ndcg@10 ratios"]), file=sys.stderr, flush=True)
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
