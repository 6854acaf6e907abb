"""``trawl train ltr`` and ``trawl train reranker``: fit the ranking models, write model + card.

Example::

    trawl train ltr --dataset data/eval/cranfield --dataset data/eval/cisi \\
        --out models/ltr/default
    trawl train reranker --dataset data/eval/cisi --out models/reranker/cisi
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from cli.console import make_console
from cli.engine import EngineOption, RayAddressOption, job_engine
from cli.progress_lines import ProgressLines
from core.settings import Settings

ProgressFn = Callable[[str, int, int], None]
"""(stage, done, total), as the training functions report it."""

__all__ = ["train_app"]

console = make_console(stderr=True)
train_app = typer.Typer(
    help="Train ranking models.\n\nExample: trawl train ltr --dataset data/eval/cranfield --out models/ltr",
    no_args_is_help=True,
)


def _progress() -> tuple[AbstractContextManager[object], ProgressFn]:
    """A progress display with one bar per stage the training reports, added when first reported.

    When the console is not a terminal (a log), whole lines per stage now and then instead.
    """
    if not console.is_terminal:
        stages: dict[str, ProgressLines] = {}

        def write(line: str) -> None:
            console.print(line, markup=False, highlight=False)

        def log(what: str, done: int, total: int) -> None:
            if what not in stages:
                stages[what] = ProgressLines(write, what)
            stages[what](done, total)

        return nullcontext(), log
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    progress = Progress(*columns, console=console)
    tasks: dict[str, TaskID] = {}

    def report(what: str, done: int, total: int) -> None:
        if what not in tasks:
            tasks[what] = progress.add_task(what, total=total)
        progress.update(tasks[what], completed=done, total=total)

    return progress, report


@train_app.command("ltr")
def train_ltr_command(
    dataset: Annotated[list[Path], typer.Option("--dataset", help="A BEIR collection; repeat for several.")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write (models/ltr/NAME).")],
    folds: Annotated[int, typer.Option("--folds", min=2, max=20, help="Cross-validation folds.")] = 5,
    depth: Annotated[
        int | None, typer.Option("--depth", min=10, help="Lexical and vector candidates per query.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Fold assignment and LightGBM seed.")] = 0,
    members: Annotated[
        int | None,
        typer.Option(
            "--members",
            min=1,
            max=20,
            help="Boosters averaged (seed bagging; default 5). Each adds its LightGBM time to a query.",
        ),
    ] = None,
    engine: EngineOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Train a LightGBM lambdarank model on judged collections (k-fold CV by query).

    Candidates are the hybrid union (lexical ∪ vector top-depth); the model card records
    the data, features, parameters, per-fold metrics, date and code version.

    With --engine ray the feature frames are built by per-query Ray tasks and cached as
    Parquet where training reads them; training itself runs here.

    Example: trawl train ltr --dataset data/eval/cranfield --out models/ltr/cranfield
    Example: trawl train ltr --dataset data/eval/cisi --out models/ltr/cisi --engine ray
    """
    # lazy: loads LightGBM; `trawl --help` stays fast
    from training.train_ltr import train_ltr_on_collections

    started = time.perf_counter()
    settings = Settings()
    job = job_engine(settings, engine, ray_address)
    progress, on_progress = _progress()
    if job.is_ray:
        # lazy: loads polars and scipy; `trawl --help` stays fast
        from training.ray_training import ray_collection_frame

        with job.session(), progress:
            for root in dataset:
                what = f"features on ray · {root.name}"
                path, frame = ray_collection_frame(
                    root,
                    settings,
                    depth=depth,
                    on_progress=functools.partial(on_progress, what),
                )
                console.print(f"{root.name}: {frame.height:,} feature rows → {path}")
    with progress:
        model, cv = train_ltr_on_collections(
            dataset,
            settings,
            name=out.name,
            folds=folds,
            depth=depth,
            seed=seed,
            members=members,
            on_progress=on_progress,
        )
    model.save(out, compile_trees=True)
    collections, rows = len(model.card["data"]), int(model.card["rows"])
    table = Table(title=f"{model.model_id} · {collections} collection(s) · {rows:,} rows")
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
    make_console().print(table)
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

    This writes the deployable model, trained on all queries; its card records the data
    and parameters. `trawl eval` does not measure ltr+ce held out (that would fine-tune
    one cross-encoder per fold). Serve it with
    TRAWL_RANK__RERANKER_MODEL=DIR.

    Example: trawl train reranker --dataset data/eval/cisi --out models/reranker/cisi
    """
    # lazy: loads tantivy and polars (torch when training); `trawl --help` stays fast
    from training.train_reranker import RerankerParams, save_reranker, train_reranker_on_collections

    started = time.perf_counter()
    params = RerankerParams(max_pairs=max_pairs, threads=threads, seed=seed)
    progress, on_progress = _progress()
    with progress:
        reranker, card = train_reranker_on_collections(
            dataset, Settings(), name=out.name, params=params, depth=depth, on_progress=on_progress
        )
    save_reranker(reranker, out, card)
    stats = card["training"]
    console.print(
        f"wrote {out}: {stats['pairs']} pairs ({stats['positives']} positive) "
        f"from {stats['queries']} queries, "
        f"{stats['steps']} steps, last loss {stats['last_loss']}, {time.perf_counter() - started:.1f} s"
    )
