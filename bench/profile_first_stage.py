"""Where a served query's time goes, in-process: cProfile shares per stage and call counts.

    python bench/profile_first_stage.py [N] [profile|REPEATS] [rankers]

``profile`` prints one JSON line per ranker (shares of ``SearchService._search`` under
cProfile, Tantivy/hnswlib calls per query) over the first N benchmark queries on the
10K-document, 2-shard index bench/bench_serving.py builds (data/bench/serving-10000-2);
a number instead runs that many interleaved rounds of bare Tantivy(+hnswlib) and Trawl
query by query and prints their p50 ratio. Query vectors are precomputed: encoding is
not the first stage's cost. ``I12_SRC`` points at another checkout to profile it.
"""

import cProfile
import heapq
import json
import os
import pstats
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRAWL_EMBED__QUERY_CACHE_SIZE"] = "0"
os.environ["TRAWL_SEARCH__CACHE_ENTRIES"] = "0"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
sys.path.insert(0, os.environ.get("I12_SRC", str(Path(__file__).resolve().parents[1])))
import tantivy

from bench.bench_serving import queries
from core.settings import Settings
from rerank.pipeline import open_search_service
from retrieval.index import layout
from retrieval.index.root import resolve_index
from retrieval.query.request import SearchRequest
from retrieval.text.tokenizer import analyzed_text

ROOT = Path(__file__).resolve().parents[1] / "data" / "bench" / "serving-10000-2"
N = int(sys.argv[1]) if len(sys.argv) > 1 else 60
mode = sys.argv[2] if len(sys.argv) > 2 else "profile"
rankers = sys.argv[3].split(",") if len(sys.argv) > 3 else ["bm25", "hybrid", "ltr"]
service = open_search_service(Settings(), ROOT)
qs = queries()[:N]
enc = service.encoder
vecs = {q: enc(q) for q in qs} if enc else {}
# Query vectors precomputed: encoding is not the first stage's cost.
service.encoder = lambda text: vecs[text] if text in vecs else enc(text)
pos_text = {}
for q in qs:
    try:
        pos_text[service.parse(SearchRequest(q)).positive_text] = vecs[q]
    except Exception:
        pass
service.encoder = lambda text: pos_text.get(text) if text in pos_text else enc(text)

gen = resolve_index(ROOT)
broker = service.generation.broker
bare = []
for i in range(len(broker.shards)):
    idx = tantivy.Index.open(str(layout.lexical_dir(gen, i)))
    bare.append((idx, idx.searcher()))
vshards = [r[0].vector for r in broker.shards]
fields = ["title", "headings", "body", "anchors"]


def run_bare(q, hybrid):
    text = analyzed_text(q)
    hits = []
    for index, searcher in bare:
        query, _ = index.parse_query_lenient(text or "nothing", fields)
        hits.extend((s, a, searcher) for s, a in searcher.search(query, limit=10).hits)
    for _, a, s in heapq.nlargest(10, hits, key=lambda h: h[0]):
        s.doc(a)
    if hybrid:
        v = vecs[q]
        for vs in vshards:
            vs.search(v, 10)


def run(q, ranker):
    try:
        service.search(SearchRequest(q, ranker=ranker))
    except Exception as e:
        print("ERR", e)


for r in rankers:
    for q in qs[:10]:
        run(q, r)
        run_bare(q, r != "bm25")

if mode == "profile":
    for r in rankers:
        pr = cProfile.Profile()
        pr.enable()
        for q in qs:
            run(q, r)
        pr.disable()
        st = pstats.Stats(pr)
        rows = {}
        for (f, _line, fn), (_cc, nc, tt, ct, _callers) in st.stats.items():
            rows.setdefault(fn, []).append((f, nc, tt, ct))

        def get(fn, file_part="", rows=rows):
            hits = [x for x in rows.get(fn, []) if file_part in x[0]]
            return (sum(h[1] for h in hits), sum(h[3] for h in hits))

        total = get("_search", "search.py")[1]
        named = [
            ("parse+normalize", [("parse", "search.py"), ("normalized", "search.py")]),
            ("stats round trip", [("stats", "broker.py")]),
            ("lexical search (query build + Tantivy)", [("search", "lexical.py")]),
            ("  of which build_query (all calls)", [("build_query", "lexical.py")]),
            ("vector search (HNSW)", [("filtered_vector_hits", "hybrid.py")]),
            ("union + per-field BM25", [("union", "hybrid.py")]),
            ("  of which field_scores", [("field_scores", "lexical.py")]),
            ("exact cosine", [("similarity", "vector.py")]),
            ("shard features", [("shard_features", "forward_features.py")]),
            ("merge_shards", [("merge_shards", "hybrid.py")]),
            ("broker features merge", [("merge", "forward_features.py")]),
            ("stage rank (all)", [("rank", "ranking.py"), ("rank", "ltr.py")]),
            ("  features (broker)", [("compute_features", "features.py")]),
            ("  LightGBM", [("score", "ltr.py")]),
            ("fetch stored docs", [("_fetch", "search.py")]),
            ("snippets", [("make_snippet", "snippets.py")]),
            ("spelling suggest", [("suggest", "spelling.py")]),
        ]
        out = {
            "ranker": r,
            "queries": len(qs),
            "total_ms_per_q_under_profiler": round(total / len(qs) * 1000, 2),
        }
        for label, keys in named:
            ct = sum(get(fn, fp)[1] for fn, fp in keys)
            out[label] = f"{100 * ct / total:.1f}%"
        for label, fn in [
            ("tantivy Searcher.search", "<method 'search' of 'tantivy.tantivy.Searcher' objects>"),
            ("tantivy doc_freq", "<method 'doc_freq' of 'tantivy.tantivy.Searcher' objects>"),
            ("tantivy doc", "<method 'doc' of 'tantivy.tantivy.Searcher' objects>"),
            ("hnswlib get_items", "<built-in method hnswlib.get_items>"),
            ("hnswlib knn_query", "<built-in method hnswlib.knn_query>"),
            ("analyze", "analyze"),
            ("dataclasses.replace", "replace"),
        ]:
            hits = rows.get(fn, [])
            n = sum(h[1] for h in hits)
            out[f"calls/q {label}"] = round(n / len(qs), 1)
            if label.startswith(("tantivy", "hnswlib")):
                out[f"share {label}"] = f"{100 * sum(h[2] for h in hits) / total:.1f}%"
        print(json.dumps(out))
else:
    out = {}
    for r in rankers:
        hyb = r != "bm25"
        tb = tt = 0.0
        bl, tl = [], []
        for _rep in range(int(mode)):
            for q in qs:
                t0 = time.perf_counter()
                run_bare(q, hyb)
                t1 = time.perf_counter()
                run(q, r)
                t2 = time.perf_counter()
                bl.append(t1 - t0)
                tl.append(t2 - t1)
        bl.sort()
        tl.sort()
        out[r] = {
            "bare_p50_ms": round(bl[len(bl) // 2] * 1000, 3),
            "trawl_p50_ms": round(tl[len(tl) // 2] * 1000, 3),
            "ratio_p50": round(tl[len(tl) // 2] / bl[len(bl) // 2], 2),
            "ratio_mean": round(sum(tl) / sum(bl), 2),
        }
    print(json.dumps(out, indent=1))
