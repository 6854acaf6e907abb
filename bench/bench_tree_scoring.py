"""LTR scoring of one query's candidates: LightGBM as served, against two compiled forms of its trees.

    .venv/bin/python bench/bench_tree_scoring.py [--collection cranfield] [--rows 100] [--rounds 20]

1. Loads the packaged default model (``models/ltr/default``, the one ``trawl serve`` ranks with).
2. Takes real feature rows: the training frame of an evaluation collection
   (``training.frames.collection_frame``: the hybrid candidates of every judged query and
   the features serving computes for them; built once, then read from its Parquet cache).
   Each query's first ``--rows`` candidates make one call, as one ranked request does.
3. Times, per call, the model's own columns scored by
   - LightGBM ``Booster.predict(num_threads=1)`` summed over the members as
     ``rerank.ltr.predict_mean`` does (the peer: what serving runs today);
   - ONNX Runtime on the model converted by onnxmltools (one session, one intra-op and one
     inter-op thread, float32 input: the converter's only input type); onnxmltools is not a
     Trawl dependency (``pip install onnxmltools`` to include it; skipped otherwise);
   - lleaves, the trees compiled by LLVM to machine code for this CPU (``n_jobs=1``), and
     compiled for the portable x86-64 baseline (an artefact any x86-64 machine can load);
     both scored through ``rerank.compiled_trees.CompiledTrees.predict``, as serving does.
   The backends take turns on each query so load on the machine falls on all of them alike.
4. Checks each against LightGBM on every row (largest absolute difference, rows further
   apart than 1e-5, queries whose order differs) and records compile (or convert) time,
   the load time of a cached artefact and the artefact's size.

Results go to stdout (JSON) and bench/results/tree-scoring.md, latest run first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_serving import EVAL, percentile  # noqa: E402
from bench.results_file import record_run  # noqa: E402
from core.settings import Settings  # noqa: E402
from rerank.compiled_trees import CompiledTrees  # noqa: E402
from rerank.features import SCHEMA  # noqa: E402
from rerank.ltr import LtrModel, member_file, predict_mean  # noqa: E402
from rerank.pipeline import default_model_dir  # noqa: E402
from training.frames import collection_frame  # noqa: E402

RESULTS = REPO / "bench" / "results" / "tree-scoring.md"
Scorer = Callable[[NDArray[np.float64]], NDArray[np.float64]]


def query_matrices(model: LtrModel, collection: str, rows: int) -> list[NDArray[np.float64]]:
    """Each judged query's first ``rows`` candidates (queries with fewer are skipped), model columns."""
    frame = collection_frame(EVAL / collection, Settings()).frame
    out = []
    for _, group in frame.group_by("qid", maintain_order=True):
        if group.height >= rows:
            values = group.head(rows).select(SCHEMA).to_numpy().astype(np.float64)
            out.append(np.ascontiguousarray(model.model_values(values)))
    return out


def onnx_scorer(model: LtrModel) -> tuple[Scorer, dict[str, Any]]:
    """The members converted by onnxmltools, one single-threaded ONNX Runtime session each."""
    import onnxmltools
    import onnxruntime as ort
    from onnxmltools.convert.common.data_types import FloatTensorType

    started = time.perf_counter()
    blobs = [
        onnxmltools.convert_lightgbm(
            booster, initial_types=[("input", FloatTensorType([None, booster.num_feature()]))], zipmap=False
        ).SerializeToString()
        for booster in model.boosters
    ]
    convert_s = time.perf_counter() - started
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    started = time.perf_counter()
    sessions = [ort.InferenceSession(b, options, providers=["CPUExecutionProvider"]) for b in blobs]
    load_s = time.perf_counter() - started

    def score(values: NDArray[np.float64]) -> NDArray[np.float64]:
        x = values.astype(np.float32)
        total = np.zeros(values.shape[0], dtype=np.float64)
        for session in sessions:
            total += np.asarray(session.run(None, {"input": x})[0], dtype=np.float64).ravel()
        return total / len(sessions) if len(sessions) > 1 else total

    info = {
        "compile_s": round(convert_s, 3),
        "cached_load_s": round(load_s, 3),
        "artefact_bytes": sum(len(b) for b in blobs),
        "version": f"onnxmltools {onnxmltools.__version__}, onnxruntime {ort.__version__}",
    }
    return score, info


def lleaves_scorer(model_dir: Path, members: int, *, portable: bool) -> tuple[Scorer, dict[str, Any]]:
    """The members compiled by lleaves (fp64), for this CPU or the portable x86-64 baseline."""
    from importlib.metadata import version

    import lleaves

    target = {"target_cpu": "x86-64", "target_cpu_features": ""} if portable else {}
    with tempfile.TemporaryDirectory(prefix="bench-lleaves-") as tmp:
        caches = [Path(tmp) / f"member-{i}.o" for i in range(members)]
        started = time.perf_counter()
        for i, cache in enumerate(caches):
            lleaves.Model(str(model_dir / member_file(i))).compile(cache=str(cache), **target)
        compile_s = time.perf_counter() - started
        started = time.perf_counter()
        compiled = []
        for i, cache in enumerate(caches):
            forest = lleaves.Model(str(model_dir / member_file(i)))
            forest.compile(cache=str(cache), **target)  # the cached object: no compilation
            compiled.append(forest)
        load_s = time.perf_counter() - started
        size = sum(c.stat().st_size for c in caches)

    # Scored as serving scores: CompiledTrees.predict (LightGBM's reading of tiny inputs, the
    # members' float64 mean).
    score = CompiledTrees(compiled, record={}, directory=Path(tmp)).predict

    info = {
        "compile_s": round(compile_s, 3),
        "cached_load_s": round(load_s, 3),
        "artefact_bytes": size,
        "version": f"lleaves {version('lleaves')}, llvmlite {version('llvmlite')}",
    }
    return score, info


