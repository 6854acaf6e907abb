"""``trawl search``: query an index from the terminal, with the service's rankers and explain."""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from cli.console import make_console
from core.settings import Settings


def search_command(
    query: Annotated[
        str, typer.Argument(help='The query, with operators: "phrase" -term site: lang: filetype:')
    ],
    index: Annotated[Path, typer.Option("--index", help="Index root (or one generation directory).")],
    page: Annotated[int, typer.Option("--page", min=1, help="Result page, from 1.")] = 1,
    size: Annotated[int, typer.Option("--size", min=1, help="Results per page.")] = 10,
    ranker: Annotated[
        str | None, typer.Option("--ranker", help="bm25, hybrid-rrf, hybrid, ltr (default: best)")
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show why each result ranks where it does.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the API's JSON response on stdout instead of a list.")
    ] = False,
) -> None:
    """Search an index from the terminal.

    Example: trawl search '"list comprehension" -lambda' --index data/index --ranker ltr --explain
    """
    # lazy: FastAPI, tantivy and hnswlib; `trawl --help` stays fast
    from api.app import open_search_service
    from retrieval.query.request import SearchRequest  # lazy: crawl workers load no retrieval code

    settings = Settings()
    service = open_search_service(settings, index)
    response = service.search(
        SearchRequest(
            query, page=page, size=size, ranker=ranker, explain=explain, reader_lang=settings.rank.user_lang
        )
    )
    for problem in service.problems():  # a damaged file: its shard (or its vectors) sat this one out
        typer.echo(f"warning: {problem}", err=True)
    if as_json:
        # lazy: crawl workers import this module, and no api code (tests/unit/cli/test_crawl_imports.py)
        from api.schemas import SearchResponseModel

        sys.stdout.write(SearchResponseModel.from_domain(response).model_dump_json() + "\n")
        return
    out = make_console()
    out.print(
        f"{response.total:,} results · {response.took_ms:.1f} ms · {response.ranker} · {response.generation}",
        markup=False,
        highlight=False,
    )
    if response.ignored_words:
        out.print(
            f"very common words of a long query are not searched: {', '.join(response.ignored_words)}",
            markup=False,
            highlight=False,
        )
    for rank, hit in enumerate(response.hits, start=response.size * (response.page - 1) + 1):
        out.print(result_text(rank, hit.title, hit.score, hit.link, hit.snippet), highlight=False)
        if hit.section is not None and hit.section.anchor:
            out.print(f"   jump to: {hit.section.heading}", markup=False, highlight=False)
        if hit.translations:
            also = ", ".join(lang for lang, _ in hit.translations)
            out.print(f"   also in: {also}", markup=False, highlight=False)
        if explain and hit.explain:
            out.print("   " + json.dumps(hit.explain, default=str), markup=False, highlight=False)


_MARK = re.compile(r"<mark>(.*?)</mark>", re.DOTALL)


def snippet_text(snippet: str, *, style: str = "bold yellow") -> Text:
    """A result snippet (HTML-escaped text with ``<mark>``) as terminal text.

    Only our own ``<mark>`` tags become styling; everything else is unescaped to the
    characters it stands for and is never read as Rich markup.
    """
    text = Text()
    cursor = 0
    for match in _MARK.finditer(snippet):
        text.append(html.unescape(snippet[cursor : match.start()]))
        text.append(html.unescape(match.group(1)), style=style)
        cursor = match.end()
    text.append(html.unescape(snippet[cursor:]))
    return text


def result_text(rank: int, title: str, score: float, url: str, snippet: str) -> Text:
    """One result as three lines of terminal text (title bold, URL dim, snippet highlighted)."""
    text = Text()
    text.append(f"{rank}. {title}", style="bold")
    text.append(f"  ({score:.3f})\n   ")
    text.append(url, style="dim")
    text.append("\n   ")
    text.append_text(snippet_text(snippet))
    return text
