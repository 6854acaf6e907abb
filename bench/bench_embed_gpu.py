"""Embedding and cross-encoder reranking on a CUDA GPU against the CPU, on one machine.

Run (on a machine with a CUDA GPU; it refuses to run without one):

    .venv/bin/python bench/bench_embed_gpu.py --corpus ../shared/data/eval/cranfield/corpus.jsonl \\
        --corpus ../shared/data/eval/cisi/corpus.jsonl [--queries .../queries.jsonl] [--out DIR]

It imports only the embedder and the cross-encoder (no index, no Polars), so it runs in
a bare GPU image with a few wheels added. All rows run in the same process, one after
the other, on the same passages (title + 160-word windows, max_seq_length 256):

- encoding throughput, passages/s: the peer is bare ``SentenceTransformer.encode`` fp32
  on the GPU; ours is :class:`retrieval.vectors.embed.Embedder` with ``device=cuda`` (torch,
  bf16 where the calibration check passes) at batches of 32, 256 and 1,024 (the GPU default);
  beside them the CPU paths of this same machine (ONNX int8 over all its cores: the
  default backend; torch fp32 on a sample);
- the tokenizer alone, with Hugging Face tokenizers' parallelism off (as the CLI runs
  it) and on (as the embedder turns it on for a GPU): the CPU-side floor of the GPU rows;
- agreement: cosine of the GPU vectors to torch fp32 on the CPU, mean and minimum;
- query encoding latency, one query at a time (a serving process), GPU against ONNX
  int8 at one CPU thread;
- cross-encoder latency per query scoring ``--head`` (20) documents, GPU against one and
  all CPU threads.

Every timed loop is preceded by a warm-up of the same work. Results go to stdout and,
with ``--out``, to ``embed-gpu.json`` and ``embed-gpu.md`` there.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as the CLI sets it (cli/main.py)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from rerank.cross_encoder import CrossEncoderReranker, document_text  # noqa: E402
from retrieval.vectors.embed import Device, Embedder, default_model_path, normalize, passages  # noqa: E402


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def rate(work: Callable[[], Any], items: int, *, repeat: int = 2) -> tuple[float, Any]:
    """Items per second of ``work`` (best of ``repeat`` timed runs after one warm-up), and its result."""
    import torch

    result = work()
    best = float("inf")
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        started = time.perf_counter()
        result = work()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    return items / best, result


def latencies_ms(call: Callable[[int], Any], n: int) -> list[float]:
    import torch

    call(0)
    out = []
    for i in range(n):
        started = time.perf_counter()
        call(i)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        out.append((time.perf_counter() - started) * 1000)
    return out


def agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    cosines = np.sum(a * b, axis=1)
    return float(cosines.mean()), float(cosines.min())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, action="append", required=True, help="BEIR corpus.jsonl")
    parser.add_argument("--queries", type=Path, action="append", default=[], help="BEIR queries.jsonl")
    parser.add_argument("--model", type=Path, default=None, help="Model directory (default: packaged)")
    parser.add_argument("--cpu-sample", type=int, default=512, help="Passages for the CPU torch rows")
    parser.add_argument("--query-count", type=int, default=200)
    parser.add_argument("--head", type=int, default=20, help="Documents a cross-encoder query scores")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke run of the script, no figures"
    )
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this bench compares a GPU with the CPU and needs one", file=sys.stderr)
        return 2
    model_path = args.model or default_model_path()
    docs = [d for path in args.corpus for d in read_jsonl(path)]
    texts = [p for d in docs for p in passages(d.get("title", ""), d.get("text", ""), words=160, stride=120)]
    queries = [q["text"] for path in args.queries for q in read_jsonl(path)][: args.query_count]
    queries = queries or [t[:80] for t in texts[: args.query_count]]
    cpus = len(os.sched_getaffinity(0))
    accelerator = torch.cuda.get_device_name(0) if args.device == "cuda" else "no GPU (smoke run)"
    report: dict[str, Any] = {
        "machine": f"{accelerator}, {cpus} CPUs, {platform.python_version()}, torch {torch.__version__}",
        "documents": len(docs),
        "passages": len(texts),
        "rows": [],
    }
    rows: list[dict[str, Any]] = report["rows"]
    print(report["machine"], f"{len(docs)} documents, {len(texts)} passages", flush=True)

    peer = SentenceTransformer(str(model_path), device=args.device, local_files_only=True)
    peer.max_seq_length = 256
    peer_rate, peer_vectors = rate(
        functools.partial(peer.encode, texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False),
        len(texts),
    )
    peer_vectors = normalize(peer_vectors)
    tokenizer = peer.tokenizer

    def tokenize_all() -> None:
        for start in range(0, len(texts), 256):
            tokenizer(
                texts[start : start + 256], padding=True, truncation=True, max_length=256, return_tensors="pt"
            )

    rows.append(
        {"row": f"peer: SentenceTransformer.encode fp32, {args.device}, batch 32", "passages_s": peer_rate}
    )
    for parallel in ("false", "true"):
        os.environ["TOKENIZERS_PARALLELISM"] = parallel
        tokens_rate, _ = rate(tokenize_all, len(texts))
        rows.append(
            {"row": f"tokenizer alone, batches of 256, parallelism {parallel}", "passages_s": tokens_rate}
        )
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    del peer
    torch.cuda.empty_cache()

    cpu_torch = Embedder(model_path, backend="torch", device="cpu", precision="fp32", torch_threads=cpus)
    sample = texts[: args.cpu_sample]
    cpu_rate, reference = rate(lambda: cpu_torch.encode(sample), len(sample), repeat=1)
    rows.append({"row": f"torch fp32, CPU ({cpus} threads)", "passages_s": cpu_rate})

    for batch in (32, 256, 1024):
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        ours = Embedder(
            model_path,
            backend="auto",
            device=args.device,
            gpu_batch_size=batch,
            batch_size=batch,
            query_cache_size=0,
        )
        ours_rate, vectors = rate(functools.partial(ours.encode, texts), len(texts))
        mean, worst = agreement(vectors[: len(sample)], reference)
        rows.append(
            {
                "row": f"ours: Embedder {ours.backend} {ours.precision}, {ours.device}, batch {batch}"
                + f", tokenizer parallelism {os.environ['TOKENIZERS_PARALLELISM']}",
                "passages_s": ours_rate,
                "cosine_to_cpu_fp32_mean": mean,
                "cosine_to_cpu_fp32_min": worst,
                "model_id": ours.model_id,
            }
        )
        gpu = ours
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    peer_mean, peer_min = agreement(peer_vectors[: len(sample)], reference)
    rows[0]["cosine_to_cpu_fp32_mean"], rows[0]["cosine_to_cpu_fp32_min"] = peer_mean, peer_min

    try:
        onnx = Embedder(model_path, backend="onnx-int8", torch_threads=cpus, query_cache_size=0)
        onnx_rate, onnx_vectors = rate(lambda: onnx.encode(sample), len(sample), repeat=1)
        mean, worst = agreement(onnx_vectors, reference)
        rows.append(
            {
                "row": f"ONNX int8, CPU ({cpus} texts side by side): the CPU default",
                "passages_s": onnx_rate,
                "cosine_to_cpu_fp32_mean": mean,
                "cosine_to_cpu_fp32_min": worst,
            }
        )
        one_thread = Embedder(model_path, backend="onnx-int8", torch_threads=1, query_cache_size=0)
        cpu_query = latencies_ms(lambda i: one_thread.encode([queries[i % len(queries)]]), len(queries))
        report["query_ms_cpu_onnx_1_thread"] = {
            "p50": percentile(cpu_query, 50),
            "p95": percentile(cpu_query, 95),
        }
    except Exception as exc:  # noqa: BLE001 - a CPU row missing must not lose the GPU rows
        report["onnx_error"] = f"{type(exc).__name__}: {exc}"
    gpu_query = latencies_ms(lambda i: gpu.encode([queries[i % len(queries)]]), len(queries))
    report["query_ms_gpu"] = {"p50": percentile(gpu_query, 50), "p95": percentile(gpu_query, 95)}

    heads = [
        [document_text(d.get("title", ""), d.get("text", "")) for d in docs[i : i + args.head]]
        for i in range(0, len(docs), args.head)
    ]
    reranker_rows: dict[str, dict[str, float]] = {}
    runs: list[tuple[str, Device, int]] = [
        (args.device, args.device, 1),
        ("CPU, 1 thread", "cpu", 1),
        (f"CPU, {cpus} threads", "cpu", cpus),
    ]
    for label, device, threads in runs:
        reranker = CrossEncoderReranker.load(model_path, seed=0, device=device, threads=threads)
        n = len(queries) if device == "cuda" else min(len(queries), 30)

        def score_one(i: int, reranker: CrossEncoderReranker = reranker) -> object:
            return reranker.score(queries[i % len(queries)], heads[i % len(heads)])

        times = latencies_ms(score_one, n)
        reranker_rows[label] = {"p50": percentile(times, 50), "p95": percentile(times, 95), "queries": n}
    report["cross_encoder_ms_per_query"] = reranker_rows

    lines = [
        f"# bench_embed_gpu.py: {report['machine']}",
        "",
        f"{len(docs)} documents, {len(texts)} passages (max_seq 256); CPU torch rows on the first "
        f"{len(sample)} passages.",
        "",
        "| encoder | passages/s | × peer | cosine to CPU fp32 mean / min |",
        "|---|---|---|---|",
    ]
    for row in rows:
        agree = (
            f"{row['cosine_to_cpu_fp32_mean']:.5f} / {row['cosine_to_cpu_fp32_min']:.5f}"
            if "cosine_to_cpu_fp32_mean" in row
            else "(reference)"
            if row["row"].startswith("torch fp32, CPU")
            else "—"
        )
        lines.append(
            f"| {row['row']} | {row['passages_s']:.0f} | {row['passages_s'] / peer_rate:.2f} | {agree} |"
        )
    lines += ["", "| query encoding, one at a time | p50 ms | p95 ms |", "|---|---|---|"]
    for key, label in (
        ("query_ms_gpu", f"{args.device} (ours, {gpu.backend})"),
        ("query_ms_cpu_onnx_1_thread", "CPU ONNX int8, 1 thread"),
    ):
        if key in report:
            lines.append(f"| {label} | {report[key]['p50']:.2f} | {report[key]['p95']:.2f} |")
    lines += [
        "",
        f"| cross-encoder, {args.head} documents a query | p50 ms | p95 ms | queries |",
        "|---|---|---|---|",
    ]
    for label, figures in reranker_rows.items():
        lines.append(f"| {label} | {figures['p50']:.1f} | {figures['p95']:.1f} | {figures['queries']} |")
    if "onnx_error" in report:
        lines += ["", f"ONNX int8 rows missing: {report['onnx_error']}"]
    text = "\n".join(lines)
    print(text, flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "embed-gpu.json").write_text(json.dumps(report, indent=2))
        (args.out / "embed-gpu.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
