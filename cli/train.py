"""``trawl train ltr`` and ``trawl train reranker``: fit the ranking models, write model + card.

Example::

    trawl train ltr --dataset ../shared/data/eval/cranfield --dataset ../shared/data/eval/cisi \\
        --out models/ltr/default
    trawl train reranker --dataset ../shared/data/eval/cisi --out models/reranker/cisi
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from core.settings import Settings

__all__ = ["register"]

console = Console(stderr=True)
train_app = typer.Typer(help="Train ranking models.", no_args_is_help=True)


@train_app.command("ltr")
def train_ltr_command(
    dataset: Annotated[list[Path], typer.Option("--dataset", help="A BEIR collection; repeat for several.")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write (models/ltr/NAME).")],
    folds: Annotated[int, typer.Option("--folds", min=2, max=20, help="Cross-validation folds.")] = 5,
    depth: Annotated[
        int | None, typer.Option("--depth", min=10, help="Lexical and vector candidates per query.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Fold assignment and LightGBM seed.")] = 0,
) -> None:
    """Train a LightGBM lambdarank model on judged collections (k-fold CV by query).

    Candidates are the hybrid union (lexical ∪ vector top-depth); the model card records
    the data, features, parameters, per-fold metrics, date and code version.

    Example: trawl train ltr --dataset ../shared/data/eval/cranfield --out models/ltr/cranfield
    """
    import dataclasses

    import polars as pl

    from training.datasets import BeirDataset
    from training.features import beir_labels, collection_frame
    from training.train_ltr import LtrParams, train_ltr

    settings = Settings()
    started = time.perf_counter()
    frames: list[pl.DataFrame] = []
    qrels: dict[str, dict[str, int]] = {}
    data: list[dict[str, object]] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        for root in dataset:
            beir = BeirDataset.open(root)
            task = progress.add_task(f"features · {beir.name}", total=None)

            def on_features(done: int, total: int, task: int = task) -> None:
                progress.update(task, completed=done, total=total)

            built = collection_frame(root, settings, depth=depth, on_progress=on_features)
            if progress.tasks[task].total is None:  # read from the Parquet cache: nothing to count
                progress.update(task, completed=1, total=1, description=f"features · {beir.name} (cached)")
            prefix = f"{beir.name}:"
            frames.append(built.frame.with_columns((pl.lit(prefix) + pl.col("qid")).alias("qid")))
            for qid, judged in beir_labels(beir, beir.qrels()).items():
                qrels[prefix + qid] = {str(d): g for d, g in judged.items()}
            data.append(
                {
                    "dataset": beir.name,
                    "path": str(root),
                    "fingerprint": beir.fingerprint(),
                    "queries": built.frame["qid"].n_unique(),
                    "rows": built.frame.height,
                    "frame": str(built.path),
                    "candidates": f"hybrid union: lexical top-{built.depth} ∪ vector top-{built.depth}",
                    "embed_model": settings.embed.model_dump(mode="json"),
                }
            )
        frame = pl.concat(frames, how="vertical")
        cv_task = progress.add_task("cross-validation", total=folds)

        def on_training(what: str, done: int, total: int) -> None:
            if what == "cross-validation":
                progress.update(cv_task, completed=done, total=total)
            else:
                progress.update(final_task, completed=done, total=total)

        final_task = progress.add_task("final model", total=1)
        params = dataclasses.replace(LtrParams(), seed=seed)
        model, cv = train_ltr(
            frame,
            qrels,
            name=out.name,
            data=data,
            params=params,
            folds=folds,
            seed=seed,
            on_progress=on_training,
        )
    model.save(out)
    table = Table(title=f"{model.model_id} · {len(data)} collection(s) · {frame.height:,} rows")
    for column in ("fold", "train q", "test q", "rounds", "nDCG@10", "MAP", "R@100", "MRR@10"):
        table.add_column(column, justify="right")
    for f in cv.folds:
        m = f.metrics
        table.add_row(
            str(f.fold),
            str(f.train_queries),
            str(f.test_queries),
            str(f.rounds),
            *(f"{m[k]:.4f}" for k in ("ndcg@10", "map", "recall@100", "mrr@10")),
        )
    means = cv.means()
    table.add_row(
        "mean", "", "", "", *(f"{means[k]:.4f}" for k in ("ndcg@10", "map", "recall@100", "mrr@10"))
    )
    Console().print(table)
    console.print(f"wrote {out} in {time.perf_counter() - started:.1f} s (CV {cv.seconds:.1f} s)")


@train_app.command("reranker")
def train_reranker_command(
    dataset: Annotated[list[Path], typer.Option("--dataset", help="A BEIR collection; repeat for several.")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write (models/reranker/NAME).")],
    max_pairs: Annotated[
        int, typer.Option("--max-pairs", min=8, help="Most training pairs (sampled) over all collections.")
    ] = 1024,
    threads: Annotated[int, typer.Option("--threads", min=1, help="Torch threads while training.")] = 2,
    depth: Annotated[
        int | None, typer.Option("--depth", min=10, help="Lexical and vector candidates per query.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Head initialisation, sampling and batch order.")] = 0,
) -> None:
    """Fine-tune the MiniLM cross-encoder on judged positives and hard negatives of every judged query.

    Held-out quality is what `trawl eval --ranker ltr+ce` measures (one model per fold);
    this writes the deployable model, trained on all queries. Serve it with
    TRAWL_RANK__RERANKER_MODEL=DIR.

    Example: trawl train reranker --dataset ../shared/data/eval/cisi --out models/reranker/cisi
    """
    from collections.abc import Sequence

    import polars as pl

    from core.types import DocId
    from retrieval.build import shard_dir
    from retrieval.embed import default_model_path
    from retrieval.lexical import LexicalShard
    from training.datasets import BeirDataset
    from training.evaluate import cached_index
    from training.features import beir_labels, collection_frame
    from training.train_reranker import (
        RerankerParams,
        model_card,
        save_reranker,
        shard_texts,
        train_fold,
    )

    settings = Settings()
    started = time.perf_counter()
    params = RerankerParams(max_pairs=max_pairs, threads=threads, seed=seed)
    frames: list[pl.DataFrame] = []
    labels: dict[str, dict[DocId, int]] = {}
    query_texts: dict[str, str] = {}
    shards: dict[str, LexicalShard] = {}
    data: list[dict[str, object]] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        for root in dataset:
            beir = BeirDataset.open(root)
            task = progress.add_task(f"candidates · {beir.name}", total=None)
            built = collection_frame(root, settings, depth=depth)
            progress.update(task, completed=1, total=1)
            index_dir, _ = cached_index(beir, settings)
            prefix = f"{beir.name}:"
            shards[prefix] = LexicalShard(shard_dir(index_dir, 0) / "lexical")
            frames.append(built.frame.with_columns((pl.lit(prefix) + pl.col("qid")).alias("qid")))
            for qid, judged in beir_labels(beir, beir.qrels()).items():
                labels[prefix + qid] = dict(judged)
            query_texts.update({prefix + q: t for q, t in beir.judged_queries().items()})
            data.append({"dataset": beir.name, "path": str(root), "fingerprint": beir.fingerprint()})
        frame = pl.concat(frames, how="vertical")
        readers = {p: shard_texts(s) for p, s in shards.items()}

        def doc_texts(doc_ids: Sequence[DocId]) -> dict[DocId, str]:
            out: dict[DocId, str] = {}
            for reader in readers.values():  # doc ids are collection-scoped hashes: no clashes
                out.update(reader([d for d in doc_ids if d not in out]))
            return out

        train_task = progress.add_task("fine-tuning", total=None)

        def on_step(done: int, total: int) -> None:
            progress.update(train_task, completed=done, total=total)

        base = default_model_path()
        reranker, stats = train_fold(
            base, frame, labels, sorted(query_texts), query_texts, doc_texts, params, on_progress=on_step
        )
    card = model_card(name=out.name, base_model=base, data=data, params=params, stats=stats)
    card["training_seconds"] = round(time.perf_counter() - started, 2)
    save_reranker(reranker, out, card)
    console.print(
        f"wrote {out}: {stats['pairs']} pairs ({stats['positives']} positive) "
        f"from {stats['queries']} queries, "
        f"{stats['steps']} steps, last loss {stats['last_loss']}, {time.perf_counter() - started:.1f} s"
    )


def register(app: typer.Typer) -> None:
    """Add ``trawl train …`` to the main command line (called by ``api.cli``)."""
    app.add_typer(train_app, name="train")
