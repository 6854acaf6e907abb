"""The bare HTTP peer of the serving benchmark: the same Tantivy (+ hnswlib) search as the
bare in-process peer, behind a minimal FastAPI endpoint under uvicorn.

    python bench/bare_http_peer.py GENERATION_DIR PORT [--hybrid]

It shares Trawl's analyser (the indexes hold analysed tokens) and, with ``--hybrid``,
the query encoder; nothing else of Trawl runs. Driven by the same generator as Trawl,
it shows what HTTP plus the bare search cost on this machine.
"""

from __future__ import annotations

import heapq
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def create_app(gen: Path, *, hybrid: bool) -> Any:
    import tantivy
    from fastapi import FastAPI

    from core.settings import Settings
    from retrieval.index import layout
    from retrieval.index.manifest import IndexManifest
    from retrieval.text.tokenizer import analyzed_text
    from retrieval.vectors.hnsw import VectorShard, current_version

    manifest = IndexManifest.load(gen)
    indexes = [tantivy.Index.open(str(layout.lexical_dir(gen, i))) for i in range(manifest.shards)]
    searchers = [index.searcher() for index in indexes]
    vectors = []
    encoder = None
    if hybrid:
        from retrieval.vectors.embed import Embedder

        for i in range(manifest.shards):
            version = current_version(gen, i)
            assert version is not None, "run the embedding step first"
            vectors.append(VectorShard.load(layout.vector_index_dir(layout.vector_root(gen, i) / version)))
        encoder = Embedder.from_settings(Settings().embed, serving=True)
    fields = ["title", "headings", "body", "anchors"]
    app = FastAPI()

    @app.get("/v1/search")
    def search(q: str, ranker: str = "") -> dict[str, Any]:
        text = analyzed_text(q)
        hits = []
        for index, searcher in zip(indexes, searchers, strict=True):
            query, _ = index.parse_query_lenient(text or "nothing", fields)
            result = searcher.search(query, limit=10)
            hits.extend((score, addr, searcher) for score, addr in result.hits)
        top = heapq.nlargest(10, hits, key=lambda h: h[0])
        docs = [searcher.doc(addr).get_first("doc_id") for _, addr, searcher in top]
        if encoder is not None:
            vec = encoder.encode_query(q)
            for shard in vectors:
                shard.search(vec, 10)
        return {"hits": [str(d) for d in docs]}

    @app.get("/readyz")
    def ready() -> dict[str, str]:
        return {"status": "ok"}

    return app


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(
        create_app(Path(sys.argv[1]), hybrid="--hybrid" in sys.argv),
        host="127.0.0.1",
        port=int(sys.argv[2]),
        log_level="warning",
    )
