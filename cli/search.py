"""``trawl search``: query an index from the terminal, with the service's rankers and explain."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from core.settings import Settings


def search_command(
    query: Annotated[
        str, typer.Argument(help='The query, with operators: "phrase" -term site: lang: filetype:')
    ],
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    page: Annotated[int, typer.Option("--page", min=1)] = 1,
    size: Annotated[int, typer.Option("--size", min=1)] = 10,
    ranker: Annotated[
        str | None, typer.Option("--ranker", help="bm25, hybrid-rrf, hybrid, ltr (default: best)")
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show why each result ranks where it does.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Search an index from the terminal.

    Example: trawl search '"list comprehension" -lambda' --index data/index --ranker ltr --explain
    """
    from api.app import open_search_service

    service = open_search_service(Settings(), index)
    response = service.search(query, page=page, size=size, ranker=ranker, explain=explain)
    if as_json:
        from api.schemas import SearchResponseModel

        sys.stdout.write(SearchResponseModel.from_domain(response).model_dump_json() + "\n")
        return
    out = Console()
    out.print(
        f"{response.total:,} results · {response.took_ms:.1f} ms · {response.ranker} · {response.generation}"
    )
    for rank, hit in enumerate(response.hits, start=response.size * (response.page - 1) + 1):
        out.print(f"[bold]{rank}. {hit.title}[/bold]  ({hit.score:.3f})", markup=True, highlight=False)
        out.print(f"   {hit.url}\n   {hit.snippet}", markup=False, highlight=False)
        if explain and hit.explain:
            out.print("   " + json.dumps(hit.explain, default=str), markup=False, highlight=False)
