"""BM25 relevance beside a peer: Trawl's bm25 ranker against bm25s on the same collections,
scored by the same evaluator (pytrec_eval via training.metrics), all judged queries.

    pip install bm25s   # benchmark-only dependency, not in pyproject
    python bench/bench_bm25_peers.py

bm25s is configured as in shared/RELEVANCE.md: English stopwords, Snowball stemmer
(PyStemmer), method "lucene", k1=1.5, b=0.75, documents as title + text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import bm25s
import Stemmer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from training.datasets import BeirDataset  # noqa: E402
from training.evaluate import evaluate  # noqa: E402
from training.metrics import evaluate_run  # noqa: E402

EVAL = REPO.parent / "shared" / "data" / "eval"


def bm25s_run(dataset: BeirDataset) -> dict[str, dict[str, float]]:
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
    k = min(1000, len(docs))
    results, scores = retriever.retrieve(tokens, k=k, show_progress=False)
    return {
        qid: {docs[int(i)].external_id: float(s) for i, s in zip(results[n], scores[n], strict=True) if s > 0}
        for n, qid in enumerate(ids)
    }


def main() -> None:
    out = {}
    for name in ("cranfield", "cisi"):
        dataset = BeirDataset.open(EVAL / name)
        peer = evaluate_run(bm25s_run(dataset), dataset.qrels())
        ours = evaluate(EVAL / name, "bm25")
        out[name] = {
            "trawl_bm25": {m: round(v, 4) for m, v in ours.means.items()},
            "bm25s": {m: round(v, 4) for m, v in peer.means.items()},
        }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