def agreement(reference: list[NDArray[np.float64]], scores: list[NDArray[np.float64]]) -> dict[str, Any]:
    """Largest absolute difference, rows off by more than 1e-5, queries ordered differently."""
    diff = np.concatenate([np.abs(a - b) for a, b in zip(reference, scores, strict=True)])
    reordered = sum(
        1
        for a, b in zip(reference, scores, strict=True)
        if not np.array_equal(np.argsort(-a, kind="stable"), np.argsort(-b, kind="stable"))
    )
    return {
        "max_abs_diff": float(diff.max()),
        "rows_off_1e-5": int((diff > 1e-5).sum()),
        "queries_reordered": reordered,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collection", default="cranfield")
    parser.add_argument("--rows", type=int, default=100, help="candidates scored per call")
    parser.add_argument("--rounds", type=int, default=20, help="passes over every query")
    args = parser.parse_args()

    model_dir = default_model_dir()
    if model_dir is None:
        raise SystemExit("no models/ltr/default: nothing to benchmark")
    model = LtrModel.load(model_dir)
    load_before = round(os.getloadavg()[0], 2)
    matrices = query_matrices(model, args.collection, args.rows)

    scorers: dict[str, Scorer] = {"lightgbm": lambda v: predict_mean(model.boosters, v)}
    infos: dict[str, dict[str, Any]] = {}
    try:
        scorers["onnxruntime"], infos["onnxruntime"] = onnx_scorer(model)
    except ImportError as exc:  # onnxmltools is the bench's own extra, not a Trawl dependency
        print(f"skipping ONNX Runtime ({exc}): pip install onnxmltools", file=sys.stderr)
    members = len(model.boosters)
    scorers["lleaves"], infos["lleaves"] = lleaves_scorer(model_dir, members, portable=False)
    if platform.machine() == "x86_64":
        scorers["lleaves-x86-64"], infos["lleaves-x86-64"] = lleaves_scorer(model_dir, members, portable=True)

    reference = [scorers["lightgbm"](m) for m in matrices]
    for name, score in scorers.items():
        if name != "lightgbm":
            infos[name].update(agreement(reference, [score(m) for m in matrices]))
    for score in scorers.values():  # warm-up: first calls allocate
        for m in matrices[:20]:
            score(m)

    times: dict[str, list[float]] = {name: [] for name in scorers}
    for _ in range(args.rounds):
        for m in matrices:
            for name, score in scorers.items():
                started = time.perf_counter_ns()
                score(m)
                times[name].append((time.perf_counter_ns() - started) / 1000)

    base = times["lightgbm"]
    results: dict[str, Any] = {
        "model": model.model_id,
        "members": members,
        "trees": sum(b.num_trees() for b in model.boosters),
        "features": len(model.features),
        "collection": args.collection,
        "queries": len(matrices),
        "rows_per_call": args.rows,
        "calls_per_backend": len(base),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_average_before": load_before,
        "backends": {},
    }
    for name, spent in times.items():
        row = {
            "p50_us": round(percentile(spent, 50), 1),
            "p99_us": round(percentile(spent, 99), 1),
            "mean_us": round(float(np.mean(spent)), 1),
            "p50_vs_lightgbm": round(percentile(spent, 50) / percentile(base, 50), 3),
            "p99_vs_lightgbm": round(percentile(spent, 99) / percentile(base, 99), 3),
        }
        results["backends"][name] = row | infos.get(name, {})
    json.dump(results, sys.stdout, indent=1)
    sys.stdout.write("\n")
    write_report(args, results)


def write_report(args: argparse.Namespace, results: dict[str, Any]) -> None:
    header = (
        "| backend | p50 µs | p99 µs | mean µs | p50 × LightGBM | p99 × LightGBM | max abs diff | "
        "rows off > 1e-5 | queries reordered | compile s | cached load s | artefact KiB | version |"
    )
    rows = [header, "|---" * 13 + "|"]
    for name, r in results["backends"].items():
        extra = (
            [
                f"{r['max_abs_diff']:.1e}",
                str(r["rows_off_1e-5"]),
                str(r["queries_reordered"]),
                str(r["compile_s"]),
                str(r["cached_load_s"]),
                f"{r['artefact_bytes'] / 1024:.0f}",
                r["version"],
            ]
            if name != "lightgbm"
            else ["(reference)", "", "", "", "", "", ""]
        )
        cells = [
            name,
            *(str(r[c]) for c in ("p50_us", "p99_us", "mean_us", "p50_vs_lightgbm", "p99_vs_lightgbm")),
        ]
        rows.append("| " + " | ".join([*cells, *extra]) + " |")
    text = (
        f"Model {results['model']} ({results['members']} member(s), {results['trees']} trees, "
        f"{results['features']} features); `python bench/bench_tree_scoring.py --collection "
        f"{args.collection} --rows {args.rows} --rounds {args.rounds}`; {results['machine']}, "
        f"load average {results['load_average_before']} before.\n\n"
        f"{results['queries']} {args.collection} queries × {args.rows} real candidate rows (training frame), "
        f"{results['calls_per_backend']:,} timed calls per backend, backends in turn on each query; "
        f"one thread everywhere. Time per call of {args.rows} rows.\n\n" + "\n".join(rows) + "\n"
    )
    intro = (
        "# Tree scoring: LightGBM against compiled trees\n\n"
        "Made by `bench/bench_tree_scoring.py` (see its docstring).\n"
    )
    record_run(RESULTS, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), text, intro=intro)


if __name__ == "__main__":
    main()
