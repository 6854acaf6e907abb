"""What ``dense_prf_top5`` adds to a learned-ranker request, beside the lexical PRF it mirrors.

    python bench/bench_dense_prf_cost.py

Per request of 100 candidates: the feature itself (``rerank.features.dense_prf``) against
``prf_similarity`` over 400-word texts (the peer, run in the same process), and the
document vectors' trip through a remote shard's annotate reply (JSON, base64 float32).
Synthetic inputs (random unit vectors, MiniLM's 384 dimensions): the costs depend on
counts and sizes, not on the values.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rerank.features import dense_prf, prf_similarity  # noqa: E402
from retrieval.remote.shard_http import vectors_from_wire, vectors_to_wire  # noqa: E402


def per_call_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat * 1e3


def main() -> None:
    rng = np.random.default_rng(0)
    vectors = [(v / np.linalg.norm(v)).astype(np.float32) for v in rng.normal(size=(100, 384))]
    first_stage = rng.random(100)
    texts = [[f"w{int(x)}" for x in rng.integers(0, 3000, 400)] for _ in range(100)]
    by_id = dict(enumerate(vectors))
    dense = per_call_ms(lambda: dense_prf(vectors, first_stage, tops=(5,)), 200)
    lexical = per_call_ms(lambda: prf_similarity(texts, first_stage, tops=(5, 10, 20)), 50)
    wire = per_call_ms(lambda: vectors_from_wire(json.loads(json.dumps(vectors_to_wire(by_id)))), 200)
    size = len(json.dumps(vectors_to_wire(by_id)))
    print(
        f"dense_prf, 100 candidates: {dense:.3f} ms; lexical prf_similarity {lexical:.3f} ms "
        f"({dense / lexical:.2f}x); 100 document vectors to the wire and back {wire:.3f} ms, {size:,} bytes"
    )


if __name__ == "__main__":
    main()
