"""``trawl dataset from-crawl``: a judged BEIR collection derived from a crawl's own pages and links.

Example::

    trawl dataset from-crawl --data data/demo/crawl --out data/eval-crawl/pydocs
    trawl eval --dataset data/eval-crawl/pydocs --ranker bm25 --json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cli.console import make_console
from cli.ports import free_port

__all__ = ["dataset_app"]

dataset_app = typer.Typer(
    help=(
        "Build judged collections.\n\n"
        "Example: trawl dataset from-crawl --data data/demo/crawl --out data/pydocs-qrels"
    ),
    no_args_is_help=True,
)
console = make_console(stderr=True)


@dataset_app.command("from-crawl")
def from_crawl_command(
    data: Annotated[Path, typer.Option("--data", help="A crawl's data directory (docs/, links/).")],
    out: Annotated[Path, typer.Option("--out", help="Where the BEIR collection goes (replaced).")],
    max_per_page: Annotated[
        int, typer.Option("--max-per-page", min=1, help="Most queries whose primary target is one page.")
    ] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seeds tie-breaks and the fold hash.")] = 0,
) -> None:
    """Known-item queries from anchors, titles and headings, graded, split into folds by page.

    Example: trawl dataset from-crawl --data data/demo/crawl --out data/eval-crawl/pydocs
    """
    # lazy: loads polars; `trawl --help` stays fast
    from training.crawl_dataset import build_crawl_dataset

    with console.status("deriving queries…"):
        report = build_crawl_dataset(data, out, max_per_page=max_per_page, seed=seed)
    table = Table(title=f"{report.out} · {report.queries} queries")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("pages in corpus", str(report.pages))
    table.add_row("pages judged", str(report.judged_pages))
    for kind, count in report.queries_by_kind.items():
        table.add_row(f"queries: {kind}", str(count))
    for grade, count in report.grades.items():
        table.add_row(f"judgments: grade {grade}", str(count))
    for fold, count in report.queries_by_fold.items():
        table.add_row(f"queries: fold {fold}", str(count))
    table.add_row("dropped (would chain folds)", str(report.dropped_for_folds))
    table.add_row("site-name suffix", repr(report.site_suffix) if report.site_suffix else "none found")
    console.print(table)


@dataset_app.command("crawl-sets")
def crawl_sets_command(
    site: Annotated[
        list[str] | None,
        typer.Option("--site", help="pydocs, pgdocs or sqlitedocs (repeat; default: every one installed)."),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Where the sets go, one folder each.")] = Path(
        "data/eval-crawl"
    ),
    root: Annotated[
        list[str] | None, typer.Option("--root", help="NAME=DIR: crawl DIR as the set NAME instead.")
    ] = None,
) -> None:
    """The crawl-derived judged sets rankers.toml's recipes train on, each crawled on loopback.

    Example: trawl dataset crawl-sets --site pydocs   (then: trawl experiment compare --a bm25 --b ltr …)
    """
    # lazy: crawl workers import this module, and no training code (tests/unit/cli/test_crawl_imports.py)
    from training.crawl_sets import SITES, build_crawl_set

    roots = dict(item.split("=", 1) for item in root or [] if "=" in item)
    if len(roots) != len(root or []):
        raise typer.BadParameter("--root takes NAME=DIR", param_hint="--root")
    names = list(site or []) + [n for n in roots if n not in (site or [])]
    if not names:
        names = [n for n, s in SITES.items() if (s.root / "index.html").exists()]
        skipped = [f"{n} (apt-get install {s.package})" for n, s in SITES.items() if n not in names]
        if skipped:
            console.print(f"not installed, skipped: {', '.join(skipped)}")
    for name in names:
        with console.status(f"{name}: crawling and deriving queries…"):
            given = Path(roots[name]) if name in roots else None
            report = build_crawl_set(name, out / name, site_port=free_port(), root=given)
        console.print(f"{report.out}: {report.queries:,} queries over {report.pages:,} pages")


@dataset_app.command("title-only")
def title_only_command(
    dataset: Annotated[Path, typer.Option("--dataset", help="A BEIR collection directory.")],
    out: Annotated[Path, typer.Option("--out", help="Where the variant goes (replaced).")],
    seed: Annotated[int, typer.Option("--seed", help="Chooses which documents lose their body.")] = 0,
    body_words: Annotated[
        int | None, typer.Option("--body-words", min=1, help="Cut every other body to its first N words.")
    ] = None,
) -> None:
    """A copy of a collection with the body of half its documents dropped (seeded).

    Example: trawl dataset title-only --dataset data/eval/cisi --out data/eval/cisi-title --seed 0
    Short documents: trawl dataset title-only --dataset D --out D-short --body-words 30
    """
    # lazy: crawl workers import this module, and no training code (tests/unit/cli/test_crawl_imports.py)
    from training.title_only import title_only_variant

    report = title_only_variant(dataset, out, seed=seed, body_words=body_words)
    console.print(f"{report.out}: {report.title_only} of {report.documents} documents are title-only")
