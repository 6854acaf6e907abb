"""``trawl eval``: a ranker's metrics over every judged query of a BEIR collection."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cli.console import make_console
from core.settings import Settings


def eval_command(
    dataset: Annotated[Path, typer.Option("--dataset", help="A BEIR collection directory.")],
    ranker: Annotated[str, typer.Option("--ranker", help="bm25, dense, hybrid-rrf, hybrid, ltr, …")] = "bm25",
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")] = False,
    model: Annotated[Path | None, typer.Option("--model", help="A trained model directory (ltr).")] = None,
    folds: Annotated[int, typer.Option("--folds", min=2, max=20, help="Cross-validation folds.")] = 5,
    shards: Annotated[int, typer.Option("--shards", min=1, max=64, help="Index shards.")] = 1,
    depth: Annotated[int, typer.Option("--depth", min=10, max=1000, help="Results scored per query.")] = 100,
    train_with: Annotated[
        list[Path] | None,
        typer.Option("--train-with", help="ltr: also train every fold model on all of this collection."),
    ] = None,
    sample: Annotated[
        int | None,
        typer.Option("--sample", min=1, help="Score N judged queries: a seeded sample stratified by kind."),
    ] = None,
    sample_seed: Annotated[int, typer.Option("--sample-seed", help="Seed of --sample.")] = 0,
    transfer: Annotated[
        bool,
        typer.Option(
            "--transfer",
            help="ltr: one model trained on the --train-with collections only scores every query "
            "(leave-one-collection-out).",
        ),
    ] = False,
) -> None:
    """Evaluate a ranker as served (the API's search path) on every judged query of a collection.

    nDCG@10, MAP, Recall@100, MRR@10. ``ltr`` without --model serves, to each fold,
    a model trained on the other folds (folds.tsv when the collection has one).
    --sample N scores a deterministic sample of N queries, stratified by their kind.
    --transfer with --train-with measures a model trained on other collections only.

    Example: trawl eval --dataset data/eval/cisi --ranker bm25 --json
    """
    # lazy: loads tantivy; `trawl --help` stays fast
    from training.evaluate import evaluate

    options = {"model": str(model)} if model else {}
    result = evaluate(
        dataset,
        ranker,
        settings=Settings(),
        options=options,
        folds=folds,
        shards=shards,
        depth=depth,
        train_with=tuple(train_with or ()),
        sample=sample,
        sample_seed=sample_seed,
        transfer=transfer,
    )
    if as_json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
        return
    table = Table(title=f"{result.dataset} · {result.ranker} · {result.queries} queries")
    for name in ("nDCG@10", "MAP", "Recall@100", "MRR@10"):
        table.add_column(name, justify="right")
    table.add_row(*(f"{result.means[m]:.4f}" for m in ("ndcg@10", "map", "recall@100", "mrr@10")))
    make_console().print(table)
    for key, value in result.extra.items():
        make_console().print(f"{key}: {value}")
