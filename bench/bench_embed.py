"""Embedding throughput, query latency and HNSW recall, against bare fp32 sentence-transformers.

Run: .venv/bin/python bench/bench_embed.py [--dataset ../shared/data/eval/cranfield] [--limit N]

Both sides embed the same passages (title + 160-word windows) at the same
max_seq_length and batch size in the same process:

- peer: ``SentenceTransformer.encode`` in fp32, nothing else;
- ours: the backfill job (``retrieval.backfill.backfill_index``) on a fresh copy of
  the dataset's evaluation index: Embedder with the precision it picks for this CPU,
  chunk files, checkpoints and the HNSW build included.

Then: the dense nDCG@10 (exact search) of both vector sets, their cosine agreement,
query encoding latency, and HNSW latency/recall@10 against exact numpy search at a
few ``ef`` values.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from core.settings import Settings  # noqa: E402
from retrieval.backfill import backfill_index, open_vector_shard  # noqa: E402
from retrieval.embed import Embedder, normalize  # noqa: E402
from retrieval.vector import VectorShard  # noqa: E402
from training.datasets import BeirDataset  # noqa: E402
from training.evaluate import cached_index, parse_queries  # noqa: E402
from training.metrics import evaluate_run  # noqa: E402
from training.rankers_dense import query_text  # noqa: E402


def dense_ndcg(dataset: BeirDataset, shard: VectorShard, query_vectors: np.ndarray, qids: list[str]) -> float:
    qrels = {
        q: {str(dataset.doc_id(d)): g for d, g in judged.items()}
        for q, judged in dataset.qrels().items()
        if q in qids
    }
    run = {
        q: {str(h.doc_id): h.score for h in shard.search_exact(query_vectors[i], 1000)}
        for i, q in enumerate(qids)
    }
    return evaluate_run(run, qrels).means["ndcg@10"]


def percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=Path("../shared/data/eval/cranfield"))
    parser.add_argument("--limit", type=int, default=0, help="Use only the first N documents (0: all).")
    args = parser.parse_args()

    settings = Settings()
    s = settings.embed
    dataset = BeirDataset.open(args.dataset)
    index_dir, _ = cached_index(dataset, settings)
    embedder = Embedder.from_settings(s)
    docs = list(dataset.iter_documents())
    if args.limit:
        docs = docs[: args.limit]
    texts: list[str] = []
    rows: list[int] = []
    for doc in docs:
        for passage in embedder.passages(doc.title, doc.body):
            texts.append(passage)
            rows.append(int(doc.doc_id))
    print(
        f"{dataset.name}: {len(docs)} documents, {len(texts)} passages, max_seq {s.max_seq_length}, "
        f"batch {s.batch_size}, torch threads {os.cpu_count()}, precision picked: {embedder.precision}"
    )

    # -- peer: bare fp32 SentenceTransformer.encode ------------------------------------------
    from sentence_transformers import SentenceTransformer

    peer = SentenceTransformer(str(embedder.model_path), device="cpu", local_files_only=True)
    peer.max_seq_length = s.max_seq_length
    peer.encode(texts[:32], batch_size=s.batch_size)  # warm-up
    started = time.perf_counter()
    peer_vectors = normalize(peer.encode(texts, batch_size=s.batch_size, normalize_embeddings=True))
    peer_s = time.perf_counter() - started

    # -- ours: the backfill job on a fresh copy of the index ----------------------------------
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "index"
        shutil.copytree(index_dir, work, ignore=shutil.ignore_patterns("vector"))
        if args.limit:
            from retrieval.build import build_index

            shutil.rmtree(work)
            build_index(docs, work)
        embedder.encode(texts[:32])  # warm-up, as for the peer
        started = time.perf_counter()
        report = backfill_index(work, embedder, s)
        ours_s = time.perf_counter() - started
        ours = open_vector_shard(work, 0, model_id=embedder.model_id)

    peer_shard = VectorShard.from_settings(s, dim=embedder.dim, model_id="peer-fp32", capacity=len(texts))
    peer_shard.add(np.asarray(rows, dtype=np.int64), peer_vectors)
    ours_vectors = embedder.encode(texts)
    cosines = np.sum(ours_vectors * peer_vectors, axis=1)

    queries = parse_queries(dataset.judged_queries())
    qids = list(queries)
    qtexts = [query_text(queries[q]) for q in qids]
    peer_q = normalize(peer.encode(qtexts, batch_size=s.batch_size, normalize_embeddings=True))
    ours_q = embedder.encode_queries(qtexts)
    ndcg_peer = dense_ndcg(dataset, peer_shard, peer_q, qids)
    ndcg_ours = dense_ndcg(dataset, ours, ours_q, qids)

    n = len(docs)
    print("\n| embedder | seconds | docs/s | passages/s | x peer | dense nDCG@10 (exact) |")
    print("|---|---|---|---|---|---|")
    print(
        f"| peer: SentenceTransformer.encode fp32 | {peer_s:.1f} | {n / peer_s:.1f} | "
        f"{len(texts) / peer_s:.1f} | 1.00 | {ndcg_peer:.4f} |"
    )
    print(
        f"| ours: backfill job ({embedder.precision}) | {ours_s:.1f} | {n / ours_s:.1f} | "
        f"{report.rows / ours_s:.1f} | {peer_s / ours_s:.2f} | {ndcg_ours:.4f} |"
    )
    print(f"cosine ours vs peer over passages: mean {cosines.mean():.5f}, min {cosines.min():.5f}")

    # -- query encoding latency (cache bypassed) ----------------------------------------------
    for name, fn in (
        ("peer fp32", lambda t: peer.encode([t], normalize_embeddings=True)),
        (f"ours {embedder.precision}", lambda t: embedder.encode([t])),
    ):
        fn(qtexts[0])
        times = []
        for t in qtexts:
            started = time.perf_counter()
            fn(t)
            times.append((time.perf_counter() - started) * 1000)
        print(
            f"query encode {name}: mean {statistics.mean(times):.1f} ms, p50 {percentile(times, 50):.1f}, "
            f"p99 {percentile(times, 99):.1f} ({len(times)} queries)"
        )

    # -- HNSW vs exact --------------------------------------------------------------------------
    exact_top = []
    started = time.perf_counter()
    for v in ours_q:
        exact_top.append({h.doc_id for h in ours.search_exact(v, 10)})
    exact_ms = (time.perf_counter() - started) * 1000 / len(ours_q)
    print(f"\nexact numpy search over {ours.num_rows} passages: {exact_ms:.3f} ms/query")
    print("| ef | HNSW ms/query (k=10) | recall@10 vs exact |")
    print("|---|---|---|")
    for ef in (10, 16, 32, 64, 100, 200):
        ours.ef = ef
        started = time.perf_counter()
        found = [{h.doc_id for h in ours.search(v, 10)} for v in ours_q]
        ms = (time.perf_counter() - started) * 1000 / len(ours_q)
        recall = statistics.mean(len(f & e) / 10 for f, e in zip(found, exact_top, strict=True))
        print(f"| {ef} | {ms:.3f} | {recall:.4f} |")
    print("(a k=10 document search asks HNSW for 26 passages, so ef below 26 acts as 26)")


if __name__ == "__main__":
    main()
