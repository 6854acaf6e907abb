"""Embedding throughput, query latency and HNSW recall, against bare fp32 sentence-transformers.

Run: .venv/bin/python bench/bench_embed.py [--dataset ../shared/data/eval/cranfield] [--limit N]

Both sides embed the same passages (title + 160-word windows) at the same
max_seq_length and batch size in the same process:

- peer: ``SentenceTransformer.encode`` in fp32, nothing else;
- ours: the backfill job (``retrieval.backfill.backfill_index``) on a fresh index of
  the same documents: Embedder with the precision it picks for this CPU, chunk
  files, checkpoints and the HNSW build included.

The documents are split into rounds that alternate peer-first and ours-first, so a
machine shared with other jobs slows both sides alike (the ratio is what to carry).

Then: the dense nDCG@10 (exact search) of both vector sets, their cosine agreement,
query encoding latency, and HNSW latency/recall@10 against exact numpy search at a
few ``ef`` values.
"""

from __future__ import annotations

import argparse
import os
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
from retrieval.backfill import ChunkStore, backfill_index  # noqa: E402
from retrieval.build import build_index  # noqa: E402
from retrieval.embed import Embedder, normalize  # noqa: E402
from retrieval.layout import version_dir  # noqa: E402
from retrieval.vector import VectorShard  # noqa: E402
from training.datasets import BeirDataset  # noqa: E402
from training.evaluate import parse_queries  # noqa: E402
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
    parser.add_argument("--rounds", type=int, default=4, help="Interleaved peer/ours rounds.")
    args = parser.parse_args()

    settings = Settings()
    s = settings.embed
    dataset = BeirDataset.open(args.dataset)
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

    # -- throughput, interleaved rounds so that load from other processes hits both sides --------
    from sentence_transformers import SentenceTransformer

    peer = SentenceTransformer(str(embedder.model_path), device="cpu", local_files_only=True)
    peer.max_seq_length = s.max_seq_length
    peer.encode(texts[:32], batch_size=s.batch_size)  # warm-up
    embedder.encode(texts[:32])  # warm-up
    peer_s = ours_s = 0.0
    peer_parts: list[np.ndarray] = []
    ours = VectorShard.from_settings(s, dim=embedder.dim, model_id=embedder.model_id, capacity=len(texts))
    ours_rows = 0
    size = -(-len(docs) // args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            part = docs[r * size : (r + 1) * size]
            part_texts = [p for d in part for p in embedder.passages(d.title, d.body)]
            work = Path(tmp) / f"round-{r}"
            build_index(part, work)  # not timed: the lexical index exists before a backfill

            def run_peer(part_texts: list[str] = part_texts) -> float:
                started = time.perf_counter()
                peer_parts.append(
                    normalize(peer.encode(part_texts, batch_size=s.batch_size, normalize_embeddings=True))
                )
                return time.perf_counter() - started

            def run_ours(work: Path = work) -> float:
                started = time.perf_counter()
                backfill_index(work, embedder, s)
                return time.perf_counter() - started

            if r % 2 == 0:
                peer_s += run_peer()
                ours_s += run_ours()
            else:
                ours_s += run_ours()
                peer_s += run_peer()
            store = ChunkStore(version_dir(work, 0, embedder.model_id) / "chunks", embedder.model_id)
            for name in store.chunks:
                _, chunk_rows, chunk_vectors = store.read(name)
                ours.add(chunk_rows, chunk_vectors)
                ours_rows += len(chunk_rows)
    peer_vectors = np.concatenate(peer_parts)
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
    print(f"\n{args.rounds} interleaved rounds; ours = the whole backfill job (chunks, checkpoints, HNSW)")
    print("| embedder | seconds | docs/s | passages/s | x peer | dense nDCG@10 (exact) |")
    print("|---|---|---|---|---|---|")
    print(
        f"| peer: SentenceTransformer.encode fp32 | {peer_s:.1f} | {n / peer_s:.1f} | "
        f"{len(texts) / peer_s:.1f} | 1.00 | {ndcg_peer:.4f} |"
    )
    print(
        f"| ours: backfill job ({embedder.precision}) | {ours_s:.1f} | {n / ours_s:.1f} | "
        f"{ours_rows / ours_s:.1f} | {peer_s / ours_s:.2f} | {ndcg_ours:.4f} |"
    )
    print(f"cosine ours vs peer over passages: mean {cosines.mean():.5f}, min {cosines.min():.5f}")

    # -- query encoding latency (cache bypassed), interleaved query by query --------------------
    peer.encode([qtexts[0]], normalize_embeddings=True)
    embedder.encode([qtexts[0]])
    times: dict[str, list[float]] = {"peer fp32": [], f"ours {embedder.precision}": []}
    fns = (
        ("peer fp32", lambda t: peer.encode([t], normalize_embeddings=True)),
        (f"ours {embedder.precision}", lambda t: embedder.encode([t])),
    )
    for i, t in enumerate(qtexts):
        for name, fn in fns if i % 2 == 0 else fns[::-1]:
            started = time.perf_counter()
            fn(t)
            times[name].append((time.perf_counter() - started) * 1000)
    for name, values in times.items():
        print(
            f"query encode {name}: mean {statistics.mean(values):.1f} ms, p50 {percentile(values, 50):.1f}, "
            f"p99 {percentile(values, 99):.1f} ({len(values)} queries)"
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
