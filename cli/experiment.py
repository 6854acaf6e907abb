"""``trawl experiment``: offline comparisons, online experiment reports and click simulation."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from cli.console import make_console
from core.settings import Settings
from online.book import ExperimentBook

experiment_app = typer.Typer(
    name="experiment",
    help=(
        "A/B ranking experiments: compare offline, report online, simulate clicks.\n\n"
        "Example: trawl experiment compare --a bm25 --b hybrid --dataset data/eval/cranfield"
    ),
    no_args_is_help=True,
)


def _emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


@experiment_app.command("compare")
def compare_command(
    a: Annotated[str, typer.Option("--a", help="Baseline ranker (rankers.toml or registered name).")],
    b: Annotated[list[str], typer.Option("--b", help="Ranker(s) compared to A; repeat for several (Holm).")],
    dataset: Annotated[list[Path], typer.Option("--dataset", help="A BEIR collection; repeat to pool.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write the Markdown report + SVG here.")] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", help="ndcg@10, map, recall@100 or mrr@10; repeat for several."),
    ] = None,
    resamples: Annotated[
        int, typer.Option("--resamples", min=100, help="Bootstrap/permutation draws.")
    ] = 10_000,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the resampling tests (same seed, same p-values).")
    ] = 0,
    sample: Annotated[
        int | None,
        typer.Option("--sample", min=1, help="Per collection, N judged queries: seeded, stratified by kind."),
    ] = None,
    sample_seed: Annotated[int, typer.Option("--sample-seed", help="Seed of --sample.")] = 0,
) -> None:
    """Paired comparison of rankers on judged collections: deltas, bootstrap CI, randomization and t tests.

    Every ranker is evaluated once (as served, like trawl eval); each --metric gets its
    own tests. With several metrics, --json prints {"metrics": {metric: comparison}} and
    --out writes one report per metric in a subfolder named after it.

    Example: trawl experiment compare --a bm25 --b hybrid --dataset data/eval/cranfield
    --dataset data/eval/cisi --metric ndcg@10 --metric mrr@10 --json --out reports/
    """
    # lazy: loads tantivy and scipy; `trawl --help` stays fast
    from training.experiments.offline import compare_metrics, write_markdown

    metrics = metric or ["ndcg@10"]
    reports = compare_metrics(
        [a, *b],
        dataset,
        settings=Settings(),
        metrics=metrics,
        resamples=resamples,
        seed=seed,
        sample=sample,
        sample_seed=sample_seed,
    )
    objs: dict[str, dict[str, object]] = {}
    console = make_console()
    for report in reports:
        target = out if out is None or len(reports) == 1 else out / report.metric.replace("@", "")
        md_path = write_markdown(report, target) if target is not None else None
        if len(report.pooled) == 1:
            obj = report.pooled[0].to_json()
            obj["datasets"] = {c.scope: c.to_json() for c in report.per_dataset[0]}
        else:
            obj = {"a": a, "metric": report.metric, "comparisons": [c.to_json() for c in report.pooled]}
        if md_path is not None:
            obj["report"] = str(md_path)
        objs[report.metric] = obj
        if as_json:
            continue
        for pooled, per in zip(report.pooled, report.per_dataset, strict=True):
            for c in (pooled, *per):
                console.print(
                    f"{c.scope:>10}  {c.b} − {c.a}  {c.metric} {c.mean_b:.4f} − {c.mean_a:.4f} = "
                    f"{c.delta:+.4f} [{c.ci95[0]:+.4f}, {c.ci95[1]:+.4f}]  p_rand={c.p_randomization:.4f} "
                    f"p_t={c.p_ttest:.4f}  W/T/L {c.wins}/{c.ties}/{c.losses}"
                )
        if md_path is not None:
            console.print(f"report: {md_path}")
    if as_json:
        _emit(objs[metrics[0]] if len(objs) == 1 else {"metrics": objs})


@experiment_app.command("report")
def report_command(
    name: Annotated[str, typer.Argument(help="The experiment's name in experiments.toml.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")] = False,
    log_dir: Annotated[Path | None, typer.Option("--log-dir", help="Override the log directory.")] = None,
) -> None:
    """Analyse an online experiment's impression and click logs (A/B metrics or interleaving, SRM).

    Example: trawl experiment report title-boost --json
    """
    # lazy: loads pyarrow; `trawl --help` stays fast
    from online.logs import resolve_log_dir

    # lazy: loads polars and scipy; `trawl --help` stays fast
    from training.experiments.analysis import report

    settings = Settings()
    book = ExperimentBook.load(settings.experiments.experiments_file)
    result = report(name, log_dir=log_dir or resolve_log_dir(settings), book=book)
    if as_json:
        _emit(result.to_json())
        return
    make_console().print(result.to_markdown(), markup=False, highlight=False)


@experiment_app.command("simulate")
def simulate_command(
    a: Annotated[str, typer.Option("--a", help="Baseline ranker.")],
    b: Annotated[str, typer.Option("--b", help="Other ranker.")],
    dataset: Annotated[list[Path], typer.Option("--dataset", help="A BEIR collection; repeat to pool.")],
    model: Annotated[
        str, typer.Option("--model", help="perfect, navigational or informational.")
    ] = "navigational",
    power: Annotated[
        float, typer.Option("--power", min=0.5, max=0.99, help="Chance of detecting the difference.")
    ] = 0.8,
    reps: Annotated[int, typer.Option("--reps", min=10, help="Simulated experiments to check power.")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the simulated users' clicks.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")] = False,
) -> None:
    """Size an experiment: impressions needed for p < 0.05 by interleaving vs A/B under a cascade click model.

    Example: trawl experiment simulate --a bm25 --b hybrid --dataset data/eval/cranfield --json
    """
    # lazy: loads tantivy and scipy; `trawl --help` stays fast
    from training.experiments.simulator import PRESETS, pooled_runs, size_experiment

    if model not in PRESETS:
        raise typer.BadParameter(f"unknown click model {model!r}; expected one of: {', '.join(PRESETS)}")
    settings = Settings()
    runs_a, runs_b, qrels = pooled_runs(a, b, dataset, settings=settings)
    sizing = size_experiment(runs_a, runs_b, qrels, model=PRESETS[model], power=power, reps=reps, seed=seed)
    obj = {"a": a, "b": b, **sizing.to_json()}
    if as_json:
        _emit(obj)
        return
    make_console().print_json(json.dumps(obj))
